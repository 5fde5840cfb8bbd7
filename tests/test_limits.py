"""Defences at the door over real HTTP: Host allowlist, body limit, adapter and queue caps."""

from __future__ import annotations

import faulthandler
import json
import shlex
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from anyio.abc import TaskGroup

from a2a_acp_bridge.a2a.guard import host_name
from a2a_acp_bridge.a2a.input import MAX_FILES_BYTES, MAX_TEXT_CHARS
from a2a_acp_bridge.config import DEFAULT_MAX_BODY_BYTES
from tests.support.server import RunningBridge, make_settings, serve_bridge
from tests.support.wire import (
    A2A_HEADERS,
    TERMINAL,
    answer_text,
    rpc,
    send,
    state_of,
    status_text,
    stream,
    user_message,
)

pytestmark = pytest.mark.anyio

TOKEN = "limits-test-token-0123456789abcdef"
# Bound on waiting for a long task to reach its agent (it has to start an adapter).
BUSY_S = 30.0
# Past this the watchdog ends a test run whose event loop stopped turning.
STALL_S = 120


def send_body(text: str) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "SendMessage",
        "params": {"message": user_message(text)},
    }


# --- Host allowlist --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("header", "name"),
    [
        ("localhost:41241", "localhost"),
        ("127.0.0.1", "127.0.0.1"),
        ("[::1]:8080", "::1"),
        ("Bridge.Example.", "bridge.example"),
        ("", ""),
    ],
)
def test_the_host_name_is_read_without_port_brackets_or_case(header: str, name: str) -> None:
    assert host_name(header) == name


async def test_on_loopback_a_foreign_host_header_is_refused_before_anything_else(
    tmp_path: Path,
) -> None:
    settings = make_settings(tmp_path, {"A2A_TOKEN": TOKEN})
    async with serve_bridge(settings) as bridge, httpx.AsyncClient() as client:
        rebound = await client.get(
            bridge.url + "/.well-known/agent-card.json", headers={"Host": "evil.example:41241"}
        )
        local = await client.get(
            bridge.url + "/.well-known/agent-card.json", headers={"Host": "localhost:41241"}
        )
    assert rebound.status_code == 421
    assert rebound.json()["error"] == "host"
    assert "A2A_ALLOWED_HOSTS" in rebound.json()["message"]
    assert local.status_code == 200


async def test_allowed_hosts_and_the_public_urls_host_are_answered(tmp_path: Path) -> None:
    settings = make_settings(
        tmp_path,
        {"A2A_ALLOWED_HOSTS": "bridge.lan, other.lan", "PUBLIC_URL": "https://agents.example.org"},
    )
    async with serve_bridge(settings) as bridge, httpx.AsyncClient() as client:
        codes = {
            host: (await client.get(bridge.url + "/healthz", headers={"Host": host})).status_code
            for host in ("bridge.lan", "OTHER.lan:9", "agents.example.org", "evil.example")
        }
    assert codes == {
        "bridge.lan": 200,
        "OTHER.lan:9": 200,
        "agents.example.org": 200,
        "evil.example": 421,
    }


async def test_beyond_loopback_the_host_is_not_checked_unless_hosts_are_listed(
    tmp_path: Path,
) -> None:
    open_settings = make_settings(tmp_path, {"HOST": "0.0.0.0", "A2A_TOKEN": TOKEN})
    listed = make_settings(
        tmp_path, {"HOST": "0.0.0.0", "A2A_TOKEN": TOKEN, "A2A_ALLOWED_HOSTS": "bridge.lan"}
    )
    async with httpx.AsyncClient() as client:
        async with serve_bridge(open_settings) as bridge:
            anywhere = await client.get(bridge.url + "/healthz", headers={"Host": "any.example"})
        async with serve_bridge(listed) as bridge:
            refused = await client.get(bridge.url + "/healthz", headers={"Host": "any.example"})
            allowed = await client.get(bridge.url + "/healthz", headers={"Host": "bridge.lan"})
    assert anywhere.status_code == 200
    assert refused.status_code == 421
    assert allowed.status_code == 200


# --- body limit ------------------------------------------------------------------------


async def test_a_body_over_the_limit_is_refused_with_413_and_a_smaller_one_runs(
    tmp_path: Path,
) -> None:
    settings = make_settings(tmp_path, {"A2A_MAX_BODY_BYTES": "4096"})
    big = json.dumps(send_body("write big.txt: " + "x" * 5000)).encode()
    async with serve_bridge(settings) as bridge, httpx.AsyncClient() as client:
        refused = await client.post(bridge.rpc_url, content=big, headers=A2A_HEADERS)
        task = await send(client, bridge.rpc_url, "write small.txt: " + "y" * 1000)
    assert refused.status_code == 413
    assert "A2A_MAX_BODY_BYTES" in refused.json()["message"]
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"


async def test_a_chunked_body_is_counted_as_it_arrives(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, {"A2A_MAX_BODY_BYTES": "4096"})
    big = json.dumps(send_body("write big.txt: " + "x" * 5000)).encode()
    small = json.dumps(send_body("write small.txt: chunked")).encode()

    async def chunks(data: bytes) -> AsyncIterator[bytes]:
        for start in range(0, len(data), 1000):
            yield data[start : start + 1000]

    async with serve_bridge(settings) as bridge, httpx.AsyncClient() as client:
        refused = await client.post(bridge.rpc_url, content=chunks(big), headers=A2A_HEADERS)
        accepted = await client.post(bridge.rpc_url, content=chunks(small), headers=A2A_HEADERS)
    assert refused.status_code == 413
    assert accepted.status_code == 200
    assert accepted.json()["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"


def test_the_default_body_limit_admits_the_largest_message_the_input_budgets_allow() -> None:
    base64_files = (MAX_FILES_BYTES + 2) // 3 * 4
    # Text as JSON: a character takes up to six bytes (a \\u escape).
    assert base64_files + MAX_TEXT_CHARS * 6 <= DEFAULT_MAX_BODY_BYTES


# --- the cap on live adapters ----------------------------------------------------------


async def start_busy_task(
    group: TaskGroup,
    client: httpx.AsyncClient,
    bridge: RunningBridge,
    marker: str,
    context_id: str | None = None,
) -> dict[str, Any]:
    """Stream a task that thinks `marker` and then sleeps; return once the agent is on it.

    The returned dict fills in `taskId`, and later `final` (the last state) when it ends."""
    info: dict[str, Any] = {}
    on_it = anyio.Event()
    message = user_message(f"think {marker}\nsleep 120", context_id=context_id)

    async def run() -> None:
        async for event in stream(client, bridge.rpc_url, {"message": message}):
            if "task" in event:
                info["taskId"] = event["task"]["id"]
                info["contextId"] = event["task"]["contextId"]
            update = event.get("statusUpdate")
            if update and marker in status_text(update["status"]):
                on_it.set()
            state = state_of(event)
            if state in TERMINAL:
                info["final"] = state
        on_it.set()

    group.start_soon(run)
    with anyio.fail_after(BUSY_S):
        await on_it.wait()
    assert "final" not in info, info
    return info


async def cancel(client: httpx.AsyncClient, bridge: RunningBridge, task_id: str) -> None:
    reply = await rpc(client, bridge.rpc_url, "CancelTask", {"id": task_id})
    assert "result" in reply, reply


async def test_without_an_admission_wait_a_new_conversation_beyond_the_cap_is_rejected_at_once(
    tmp_path: Path,
) -> None:
    settings = make_settings(tmp_path, {"ACP_MAX_SESSIONS": "1", "ACP_ADMISSION_TIMEOUT_MS": "0"})
    async with (
        serve_bridge(settings) as bridge,
        httpx.AsyncClient(timeout=60) as client,
        anyio.create_task_group() as group,
    ):
        busy = await start_busy_task(group, client, bridge, "busy-" + uuid.uuid4().hex)
        refused = await send(client, bridge.rpc_url, "write other.txt: no room")
        await cancel(client, bridge, busy["taskId"])
    assert refused["status"]["state"] == "TASK_STATE_REJECTED"
    reason = status_text(refused["status"])
    assert "ACP_MAX_SESSIONS" in reason
    assert "(1, " in reason
    assert busy["final"] == "TASK_STATE_CANCELED"
    root = bridge.bridge.root_of(refused["contextId"])
    assert root is None or not (root / "other.txt").exists()


async def test_at_the_cap_an_idle_adapter_gives_way_and_its_conversation_resumes_later(
    tmp_path: Path,
) -> None:
    settings = make_settings(tmp_path, {"ACP_MAX_SESSIONS": "1"})
    async with serve_bridge(settings) as bridge, httpx.AsyncClient(timeout=60) as client:
        first = await send(client, bridge.rpc_url, "write one.txt: first")
        second = await send(client, bridge.rpc_url, "write two.txt: second")
        live_after_second = bridge.bridge.live_adapters
        again = await send(client, bridge.rpc_url, "read one.txt", context_id=first["contextId"])
        live_after_again = bridge.bridge.live_adapters
    assert first["contextId"] != second["contextId"]
    assert second["status"]["state"] == "TASK_STATE_COMPLETED"
    assert again["status"]["state"] == "TASK_STATE_COMPLETED"
    assert "first" in answer_text(again)
    assert live_after_second == 1
    assert live_after_again == 1


async def test_beyond_the_queue_cap_a_task_of_a_busy_conversation_is_rejected(
    tmp_path: Path,
) -> None:
    settings = make_settings(tmp_path, {"ACP_MAX_QUEUED_TASKS": "1"})
    async with (
        serve_bridge(settings) as bridge,
        httpx.AsyncClient(timeout=60) as client,
        anyio.create_task_group() as group,
    ):
        busy = await start_busy_task(group, client, bridge, "running-" + uuid.uuid4().hex)
        context_id = busy["contextId"]
        queued: dict[str, Any] = {}
        queued_seen = anyio.Event()

        async def wait_in_line() -> None:
            message = user_message("write queued.txt: later", context_id=context_id)
            async for event in stream(client, bridge.rpc_url, {"message": message}):
                if "task" in event:
                    queued["taskId"] = event["task"]["id"]
                update = event.get("statusUpdate")
                if update and "Queued" in status_text(update["status"]):
                    queued_seen.set()
                if state_of(event) in TERMINAL:
                    queued["final"] = state_of(event)

        group.start_soon(wait_in_line)
        with anyio.fail_after(BUSY_S):
            await queued_seen.wait()
        refused = await send(client, bridge.rpc_url, "write third.txt: x", context_id=context_id)
        await cancel(client, bridge, queued["taskId"])
        await cancel(client, bridge, busy["taskId"])
    assert refused["status"]["state"] == "TASK_STATE_REJECTED"
    assert "ACP_MAX_QUEUED_TASKS" in status_text(refused["status"])
    assert refused["contextId"] == context_id
    assert queued["final"] == "TASK_STATE_CANCELED"
    assert busy["final"] == "TASK_STATE_CANCELED"


async def test_cancelling_a_queued_task_while_the_first_adapter_starts_leaves_the_first_running(
    tmp_path: Path,
) -> None:
    # A regression here froze the event loop (no timeout could fire), so a watchdog thread
    # ends the run loudly instead of letting it hang.
    faulthandler.dump_traceback_later(STALL_S, exit=True)
    slow_start = shlex.join(
        ["sh", "-c", f"sleep 2; exec {shlex.quote(sys.executable)} -m a2a_acp_bridge.demo_agent"]
    )
    settings = make_settings(tmp_path, {"ACP_AGENT": slow_start})
    try:
        async with (
            serve_bridge(settings) as bridge,
            httpx.AsyncClient(timeout=60) as client,
            anyio.create_task_group() as group,
        ):
            first: dict[str, Any] = {}
            submitted = anyio.Event()

            async def run_first() -> None:
                message = user_message("write first.txt: still here")
                async for event in stream(client, bridge.rpc_url, {"message": message}):
                    if "task" in event:
                        first["contextId"] = event["task"]["contextId"]
                        submitted.set()
                    if state_of(event) in TERMINAL:
                        first["final"] = state_of(event)

            group.start_soon(run_first)
            with anyio.fail_after(BUSY_S):
                await submitted.wait()
            second: dict[str, Any] = {}
            queued = anyio.Event()

            async def run_second() -> None:
                message = user_message("write second.txt: x", context_id=first["contextId"])
                async for event in stream(client, bridge.rpc_url, {"message": message}):
                    if "task" in event:
                        second["taskId"] = event["task"]["id"]
                    update = event.get("statusUpdate")
                    if update and "Queued" in status_text(update["status"]):
                        queued.set()
                    if state_of(event) in TERMINAL:
                        second["final"] = state_of(event)

            group.start_soon(run_second)
            with anyio.fail_after(BUSY_S):
                await queued.wait()
            await cancel(client, bridge, second["taskId"])
    finally:
        faulthandler.cancel_dump_traceback_later()
    assert second["final"] == "TASK_STATE_CANCELED"
    assert first["final"] == "TASK_STATE_COMPLETED"


async def watch_task(
    group: TaskGroup, client: httpx.AsyncClient, bridge: RunningBridge, text: str
) -> dict[str, Any]:
    """Stream a new task in the background; the dict fills in its id, its status lines and
    its final state, and `seen[line]` events for the lines a test waits for."""
    info: dict[str, Any] = {"lines": [], "waiting": anyio.Event(), "done": anyio.Event()}

    async def run() -> None:
        try:
            async for event in stream(client, bridge.rpc_url, {"message": user_message(text)}):
                if "task" in event:
                    info["taskId"] = event["task"]["id"]
                update = event.get("statusUpdate")
                if update:
                    line = status_text(update["status"])
                    info["lines"].append(line)
                    if line.startswith("Waiting for a free agent"):
                        info["waiting"].set()
                state = state_of(event)
                if state in TERMINAL:
                    info["final"] = state
        finally:
            info["done"].set()

    group.start_soon(run)
    return info


async def test_at_the_cap_a_new_conversation_waits_for_a_free_agent_and_then_runs(
    tmp_path: Path,
) -> None:
    settings = make_settings(tmp_path, {"ACP_MAX_SESSIONS": "1"})
    async with (
        serve_bridge(settings) as bridge,
        httpx.AsyncClient(timeout=60) as client,
        anyio.create_task_group() as group,
    ):
        busy = await start_busy_task(group, client, bridge, "busy-" + uuid.uuid4().hex)
        first = await watch_task(group, client, bridge, "write first.txt: one")
        with anyio.fail_after(BUSY_S):
            await first["waiting"].wait()
        second = await watch_task(group, client, bridge, "write second.txt: two")
        with anyio.fail_after(BUSY_S):
            await second["waiting"].wait()
        live_while_waiting = bridge.bridge.live_adapters
        await cancel(client, bridge, busy["taskId"])
        with anyio.fail_after(BUSY_S):
            await first["done"].wait()
            await second["done"].wait()
    assert live_while_waiting == 1
    assert busy["final"] == "TASK_STATE_CANCELED"
    assert first["final"] == second["final"] == "TASK_STATE_COMPLETED"
    assert "Waiting for a free agent: 0 ahead of this task." in first["lines"]
    # First come, first served: the second waited behind the first.
    assert "Waiting for a free agent: 1 ahead of this task." in second["lines"]


async def test_a_new_conversation_that_waits_too_long_for_a_free_agent_is_rejected(
    tmp_path: Path,
) -> None:
    settings = make_settings(tmp_path, {"ACP_MAX_SESSIONS": "1", "ACP_ADMISSION_TIMEOUT_MS": "300"})
    async with (
        serve_bridge(settings) as bridge,
        httpx.AsyncClient(timeout=60) as client,
        anyio.create_task_group() as group,
    ):
        busy = await start_busy_task(group, client, bridge, "busy-" + uuid.uuid4().hex)
        refused = await send(client, bridge.rpc_url, "write other.txt: no room")
        await cancel(client, bridge, busy["taskId"])
    assert refused["status"]["state"] == "TASK_STATE_REJECTED"
    reason = status_text(refused["status"])
    assert "ACP_MAX_SESSIONS" in reason
    assert "ACP_ADMISSION_TIMEOUT_MS" in reason


async def test_cancelling_a_task_that_waits_for_a_free_agent_ends_it_at_once(
    tmp_path: Path,
) -> None:
    settings = make_settings(tmp_path, {"ACP_MAX_SESSIONS": "1"})
    async with (
        serve_bridge(settings) as bridge,
        httpx.AsyncClient(timeout=60) as client,
        anyio.create_task_group() as group,
    ):
        busy = await start_busy_task(group, client, bridge, "busy-" + uuid.uuid4().hex)
        waiting = await watch_task(group, client, bridge, "write late.txt: never")
        with anyio.fail_after(BUSY_S):
            await waiting["waiting"].wait()
        await cancel(client, bridge, waiting["taskId"])
        with anyio.fail_after(BUSY_S):
            await waiting["done"].wait()
        busy_still_running = "final" not in busy
        await cancel(client, bridge, busy["taskId"])
    assert waiting["final"] == "TASK_STATE_CANCELED"
    assert busy_still_running
