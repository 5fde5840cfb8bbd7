"""Cancel and crash mid-turn with each real adapter, through the bridge over HTTP.

The fake model stalls the adapter's request, so the turn is certainly running when the
test acts: a CancelTask must end the task CANCELED and, once the conversation's adapter is
reaped for idleness, leave none of its processes behind; a killed adapter must fail the
task with its exit named, and the conversation's next message must work again.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from tests.fakes.anthropic import FakeAnthropic
from tests.fakes.gemini import FakeGemini
from tests.fakes.openai import FakeOpenAI
from tests.fakes.script import Say, Script, Stall
from tests.fakes.server import FakeModelServer
from tests.support.real_adapters import (
    HTTP_TIMEOUT_S,
    Rig,
    claude_rig,
    codex_rig,
    gemini_rig,
    log_events,
    process_tree,
    wait_gone,
    watch_logs,
)
from tests.support.server import serve_bridge
from tests.support.wire import (
    TERMINAL,
    answer_text,
    rpc,
    send,
    state_of,
    status_text,
    stream,
    user_message,
)

pytestmark = [pytest.mark.anyio, pytest.mark.adapters]

# Bound on waiting for the reaper to stop an idle adapter and for its tree to go.
REAP_WAIT_S = 30.0
# The idle limit for these tests: short, so the reaper runs within the test.
IDLE_MS = "500"


@pytest.fixture(scope="module")
def fakes() -> Iterator[dict[str, FakeModelServer]]:
    servers: dict[str, FakeModelServer] = {
        "claude": FakeAnthropic(),
        "codex": FakeOpenAI(),
        "gemini": FakeGemini(),
    }
    for server in servers.values():
        server.start()
    try:
        yield servers
    finally:
        for server in servers.values():
            server.stop()


@pytest.fixture(params=["claude", "codex", "gemini"])
def rig(
    request: pytest.FixtureRequest,
    fakes: dict[str, FakeModelServer],
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> Rig:
    watch_logs(caplog)
    fake = fakes[request.param]
    if isinstance(fake, FakeAnthropic):
        return claude_rig(fake, tmp_path)
    if isinstance(fake, FakeOpenAI):
        return codex_rig(fake, tmp_path)
    assert isinstance(fake, FakeGemini)
    return gemini_rig(fake, tmp_path)


def spawned_pids(caplog: pytest.LogCaptureFixture) -> list[int]:
    return [int(event["pid"]) for event in log_events(caplog, "adapter spawned")]


async def test_cancel_mid_turn_ends_canceled_and_the_idle_reap_leaves_no_process(
    rig: Rig, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    script = rig.fake.add(Script([Stall()]))
    settings = rig.settings(tmp_path, ACP_IDLE_TIMEOUT_MS=IDLE_MS)
    async with (
        serve_bridge(settings, environ=rig.environ) as bridge,
        httpx.AsyncClient(timeout=HTTP_TIMEOUT_S) as client,
    ):
        params = {"message": user_message(f"Think for a long time. {script.marker}")}
        events: list[dict[str, Any]] = []
        async for event in stream(client, bridge.rpc_url, params):
            events.append(event)
            if len(events) == 1:
                task_id = event["task"]["id"]
                await rig.wait_stalled()
                [pid] = spawned_pids(caplog)
                tree = process_tree(pid)
                assert pid in tree
                cancelled = await rpc(client, bridge.rpc_url, "CancelTask", {"id": task_id})
                assert "result" in cancelled, cancelled
            if state_of(event) in TERMINAL:
                break
        assert state_of(events[-1]) == "TASK_STATE_CANCELED"
        stored = await rpc(client, bridge.rpc_url, "GetTask", {"id": task_id})
        assert stored["result"]["status"]["state"] == "TASK_STATE_CANCELED"
        assert "Cancelled at the caller's request." in status_text(stored["result"]["status"])
        await wait_gone(tree, REAP_WAIT_S)
        assert log_events(caplog, "adapter idle: stopping it")
        assert bridge.bridge.live_adapters == 0
    assert rig.outside() == []


async def test_an_adapter_killed_mid_turn_fails_the_task_and_the_next_message_works(
    rig: Rig, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    stalled = rig.fake.add(Script([Stall()]))
    after = rig.fake.add(Script([Say("back after the crash")]))
    async with (
        serve_bridge(rig.settings(tmp_path), environ=rig.environ) as bridge,
        httpx.AsyncClient(timeout=HTTP_TIMEOUT_S) as client,
    ):
        async with anyio.create_task_group() as group:
            failed: dict[str, Any] = {}

            async def first() -> None:
                failed.update(await send(client, bridge.rpc_url, f"Work. {stalled.marker}"))

            group.start_soon(first)
            await rig.wait_stalled()
            [pid] = spawned_pids(caplog)
            tree = process_tree(pid)
            os.kill(pid, signal.SIGKILL)
        assert failed["status"]["state"] == "TASK_STATE_FAILED"
        note = status_text(failed["status"])
        assert f"(pid {pid}) was killed by SIGKILL" in note
        task = await send(
            client, bridge.rpc_url, f"Are you there? {after.marker}", context_id=failed["contextId"]
        )
        assert task["status"]["state"] == "TASK_STATE_COMPLETED", status_text(task["status"])
        assert "back after the crash" in answer_text(task)
        assert len(spawned_pids(caplog)) == 2
        # The dead adapter's whole tree went, not only the process the test killed.
        await wait_gone(tree, REAP_WAIT_S)
    assert rig.outside() == []
