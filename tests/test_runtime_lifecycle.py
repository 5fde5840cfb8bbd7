"""Adapter lifecycles through the running bridge: restart after a crash (loading the old
session when the agent can), idle reaping, whole-tree stops behind shims and daemons, and
shutdown of the real server process on SIGTERM and SIGINT."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from tests.support.agents import agent_io, logged_agent, wrapped_agent
from tests.support.procs import (
    events,
    living,
    processes,
    read_log,
    wait_for_event,
    wait_until_gone,
)
from tests.support.server import make_settings, serve_bridge
from tests.support.tasks import StreamedTask, cancel_task, start_stream
from tests.support.wire import answer_text, send, status_text

pytestmark = pytest.mark.anyio


def crash_then_answer(**extra: Any) -> dict[str, Any]:
    return {
        "by_prompt": {
            "crash": [{"op": "say", "text": "about to fall"}, {"op": "crash", "code": 7}],
        },
        "turns": [[{"op": "say", "text": "answering"}]],
        **extra,
    }


async def test_after_a_crash_the_next_message_starts_a_new_adapter_that_loads_the_session(
    tmp_path: Path,
) -> None:
    agent, log = logged_agent(tmp_path, crash_then_answer(load_session=True))
    settings = make_settings(tmp_path, {"ACP_AGENT": agent})
    async with serve_bridge(settings) as bridge, httpx.AsyncClient(timeout=30) as client:
        crashed = await send(client, bridge.rpc_url, "crash")
        context_id = crashed["contextId"]
        again = await send(client, bridge.rpc_url, "hello again", context_id=context_id)
        root = bridge.bridge.root_of(context_id)
    assert crashed["status"]["state"] == "TASK_STATE_FAILED"
    assert "exited with code 7" in status_text(crashed["status"])
    assert again["status"]["state"] == "TASK_STATE_COMPLETED"
    assert "answering" in answer_text(again)
    starts = events(log, "start")
    assert len(starts) == 2
    new_session = events(log, "session/new")[0]
    loaded = events(log, "session/load")
    assert len(loaded) == 1
    assert loaded[0]["agent"] == starts[1]["pid"]
    assert loaded[0]["params"]["sessionId"] == first_session(log)
    assert loaded[0]["params"]["cwd"] == new_session["params"]["cwd"] == str(root)
    assert not any("memory" in text for text in history_texts(again))
    assert living(log) == []


async def test_an_agent_that_offers_session_resume_is_resumed_rather_than_loaded(
    tmp_path: Path,
) -> None:
    agent, log = logged_agent(tmp_path, crash_then_answer(load_session=True, resume=True))
    settings = make_settings(tmp_path, {"ACP_AGENT": agent})
    async with serve_bridge(settings) as bridge, httpx.AsyncClient(timeout=30) as client:
        crashed = await send(client, bridge.rpc_url, "crash")
        context_id = crashed["contextId"]
        again = await send(client, bridge.rpc_url, "hello again", context_id=context_id)
        root = bridge.bridge.root_of(context_id)
    assert again["status"]["state"] == "TASK_STATE_COMPLETED"
    assert events(log, "session/load") == []
    resumed = events(log, "session/resume")
    assert [entry["params"]["sessionId"] for entry in resumed] == [first_session(log)]
    assert resumed[0]["params"]["cwd"] == str(root)
    assert not any("memory" in text for text in history_texts(again))


def first_session(log: Path) -> str:
    return str(events(log, "session/prompt")[0]["params"]["sessionId"])


def history_texts(task: dict[str, Any]) -> list[str]:
    return [
        "".join(part.get("text", "") for part in message.get("parts", []))
        for message in task.get("history", [])
        if message.get("role") == "ROLE_AGENT"
    ]


async def test_without_load_session_the_new_tasks_first_status_says_the_memory_was_lost(
    tmp_path: Path,
) -> None:
    agent, log = logged_agent(tmp_path, crash_then_answer(load_session=False))
    settings = make_settings(tmp_path, {"ACP_AGENT": agent})
    async with (
        serve_bridge(settings) as bridge,
        httpx.AsyncClient(timeout=30) as client,
        anyio.create_task_group() as group,
    ):
        crashed = await send(client, bridge.rpc_url, "crash")
        again = start_stream(
            group, client, bridge.rpc_url, "hello", context_id=crashed["contextId"]
        )
        await again.wait_end()
    assert again.final_state == "TASK_STATE_COMPLETED"
    first = again.status_messages()[0]
    assert "could not reload the conversation" in first
    assert "memory of earlier messages in this context is lost" in first
    assert events(log, "session/load") == []
    assert len(events(log, "session/new")) == 2


async def test_an_idle_adapter_is_closed_and_stopped_but_its_sandbox_stays(
    tmp_path: Path,
) -> None:
    agent, log = logged_agent(tmp_path, {"load_session": True})
    settings = make_settings(tmp_path, {"ACP_AGENT": agent, "ACP_IDLE_TIMEOUT_MS": "300"})
    async with serve_bridge(settings) as bridge, httpx.AsyncClient(timeout=30) as client:
        first = await send(client, bridge.rpc_url, "write something")
        context_id = first["contextId"]
        await wait_for_event(log, "session/close")
        assert await wait_until_gone(log) == []
        root = bridge.bridge.root_of(context_id)
        assert root is not None
        assert root.is_dir()
        again = await send(client, bridge.rpc_url, "still there?", context_id=context_id)
    assert first["status"]["state"] == "TASK_STATE_COMPLETED"
    assert again["status"]["state"] == "TASK_STATE_COMPLETED"
    assert len(events(log, "start")) == 2
    loaded = events(log, "session/load")
    assert [entry["params"]["sessionId"] for entry in loaded] == [first_session(log)]
    assert loaded[0]["params"]["cwd"] == str(root)


async def test_a_running_turn_keeps_its_adapter_however_long_the_idle_limit(
    tmp_path: Path,
) -> None:
    steps = [{"op": "think", "text": "busy"}, {"op": "sleep", "seconds": 0.2}] * 5
    agent, log = logged_agent(tmp_path, {"turns": [steps]})
    settings = make_settings(tmp_path, {"ACP_AGENT": agent, "ACP_IDLE_TIMEOUT_MS": "100"})
    async with serve_bridge(settings) as bridge, httpx.AsyncClient(timeout=30) as client:
        task = await send(client, bridge.rpc_url, "go")
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    assert len(events(log, "start")) == 1
    # If the reaper closed the session, it did so only once the turn was over.
    order = [entry["event"] for entry in read_log(log)]
    if "session/close" in order:
        assert order.index("session/close") > order.index("prompt_done")


async def test_an_adapter_that_dies_between_turns_has_the_rest_of_its_tree_stopped_at_once(
    tmp_path: Path,
) -> None:
    script = {
        "turns": [
            [
                {"op": "child", "seconds": 300},
                {"op": "say", "text": "done"},
                {"op": "after", "delay": 0.2, "steps": [{"op": "crash", "code": 6}]},
            ]
        ]
    }
    agent, log = logged_agent(tmp_path, script)
    settings = make_settings(tmp_path, {"ACP_AGENT": agent})
    async with serve_bridge(settings) as bridge, httpx.AsyncClient(timeout=30) as client:
        task = await send(client, bridge.rpc_url, "go")
        assert task["status"]["state"] == "TASK_STATE_COMPLETED"
        # No message follows: the bridge notices the exit itself and stops the child.
        assert await wait_until_gone(log) == []


@pytest.mark.parametrize("shim", ["bash", "node"])
async def test_no_process_survives_behind_a_shim_even_when_the_agent_ignores_eof_and_sigterm(
    tmp_path: Path, shim: str
) -> None:
    script = {
        "ignore_eof": True,
        "ignore_sigterm": True,
        "turns": [[{"op": "child", "seconds": 300}, {"op": "say", "text": "spawned"}]],
    }
    agent, log = wrapped_agent(tmp_path, script, shim)
    settings = make_settings(tmp_path, {"ACP_AGENT": agent})
    async with serve_bridge(settings) as bridge, httpx.AsyncClient(timeout=30) as client:
        task = await send(client, bridge.rpc_url, "go")
        assert {proc.event for proc in living(log)} == {"wrapper", "start", "child"}
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    assert living(log) == []


async def test_a_daemon_that_left_the_session_is_stopped_even_after_its_parent_crashed(
    tmp_path: Path,
) -> None:
    go = tmp_path / "go"
    script = {
        "turns": [
            [
                {"op": "daemon", "seconds": 300},
                {"op": "say", "text": "daemon started"},
                {"op": "wait_file", "path": str(go)},
                {"op": "crash", "code": 9},
            ]
        ]
    }
    agent, log = logged_agent(tmp_path, script)
    settings = make_settings(tmp_path, {"ACP_AGENT": agent})
    async with (
        serve_bridge(settings) as bridge,
        httpx.AsyncClient(timeout=30) as client,
        anyio.create_task_group() as group,
    ):
        task = start_stream(group, client, bridge.rpc_url, "go")
        await task.wait_for(lambda t: "daemon started" in str(t.events))
        daemon = next(proc for proc in processes(log) if proc.event == "daemon")
        # The bridge's watchdog has to have seen the daemon before its parent dies.
        session = next(iter(bridge.bridge._conversations.values())).session
        assert session is not None
        with anyio.fail_after(15):
            while (daemon.pid, daemon.start) not in session.process.escapees:  # noqa: ASYNC110
                await anyio.sleep(0.05)
        go.touch()
        await task.wait_end()
        assert await wait_until_gone(log) == []
    assert task.final_state == "TASK_STATE_FAILED"
    assert "exited with code 9" in task.final_text


# --- the real server process ----------------------------------------------------------

# Bound on the whole life of a served CLI process in these tests.
CLI_LIFETIME_S = 60


class ServedCli:
    """`python -m a2a_acp_bridge serve` as a child of the test, its stderr read as it runs."""

    def __init__(self, process: anyio.abc.Process) -> None:
        self.process = process
        self.lines: list[dict[str, Any]] = []
        self.url: str | None = None
        self.listening = anyio.Event()

    async def read_stderr(self) -> None:
        assert self.process.stderr is not None
        buffer = b""
        async for chunk in self.process.stderr:
            buffer += chunk
            *complete, buffer = buffer.split(b"\n")
            for raw in complete:
                try:
                    entry = json.loads(raw)
                except ValueError:
                    continue
                self.lines.append(entry)
                if entry.get("event") == "listening":
                    self.url = entry["url"]
                    self.listening.set()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
async def test_a_signal_ends_running_tasks_canceled_stops_every_adapter_and_exits_zero(
    tmp_path: Path, sig: signal.Signals
) -> None:
    # The agent takes a second to stop: longer than sse-starlette would let streams live
    # once the server is told to exit, if the bridge did not keep them open for the end.
    script = {"turns": [[{"op": "say", "text": "working"}, {"op": "wait_cancel", "delay": 1.0}]]}
    agent, log = logged_agent(tmp_path, script)
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("ACP_", "PORT", "HOST"))
    }
    env.update(
        {
            "ACP_AGENT": agent,
            "PORT": "0",
            "LOG_FORMAT": "json",
            "ACP_SANDBOX_DIR": str(tmp_path / "sandboxes"),
            "ACP_POOL_SIZE": "1",
            # The agent's log, outside its sandbox (tests/support/agents.py).
            "ACP_ISOLATION_WRITE": str(agent_io(tmp_path)),
        }
    )
    command = [sys.executable, "-m", "a2a_acp_bridge", "serve"]
    with anyio.fail_after(CLI_LIFETIME_S):
        async with await anyio.open_process(
            command, cwd=tmp_path, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL
        ) as process:
            served = ServedCli(process)
            try:
                async with anyio.create_task_group() as readers:
                    readers.start_soon(served.read_stderr)
                    await served.listening.wait()
                    assert served.url is not None
                    async with (
                        httpx.AsyncClient(timeout=30) as client,
                        anyio.create_task_group() as group,
                    ):
                        tasks = [
                            start_stream(group, client, served.url + "/", f"task {index}")
                            for index in range(3)
                        ]
                        for task in tasks:
                            await task.wait_for(lambda t: "working" in str(t.events))
                        process.send_signal(sig)
                        for task in tasks:
                            await task.wait_end()
                    returncode = await process.wait()
            finally:
                if process.returncode is None:
                    process.kill()
    assert returncode == 0
    for task in tasks:
        assert task.final_state == "TASK_STATE_CANCELED"
        assert task.final_text == "Cancelled: the bridge is shutting down."
    assert len(events(log, "start")) >= 3  # three conversations (and warm adapters)
    assert living(log) == []
    assert any(line.get("event") == "adapters stopped" for line in served.lines)


# --- the whole picture ---------------------------------------------------------------


async def test_twenty_conversations_crashed_cancelled_finished_or_running_leave_nothing_behind(
    tmp_path: Path,
) -> None:
    from a2a.server.context import ServerCallContext
    from a2a.types.a2a_pb2 import TaskState

    script = {
        "by_prompt": {
            "crash": [{"op": "say", "text": "working"}, {"op": "crash", "code": 3}],
            "cancel": [{"op": "say", "text": "working"}, {"op": "wait_cancel"}],
            "finish": [{"op": "say", "text": "working"}, {"op": "say", "text": "done"}],
            "run": [
                {"op": "say", "text": "working"},
                {"op": "child", "seconds": 300},
                {"op": "sleep", "seconds": 300},
            ],
        }
    }
    agent, log = logged_agent(tmp_path, script)
    settings = make_settings(
        tmp_path, {"ACP_AGENT": agent, "ACP_POOL_SIZE": "2", "ACP_MAX_SESSIONS": "24"}
    )
    kinds = ["crash", "cancel", "finish", "run"] * 5
    # The streams outlive the bridge: it shuts down (as on SIGTERM) while they are open.
    async with httpx.AsyncClient(timeout=60) as client, anyio.create_task_group() as group:
        async with serve_bridge(settings) as bridge:
            tasks = await twenty_tasks(group, client, bridge.rpc_url, kinds)
            store = bridge.app.state.task_store
            # A client that stalls in its headers, and sandboxes that can no longer be
            # made (the warm pool's refill fails, and so does a new conversation).
            host, port = bridge.url.removeprefix("http://").split(":")
            stalled = await anyio.connect_tcp(host, int(port))
            await stalled.send(b"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\n")
            parent = settings.sandbox_parent
            parent.rename(parent.with_name("sandboxes-moved"))
            warm = bridge.bridge.pool.take()
            assert warm is not None
            os.kill(warm.process.pid, signal.SIGKILL)  # its slot frees, the refill fails
            with anyio.fail_after(30):
                await warm.process.exited.wait()
                # Nothing to wait on but the counter: a poll, bounded by the deadline.
                while not failed_warm_starts(bridge.bridge):  # noqa: ASYNC110
                    await anyio.sleep(0.05)
            no_room = await send(client, bridge.rpc_url, "finish")
            healthy = (await client.get(bridge.url + "/healthz")).status_code
        for task in tasks:
            await task.wait_end(within_s=60)
        await stalled.aclose()
    assert no_room["status"]["state"] == "TASK_STATE_FAILED"
    assert "could not create the conversation's sandbox" in status_text(no_room["status"])
    assert healthy == 200
    finals: dict[str, set[str | None]] = {kind: set() for kind in set(kinds)}
    for kind, task in zip(kinds, tasks, strict=True):
        finals[kind].add(task.final_state)
    assert finals == {
        "crash": {"TASK_STATE_FAILED"},
        "cancel": {"TASK_STATE_CANCELED"},
        "finish": {"TASK_STATE_COMPLETED"},
        "run": {"TASK_STATE_CANCELED"},
    }
    running = [task for kind, task in zip(kinds, tasks, strict=True) if kind == "run"]
    assert all(task.final_text == "Cancelled: the bridge is shutting down." for task in running)
    stored = [await store.get(str(task.task_id), ServerCallContext()) for task in tasks]
    states = [TaskState.Name(item.status.state) if item is not None else None for item in stored]
    assert "TASK_STATE_WORKING" not in states
    assert set(states) == {"TASK_STATE_FAILED", "TASK_STATE_CANCELED", "TASK_STATE_COMPLETED"}
    assert len([proc for proc in processes(log) if proc.event == "start"]) >= 20
    assert living(log) == []


def failed_warm_starts(bridge: Any) -> float:
    value = bridge.metrics.registry.get_sample_value(
        "a2a_acp_bridge_background_failures_total", {"task": "warm_start"}
    )
    return float(value or 0)


async def twenty_tasks(
    group: anyio.abc.TaskGroup, client: httpx.AsyncClient, url: str, kinds: list[str]
) -> list[StreamedTask]:
    """Start one conversation per kind; return once the crashed, cancelled and finished
    ones have ended and the running ones are still running."""
    tasks = [start_stream(group, client, url, kind) for kind in kinds]
    for task in tasks:
        await task.wait_for(lambda t: "working" in str(t.events), within_s=60)
    for kind, task in zip(kinds, tasks, strict=True):
        if kind == "cancel":
            assert task.task_id is not None
            await cancel_task(client, url, task.task_id)
    for kind, task in zip(kinds, tasks, strict=True):
        if kind != "run":
            await task.wait_end(within_s=60)
        else:
            assert task.final_state is None
    return tasks
