"""A2A 0.3 over HTTP+JSON (/rest/v1): refusals are errors before any stream, and push configs
are created from either body shape, over real HTTP."""

from __future__ import annotations

import logging
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.agents import scripted_agent
from tests.support.server import RunningBridge, make_settings, serve_bridge

pytestmark = pytest.mark.anyio

SCRIPT = {"turns": [[{"op": "say", "text": "done"}]]}
JSON = {"Content-Type": "application/json"}


@pytest.fixture
async def bridge(tmp_path: Path) -> AsyncIterator[RunningBridge]:
    async with serve_bridge(
        make_settings(tmp_path, {"ACP_AGENT": scripted_agent(tmp_path, SCRIPT)})
    ) as running:
        yield running


def _message(text: str, task_id: str | None = None) -> dict[str, Any]:
    message: dict[str, Any] = {
        "messageId": uuid.uuid4().hex,
        "role": "ROLE_USER",
        "content": [{"text": text}],
    }
    if task_id:
        message["taskId"] = task_id
    return {"message": message}


async def _completed_task(client: httpx.AsyncClient, base: str) -> str:
    reply = await client.post(f"{base}/rest/v1/message:send", json=_message("hi"), headers=JSON)
    assert reply.status_code == 200, reply.text
    task = reply.json()["task"]
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    return str(task["id"])


def _no_tracebacks(caplog: pytest.LogCaptureFixture) -> None:
    assert not [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]


@pytest.mark.parametrize("verb", ["GET", "POST"])
async def test_subscribing_to_an_unknown_task_is_a_0_3_error_not_a_stream(
    bridge: RunningBridge, verb: str, caplog: pytest.LogCaptureFixture
) -> None:
    async with httpx.AsyncClient(timeout=30) as client:
        response = await client.request(
            verb, f"{bridge.url}/rest/v1/tasks/no-such-task:subscribe", headers=JSON
        )
    assert response.status_code == 404
    assert response.headers["content-type"].startswith("application/json")
    body = response.json()
    assert body["type"] == "TaskNotFoundError"
    assert body["error"]["status"] == "NOT_FOUND"
    _no_tracebacks(caplog)


async def test_subscribing_to_a_finished_task_is_refused_before_any_stream(
    bridge: RunningBridge, caplog: pytest.LogCaptureFixture
) -> None:
    async with httpx.AsyncClient(timeout=30) as client:
        task_id = await _completed_task(client, bridge.url)
        response = await client.post(
            f"{bridge.url}/rest/v1/tasks/{task_id}:subscribe", headers=JSON
        )
    assert response.status_code == 400
    assert "text/event-stream" not in response.headers["content-type"]
    assert response.json()["type"] == "UnsupportedOperationError"
    _no_tracebacks(caplog)


@pytest.mark.parametrize(
    ("known", "status", "error"),
    [
        (False, 404, "TaskNotFoundError"),
        (True, 400, "UnsupportedOperationError"),
    ],
)
async def test_streaming_into_an_unknown_or_finished_task_is_refused_before_any_stream(
    bridge: RunningBridge,
    caplog: pytest.LogCaptureFixture,
    known: bool,
    status: int,
    error: str,
) -> None:
    async with httpx.AsyncClient(timeout=30) as client:
        task_id = await _completed_task(client, bridge.url) if known else "no-such-task"
        response = await client.post(
            f"{bridge.url}/rest/v1/message:stream",
            json=_message("more", task_id=task_id),
            headers=JSON,
        )
    assert response.status_code == status
    assert response.json()["type"] == error
    _no_tracebacks(caplog)


async def test_a_stream_that_may_run_still_streams(bridge: RunningBridge) -> None:
    async with (
        httpx.AsyncClient(timeout=30) as client,
        client.stream(
            "POST", f"{bridge.url}/rest/v1/message:stream", json=_message("hi"), headers=JSON
        ) as response,
    ):
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        lines = [line async for line in response.aiter_lines() if line.startswith("data:")]
    assert '"task"' in lines[0]
    assert "TASK_STATE_COMPLETED" in lines[-1]


async def test_push_configs_are_created_from_the_proto_body_and_from_the_sdk_request(
    bridge: RunningBridge, caplog: pytest.LogCaptureFixture
) -> None:
    async with httpx.AsyncClient(timeout=30) as client:
        task_id = await _completed_task(client, bridge.url)
        base = f"{bridge.url}/rest/v1/tasks/{task_id}/pushNotificationConfigs"
        # The 0.3 proto's `body: "config"` (what @a2a-js/sdk 0.3 sends).
        proto_body = {
            "name": f"tasks/{task_id}/pushNotificationConfigs/js",
            "pushNotificationConfig": {"id": "js", "url": "https://example.com/js"},
        }
        # a2a-sdk 0.3's whole CreateTaskPushNotificationConfigRequest, in camelCase and in
        # the proto's own field names (what a2a-sdk 1.3's 0.3 transport sends).
        sdk_body = {
            "parent": f"tasks/{task_id}",
            "configId": "py",
            "config": {"pushNotificationConfig": {"url": "https://example.com/py"}},
        }
        snake_body = {
            "parent": f"tasks/{task_id}",
            "config_id": "snake",
            "config": {"push_notification_config": {"url": "https://example.com/snake"}},
        }
        created = [
            await client.post(base, json=body, headers=JSON)
            for body in (proto_body, sdk_body, snake_body)
        ]
        listed = await client.get(base, headers=JSON)
        broken = await client.post(base, json={"config": "nope"}, headers=JSON)
        not_json = await client.post(base, content=b"{", headers=JSON)
    assert [r.status_code for r in created] == [200, 200, 200], [r.text for r in created]
    names = {r.json()["name"] for r in created}
    assert names == {
        f"tasks/{task_id}/pushNotificationConfigs/js",
        f"tasks/{task_id}/pushNotificationConfigs/py",
        f"tasks/{task_id}/pushNotificationConfigs/snake",
    }
    urls = {c["pushNotificationConfig"]["url"] for c in listed.json()["configs"]}
    assert urls == {
        "https://example.com/js",
        "https://example.com/py",
        "https://example.com/snake",
    }
    assert broken.status_code == 400
    assert broken.json()["type"] == "InvalidParamsError"
    assert not_json.status_code == 400
    _no_tracebacks(caplog)
