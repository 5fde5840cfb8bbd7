"""The conformance agent behind the bridge acts out the official kit's scenarios.

The kit itself cannot run in CI (it is fetched from GitHub); these tests check, over real
HTTP, the behaviours its MUST tests rely on. docs/conformance.md has the kit's results.
"""

from __future__ import annotations

import base64
import os
import shlex
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from tests.support.agents import AGENTS_DIR
from tests.support.server import RunningBridge, make_settings, serve_bridge
from tests.support.wire import rpc, send, state_of, status_text, stream, user_message

pytestmark = pytest.mark.anyio

CONFORMANCE_AGENT = shlex.join([sys.executable, str(AGENTS_DIR / "conformance_agent.py")])


@pytest.fixture
async def bridge(tmp_path: Path) -> AsyncIterator[RunningBridge]:
    settings = make_settings(
        tmp_path,
        {
            "ACP_AGENT": CONFORMANCE_AGENT,
            "ACP_AGENT_ENV": "TCK_STREAMING_TIMEOUT",
            "A2A_PUSH_ALLOW_PRIVATE": "true",
        },
    )
    environ = {**os.environ, "TCK_STREAMING_TIMEOUT": "0.25"}
    async with serve_bridge(settings, environ) as running:
        yield running


def tck(name: str) -> dict[str, Any]:
    message = user_message(f"TCK {name}")
    message["messageId"] = f"tck-{name}-0123abcd"
    return message


def first_part(task: dict[str, Any]) -> dict[str, Any]:
    part: dict[str, Any] = task["artifacts"][0]["parts"][0]
    return part


async def test_complete_task_and_artifacts(bridge: RunningBridge) -> None:
    async with httpx.AsyncClient(timeout=30) as c:

        async def task_for(name: str) -> dict[str, Any]:
            reply = await rpc(c, bridge.rpc_url, "SendMessage", {"message": tck(name)})
            task: dict[str, Any] = reply["result"]["task"]
            return task

        complete = await task_for("complete-task")
        text = await task_for("artifact-text")
        file = await task_for("artifact-file")
        url = await task_for("artifact-file-url")
        data = await task_for("artifact-data")
    assert complete["status"]["state"] == "TASK_STATE_COMPLETED"
    assert first_part(complete)["text"] == "Hello from TCK"
    assert first_part(text) == {"text": "Generated text content"}
    assert base64.b64decode(first_part(file)["raw"]) == b"Generated file content"
    assert first_part(file)["filename"] == "output.txt"
    assert first_part(file)["mediaType"] == "text/plain"
    assert first_part(url)["url"] == "https://example.com/output.txt"
    assert first_part(url)["filename"] == "output.txt"
    assert first_part(data)["data"] == {"key": "value", "count": 42}


async def test_message_response_and_reject(bridge: RunningBridge) -> None:
    async with httpx.AsyncClient(timeout=30) as c:
        direct = await rpc(c, bridge.rpc_url, "SendMessage", {"message": tck("message-response")})
        rejected = await rpc(c, bridge.rpc_url, "SendMessage", {"message": tck("reject-task")})
    assert direct["result"]["message"]["parts"][0]["text"] == "Direct message response"
    task = rejected["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_REJECTED"
    assert status_text(task["status"]) == "rejected"


async def test_input_required_then_the_follow_up_completes(bridge: RunningBridge) -> None:
    async with httpx.AsyncClient(timeout=30) as c:
        first = await rpc(c, bridge.rpc_url, "SendMessage", {"message": tck("input-required")})
        task = first["result"]["task"]
        again = tck("input-required")
        again["taskId"] = task["id"]
        still = await rpc(c, bridge.rpc_url, "SendMessage", {"message": again})
        done_message = tck("complete-task")
        done_message["taskId"] = task["id"]
        done = await rpc(c, bridge.rpc_url, "SendMessage", {"message": done_message})
    assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    assert still["result"]["task"]["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    assert done["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert done["result"]["task"]["contextId"] == task["contextId"]


async def test_chunked_streaming_and_the_long_running_task(bridge: RunningBridge) -> None:
    async with httpx.AsyncClient(timeout=30) as c:
        chunked = [
            e async for e in stream(c, bridge.rpc_url, {"message": tck("stream-artifact-chunked")})
        ]
        long = user_message("resubscribe")
        long["messageId"] = "test-resubscribe-message-id-1"
        started = [
            e
            async for e in stream(
                c,
                bridge.rpc_url,
                {"message": long, "configuration": {"returnImmediately": True}},
            )
        ]
    chunks = [e["artifactUpdate"] for e in chunked if "artifactUpdate" in e]
    assert chunks[0]["artifact"]["parts"] == [{"text": "chunk-1 "}]
    assert chunks[1]["artifact"]["parts"] == [{"text": "chunk-2"}]
    assert chunks[1]["append"] is True
    assert chunks[-1]["lastChunk"] is True
    assert state_of(chunked[-1]) == "TASK_STATE_COMPLETED"
    assert "task" in started[0]
    assert state_of(started[-1]) == "TASK_STATE_COMPLETED"
    assert "TASK_STATE_WORKING" in [state_of(e) for e in started]


async def test_messages_of_the_0_3_kit_keep_their_task_open(bridge: RunningBridge) -> None:
    async with httpx.AsyncClient(timeout=30) as c:
        task = await send(c, bridge.rpc_url, "Task for cancel test")
        follow = await send(c, bridge.rpc_url, "Follow-up", task_id=task["id"])
        cancelled = await rpc(c, bridge.rpc_url, "CancelTask", {"id": task["id"]})
    assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    assert follow["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    assert cancelled["result"]["status"]["state"] == "TASK_STATE_CANCELED"


async def test_a_subscriber_of_a_waiting_task_sees_it_complete(bridge: RunningBridge) -> None:
    async with httpx.AsyncClient(timeout=30) as c:
        first = await rpc(c, bridge.rpc_url, "SendMessage", {"message": tck("input-required")})
        task_id = first["result"]["task"]["id"]
        seen: list[dict[str, Any]] = []
        subscribed = anyio.Event()

        async def follow() -> None:
            async for event in stream(c, bridge.rpc_url, {"id": task_id}, "SubscribeToTask"):
                seen.append(event)
                subscribed.set()

        async with anyio.create_task_group() as group:
            group.start_soon(follow)
            with anyio.fail_after(10):
                await subscribed.wait()
            finish = tck("complete-task")
            finish["taskId"] = task_id
            await rpc(c, bridge.rpc_url, "SendMessage", {"message": finish})
    assert seen[0]["task"]["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    assert state_of(seen[-1]) == "TASK_STATE_COMPLETED"
