"""Push notifications: configs over both bindings, delivery to a real webhook (with its
authentication, at least once, as StreamResponse), and the guard on webhook URLs."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from a2a.types.a2a_pb2 import StreamResponse
from google.protobuf.json_format import ParseDict

from a2a_acp_bridge.a2a.push import PushRefused, PushUrlPolicy
from tests.support.agents import scripted_agent
from tests.support.server import RunningBridge, make_settings, serve_bridge
from tests.support.webhook import serve_webhook
from tests.support.wire import (
    assembled,
    error_code,
    last_chunks,
    rest,
    rpc,
    send,
    texts,
    user_message,
)

pytestmark = pytest.mark.anyio

SCRIPT = {"turns": [[{"op": "say", "text": "hello\n"}, {"op": "say", "text": "world\n"}]]}
AUTH = {"scheme": "Bearer", "credentials": "webhook-secret"}


@pytest.fixture
async def bridge(tmp_path: Path) -> AsyncIterator[RunningBridge]:
    settings = make_settings(
        tmp_path,
        {"ACP_AGENT": scripted_agent(tmp_path, SCRIPT), "A2A_PUSH_ALLOW_PRIVATE": "true"},
    )
    async with serve_bridge(settings) as running:
        yield running


def _states(bodies: list[dict[str, Any]]) -> list[str]:
    states = []
    for body in bodies:
        if "task" in body:
            states.append(body["task"]["status"]["state"])
        elif "statusUpdate" in body:
            states.append(body["statusUpdate"]["status"]["state"])
    return states


async def test_a_task_s_events_reach_the_webhook_with_its_authentication(
    bridge: RunningBridge,
) -> None:
    async with serve_webhook() as hook, httpx.AsyncClient(timeout=30) as client:
        config = {"url": hook.url, "token": "tok-1", "authentication": AUTH}
        reply = await rpc(
            client,
            bridge.rpc_url,
            "SendMessage",
            {
                "message": user_message("hi"),
                "configuration": {"taskPushNotificationConfig": config},
            },
        )
        task = reply["result"]["task"]
        deliveries = await hook.wait_for_state("TASK_STATE_COMPLETED")
    bodies = [d.body for d in deliveries]
    assert all(d.headers["authorization"] == "Bearer webhook-secret" for d in deliveries)
    assert all(d.headers["x-a2a-notification-token"] == "tok-1" for d in deliveries)
    assert all(d.headers["content-type"] == "application/a2a+json" for d in deliveries)
    for body in bodies:
        ParseDict(body, StreamResponse())  # every payload is a StreamResponse
    states = _states(bodies)
    assert states[0] == "TASK_STATE_SUBMITTED"
    assert states[-1] == "TASK_STATE_COMPLETED"
    assert texts(assembled(bodies)["answer"]) == "hello\nworld\n"
    assert texts(last_chunks(bodies)["answer"]) == "hello\nworld\n"
    assert all(body.get("task", {}).get("id", task["id"]) == task["id"] for body in bodies)


async def test_a_webhook_that_fails_at_first_still_gets_every_event_in_order(
    bridge: RunningBridge,
) -> None:
    async with serve_webhook(refuse_first=2) as hook, httpx.AsyncClient(timeout=30) as client:
        config = {"url": hook.url, "authentication": AUTH}
        await rpc(
            client,
            bridge.rpc_url,
            "SendMessage",
            {
                "message": user_message("hi"),
                "configuration": {"taskPushNotificationConfig": config},
            },
        )
        deliveries = await hook.wait_for_state("TASK_STATE_COMPLETED")
    assert hook.refused == 2
    states = _states([d.body for d in deliveries])
    assert states[0] == "TASK_STATE_SUBMITTED"
    assert states[-1] == "TASK_STATE_COMPLETED"


async def test_push_configs_are_created_read_listed_and_deleted_on_both_bindings(
    bridge: RunningBridge,
) -> None:
    async with httpx.AsyncClient(timeout=30) as client:
        task = await send(client, bridge.rpc_url, "hi")
        task_id = task["id"]
        config = {"taskId": task_id, "id": "c1", "url": "https://example.com/hook"}
        created = await rpc(client, bridge.rpc_url, "CreateTaskPushNotificationConfig", config)
        got = await rpc(
            client, bridge.rpc_url, "GetTaskPushNotificationConfig", {"taskId": task_id, "id": "c1"}
        )
        rest_created = await rest(
            client,
            bridge.url,
            "POST",
            f"/tasks/{task_id}/pushNotificationConfigs",
            {"id": "c2", "url": "https://example.com/other"},
        )
        listed = await rest(client, bridge.url, "GET", f"/tasks/{task_id}/pushNotificationConfigs")
        deleted = await rpc(
            client,
            bridge.rpc_url,
            "DeleteTaskPushNotificationConfig",
            {"taskId": task_id, "id": "c1"},
        )
        again = await rpc(
            client,
            bridge.rpc_url,
            "DeleteTaskPushNotificationConfig",
            {"taskId": task_id, "id": "c1"},
        )
        gone = await rpc(
            client, bridge.rpc_url, "GetTaskPushNotificationConfig", {"taskId": task_id, "id": "c1"}
        )
        unknown_task = await rpc(
            client,
            bridge.rpc_url,
            "CreateTaskPushNotificationConfig",
            {"taskId": "nope", "url": "https://example.com/hook"},
        )
    assert created["result"]["url"] == "https://example.com/hook"
    assert got["result"]["id"] == "c1"
    assert rest_created.status_code == 200
    assert {c["id"] for c in listed.json()["configs"]} == {"c1", "c2"}
    assert "error" not in deleted
    assert "error" not in again
    assert error_code(gone) == -32001
    assert error_code(unknown_task) == -32001


UNSAFE_URLS = [
    "http://127.0.0.1:9/hook",
    "http://localhost:9/hook",
    "http://169.254.169.254/latest/meta-data",
    "http://10.1.2.3/hook",
    "http://[::1]/hook",
    "http://[::ffff:127.0.0.1]/hook",
    "file:///etc/passwd",
    "http://user:pw@example.com/hook",
    "https://",
]


@pytest.mark.parametrize("url", UNSAFE_URLS)
async def test_a_webhook_url_that_could_reach_inside_is_refused(tmp_path: Path, url: str) -> None:
    settings = make_settings(tmp_path, {"ACP_AGENT": scripted_agent(tmp_path, SCRIPT)})
    async with serve_bridge(settings) as running, httpx.AsyncClient(timeout=30) as client:
        task = await send(client, running.rpc_url, "hi")
        reply = await rpc(
            client,
            running.rpc_url,
            "CreateTaskPushNotificationConfig",
            {"taskId": task["id"], "url": url},
        )
        inline = await rpc(
            client,
            running.rpc_url,
            "SendMessage",
            {
                "message": user_message("hi"),
                "configuration": {"taskPushNotificationConfig": {"url": url}},
            },
        )
    assert error_code(reply) == -32602
    assert error_code(inline) == -32602


async def test_a_host_name_that_resolves_to_this_machine_is_not_called() -> None:
    policy = PushUrlPolicy()
    parts = policy.check_url("http://example.com/hook")
    assert parts.hostname == "example.com"
    with pytest.raises(PushRefused, match="private"):
        # localhost passes no form check by name here: resolve it as delivery does.
        await policy.addresses(parts._replace(netloc="localhost:9"))
    allowed = await PushUrlPolicy(allow_private=True).addresses(
        parts._replace(netloc="localhost:9")
    )
    assert set(allowed) & {"127.0.0.1", "::1"}


async def test_a_webhook_registered_over_0_3_receives_the_0_3_task(bridge: RunningBridge) -> None:
    async with serve_webhook() as hook, httpx.AsyncClient(timeout=30) as client:
        message = {
            "kind": "message",
            "messageId": "m-push-03",
            "role": "user",
            "parts": [{"kind": "text", "text": "hi"}],
        }
        config = {
            "url": hook.url,
            "token": "tok-03",
            "authentication": {"schemes": ["Bearer"], "credentials": "webhook-secret"},
        }
        body = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "message/send",
            "params": {"message": message, "configuration": {"pushNotificationConfig": config}},
        }
        # No A2A-Version header: a 0.3 request.
        reply = (await client.post(bridge.rpc_url, json=body)).json()
        deliveries = await hook.wait_for_state("completed")
    task = reply["result"]
    assert task["kind"] == "task"
    bodies = [d.body for d in deliveries]
    assert all(d.headers["content-type"] == "application/json" for d in deliveries)
    assert all(d.headers["x-a2a-notification-token"] == "tok-03" for d in deliveries)
    # Every payload is the 0.3 Task as it was after that event, never a 1.0 StreamResponse.
    assert all(b["kind"] == "task" and b["id"] == task["id"] for b in bodies)
    assert not any(key in b for b in bodies for key in ("task", "statusUpdate", "artifactUpdate"))
    final = bodies[-1]
    assert final["status"]["state"] == "completed"
    answer = next(a for a in final["artifacts"] if a["artifactId"] == "answer")
    assert "".join(p.get("text", "") for p in answer["parts"]) == "hello\nworld\n"
    assert all(p["kind"] == "text" for p in answer["parts"])
