"""A2A tasks followed as a client does: a streaming message read in the background, and
the calls that act on a task while it runs (cancel, get)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import anyio
import httpx

from tests.support.server import RunningBridge
from tests.support.wire import TERMINAL, rpc, state_of, status_text, stream, submit, user_message

# Bound on any wait for a task to reach a state in these tests.
TASK_WAIT_S = 30.0


@dataclass
class StreamedTask:
    """One SendStreamingMessage, read as it streams."""

    events: list[dict[str, Any]] = field(default_factory=list)
    task_id: str | None = None
    context_id: str | None = None
    error: BaseException | None = None
    finished: anyio.Event = field(default_factory=anyio.Event)
    _changed: anyio.Event = field(default_factory=anyio.Event)

    async def run(self, client: httpx.AsyncClient, url: str, message: dict[str, Any]) -> None:
        try:
            async for event in stream(client, url, {"message": message}):
                if "task" in event:
                    self.task_id = event["task"]["id"]
                    self.context_id = event["task"]["contextId"]
                self.events.append(event)
                self._poke()
        except (httpx.HTTPError, AssertionError) as exc:
            self.error = exc
        finally:
            self.finished.set()
            self._poke()

    def _poke(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()

    @property
    def states(self) -> list[str]:
        return [state for state in map(state_of, self.events) if state is not None]

    @property
    def final_state(self) -> str | None:
        terminal = [state for state in self.states if state in TERMINAL]
        return terminal[-1] if terminal else None

    @property
    def final_text(self) -> str:
        for event in reversed(self.events):
            if "statusUpdate" in event and state_of(event) in TERMINAL:
                return status_text(event["statusUpdate"]["status"])
        return ""

    def status_messages(self) -> list[str]:
        """The text of every status update that carries one, in order."""
        return [
            status_text(event["statusUpdate"]["status"])
            for event in self.events
            if "statusUpdate" in event and status_text(event["statusUpdate"]["status"])
        ]

    async def wait_for(
        self, predicate: Callable[[StreamedTask], bool], within_s: float = TASK_WAIT_S
    ) -> None:
        with anyio.fail_after(within_s):
            while not predicate(self):
                if self.finished.is_set():
                    raise AssertionError(f"the stream ended first: {self.states} {self.error}")
                await self._changed.wait()

    async def wait_state(self, state: str, within_s: float = TASK_WAIT_S) -> None:
        await self.wait_for(lambda task: state in task.states, within_s)

    async def wait_end(self, within_s: float = TASK_WAIT_S) -> None:
        with anyio.fail_after(within_s):
            await self.finished.wait()


def start_stream(
    group: anyio.abc.TaskGroup,
    client: httpx.AsyncClient,
    url: str,
    text: str,
    **message_fields: Any,
) -> StreamedTask:
    """Send `text` as a streaming message in `group`; follow it through the result."""
    task = StreamedTask()
    group.start_soon(task.run, client, url, user_message(text, **message_fields))
    return task


async def cancel_task(client: httpx.AsyncClient, url: str, task_id: str) -> dict[str, Any]:
    return await rpc(client, url, "CancelTask", {"id": task_id})


async def get_task(client: httpx.AsyncClient, url: str, task_id: str) -> dict[str, Any]:
    reply = await rpc(client, url, "GetTask", {"id": task_id})
    assert "result" in reply, reply
    task: dict[str, Any] = reply["result"]
    return task


async def start_sleeping(client: httpx.AsyncClient, bridge: RunningBridge) -> dict[str, Any]:
    """A demo-agent task that runs until cancelled, once the agent has its prompt."""
    task = await submit(client, bridge.rpc_url, "sleep 600")
    with anyio.fail_after(TASK_WAIT_S):
        while True:
            root = bridge.bridge.root_of(task["contextId"])
            if root is not None and any(root.glob(".demo-agent/*.jsonl")):
                return task
            await anyio.sleep(0.02)  # polled: the agent's transcript, another process's file
