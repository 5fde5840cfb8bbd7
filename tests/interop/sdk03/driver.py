"""a2a-sdk 0.3's client against the bridge, on each binding, as its docs start it.

    python driver.py BRIDGE_URL WEBHOOK_URL

Runs in its own virtual environment (a2a-sdk 0.3). `ClientFactory.connect(BRIDGE_URL)`
reads the card at /.well-known/agent-card.json, so this is also the test that a 0.3 client
discovers the bridge with no setting. Per binding: a blocking send, get, a streamed send,
a task resubscribed and cancelled, a question answered by a streamed reply with a push
config registered on the task. Prints one JSON object (see tests/test_interop_clients.py).
"""

from __future__ import annotations

import asyncio
import json
import sys
import uuid
from typing import Any

import httpx
from a2a.client import ClientConfig, ClientFactory
from a2a.types import (
    GetTaskPushNotificationConfigParams,
    Message,
    Part,
    PushNotificationConfig,
    Role,
    Task,
    TaskArtifactUpdateEvent,
    TaskIdParams,
    TaskPushNotificationConfig,
    TaskQueryParams,
    TaskStatusUpdateEvent,
    TextPart,
    TransportProtocol,
)

BINDINGS = {"JSONRPC": TransportProtocol.jsonrpc, "HTTP+JSON": TransportProtocol.http_json}


def message(text: str, task_id: str | None = None, context_id: str | None = None) -> Message:
    return Message(
        message_id=uuid.uuid4().hex,
        role=Role.user,
        parts=[Part(root=TextPart(text=text))],
        task_id=task_id,
        context_id=context_id,
    )


def texts(parts: list[Part]) -> str:
    return "".join(p.root.text for p in parts if isinstance(p.root, TextPart))


def artifact_text(task: Task, artifact_id: str) -> str:
    return "".join(texts(a.parts) for a in task.artifacts or [] if a.artifact_id == artifact_id)


def state(task: Task) -> str:
    return str(task.status.state.value)


def update_record(update: Any) -> dict[str, Any]:
    if isinstance(update, TaskArtifactUpdateEvent):
        return {
            "kind": "artifact",
            "id": update.artifact.artifact_id,
            "append": bool(update.append),
            "lastChunk": bool(update.last_chunk),
            "text": texts(update.artifact.parts),
        }
    if isinstance(update, TaskStatusUpdateEvent):
        return {"kind": "status", "state": str(update.status.state.value)}
    return {"kind": "task"}


async def stream(client: Any, request: Any, *, resubscribe: bool = False) -> dict[str, Any]:
    """Read a stream to its end: the events as sent and the task the client aggregated."""
    events = []
    task: Task | None = None
    source = client.resubscribe(request) if resubscribe else client.send_message(request)
    async for item in source:
        if isinstance(item, Message):
            events.append({"kind": "message"})
            continue
        task, update = item
        events.append(update_record(update))
    return {
        "events": events,
        "state": state(task) if task else None,
        "answer": artifact_text(task, "answer") if task else "",
        "task_id": task.id if task else None,
    }


async def scenario(base: str, webhook: str, binding: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    async with httpx.AsyncClient(timeout=60) as http:
        blocking = await ClientFactory.connect(
            base,
            client_config=ClientConfig(
                streaming=False,
                httpx_client=http,
                supported_transports=[BINDINGS[binding]],
                use_client_preference=True,
            ),
        )
        streaming = await ClientFactory.connect(
            base,
            client_config=ClientConfig(
                streaming=True,
                httpx_client=http,
                supported_transports=[BINDINGS[binding]],
                use_client_preference=True,
            ),
        )
        sent = await stream(blocking, message("hello"))
        out["send"] = sent
        got = await blocking.get_task(TaskQueryParams(id=sent["task_id"]))
        out["get"] = {
            "state": state(got),
            "answer": artifact_text(got, "answer"),
            "changes": artifact_text(got, "changes"),
            "report": (got.metadata or {}).get("report"),
        }
        out["stream"] = await stream(streaming, message("hello"))

        # A task that keeps running: resubscribe to it, cancel it.
        started: dict[str, Any] = {}
        first = streaming.send_message(message("long"))
        async for task, _update in first:  # the first event gives the task
            started["task_id"] = task.id
            break
        await first.aclose()
        resubscribed = asyncio.create_task(
            stream(streaming, TaskIdParams(id=started["task_id"]), resubscribe=True)
        )
        await asyncio.sleep(0)
        cancelled = await blocking.cancel_task(TaskIdParams(id=started["task_id"]))
        out["cancel"] = {"state": state(cancelled), "resubscribed": await resubscribed}

        # A question: the task waits; a webhook is registered; a streamed reply answers it.
        asked = await stream(blocking, message("ask"))
        task_id = asked["task_id"]
        config = PushNotificationConfig(id="hook-1", url=webhook, token="tok-03")
        await blocking.set_task_callback(
            TaskPushNotificationConfig(task_id=task_id, push_notification_config=config)
        )
        fetched = await blocking.get_task_callback(
            GetTaskPushNotificationConfigParams(id=task_id, push_notification_config_id="hook-1")
        )
        answered = await stream(streaming, message("blue", task_id=task_id))
        out["question"] = {
            "asked": asked,
            "push_url": fetched.push_notification_config.url,
            "answered": answered,
        }
    return out


async def main(base: str, webhook: str) -> None:
    report = {
        binding: await scenario(base, f"{webhook}?c={binding}", binding) for binding in BINDINGS
    }
    print(json.dumps(report))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1].rstrip("/"), sys.argv[2]))
