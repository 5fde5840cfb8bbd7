"""A2A over real HTTP, the way a client sees it: JSON-RPC calls and SSE read as it streams."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx

A2A_HEADERS = {"A2A-Version": "1.0", "Content-Type": "application/json"}
TERMINAL = {
    "TASK_STATE_COMPLETED",
    "TASK_STATE_FAILED",
    "TASK_STATE_CANCELED",
    "TASK_STATE_REJECTED",
}
INTERRUPTED = {"TASK_STATE_INPUT_REQUIRED", "TASK_STATE_AUTH_REQUIRED"}


def user_message(
    text: str, *, context_id: str | None = None, task_id: str | None = None, **extra: Any
) -> dict[str, Any]:
    message: dict[str, Any] = {
        "messageId": uuid.uuid4().hex,
        "role": "ROLE_USER",
        "parts": [{"text": text}],
    }
    if context_id:
        message["contextId"] = context_id
    if task_id:
        message["taskId"] = task_id
    message.update(extra)
    return message


async def rpc(
    client: httpx.AsyncClient, url: str, method: str, params: dict[str, Any], **kw: Any
) -> dict[str, Any]:
    """One JSON-RPC call; returns the whole response object (result or error)."""
    body = {"jsonrpc": "2.0", "id": uuid.uuid4().hex, "method": method, "params": params}
    response = await client.post(url, json=body, headers=A2A_HEADERS, **kw)
    assert response.status_code == 200, response.text
    data: dict[str, Any] = response.json()
    return data


async def send(
    client: httpx.AsyncClient, url: str, text: str, **message_fields: Any
) -> dict[str, Any]:
    """SendMessage (blocking); returns the task, failing the test on a JSON-RPC error."""
    reply = await rpc(client, url, "SendMessage", {"message": user_message(text, **message_fields)})
    assert "result" in reply, reply
    task: dict[str, Any] = reply["result"]["task"]
    return task


async def submit(
    client: httpx.AsyncClient, url: str, text: str, **message_fields: Any
) -> dict[str, Any]:
    """SendMessage answered at once (`returnImmediately`); the task as it was submitted."""
    params = {
        "message": user_message(text, **message_fields),
        "configuration": {"returnImmediately": True},
    }
    reply = await rpc(client, url, "SendMessage", params)
    assert "result" in reply, reply
    task: dict[str, Any] = reply["result"]["task"]
    return task


async def stream(
    client: httpx.AsyncClient,
    url: str,
    params: dict[str, Any],
    method: str = "SendStreamingMessage",
) -> AsyncIterator[dict[str, Any]]:
    """Yield each SSE event's JSON-RPC `result` as it arrives."""
    body = {"jsonrpc": "2.0", "id": uuid.uuid4().hex, "method": method, "params": params}
    async with client.stream("POST", url, json=body, headers=A2A_HEADERS) as response:
        assert response.status_code == 200
        async for line in response.aiter_lines():
            if not line.startswith("data:"):
                continue
            payload = json.loads(line[len("data:") :])
            if "error" in payload:
                raise AssertionError(f"error in stream: {payload['error']}")
            yield payload["result"]


def state_of(event: dict[str, Any]) -> str | None:
    if "task" in event:
        return str(event["task"]["status"]["state"])
    if "statusUpdate" in event:
        return str(event["statusUpdate"]["status"]["state"])
    return None


def status_text(status: dict[str, Any]) -> str:
    message = status.get("message") or {}
    return "".join(part.get("text", "") for part in message.get("parts", []))


def artifact(task: dict[str, Any], artifact_id: str) -> dict[str, Any] | None:
    for item in task.get("artifacts", []):
        if item["artifactId"] == artifact_id:
            return dict(item)
    return None


def answer_text(task: dict[str, Any]) -> str:
    found = artifact(task, "answer")
    if found is None:
        return ""
    return "".join(part.get("text", "") for part in found["parts"])


def assembled(events: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Each artifact's parts as an appending client builds them from StreamResponses:
    `append` extends, anything else replaces (the SDKs' aggregators, Agent Framework)."""
    built: dict[str, list[dict[str, Any]]] = {}
    for event in events:
        update = event.get("artifactUpdate")
        if update is None:
            continue
        artifact_id = update["artifact"]["artifactId"]
        parts = list(update["artifact"].get("parts", []))
        if update.get("append"):
            built.setdefault(artifact_id, []).extend(parts)
        else:
            built[artifact_id] = parts
    return built


def last_chunks(events: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Each artifact's parts as Google ADK keeps them: only the update marked `lastChunk`."""
    kept: dict[str, list[dict[str, Any]]] = {}
    for event in events:
        update = event.get("artifactUpdate")
        if update is not None and update.get("lastChunk"):
            kept[update["artifact"]["artifactId"]] = list(update["artifact"]["parts"])
    return kept


def texts(parts: list[dict[str, Any]]) -> str:
    return "".join(part.get("text", "") for part in parts)


def task_report(task: dict[str, Any]) -> dict[str, Any]:
    """The turn's report: in the task's metadata (from its final status), never in the answer."""
    report = task.get("metadata", {}).get("report")
    assert isinstance(report, dict), "the task's metadata has no report"
    answer = artifact(task, "answer") or {"parts": []}
    assert not any("stopReason" in part.get("data", {}) for part in answer["parts"])
    return dict(report)


REST_HEADERS = {"A2A-Version": "1.0", "Content-Type": "application/a2a+json"}


async def rest(
    client: httpx.AsyncClient,
    base_url: str,
    method: str,
    path: str,
    body: dict[str, Any] | None = None,
    **kw: Any,
) -> httpx.Response:
    """One HTTP+JSON call under the bridge's /rest prefix."""
    return await client.request(
        method, f"{base_url}/rest{path}", json=body, headers=REST_HEADERS, **kw
    )


def error_code(reply: dict[str, Any]) -> int:
    """The JSON-RPC error code of a reply (failing the test when it is a result)."""
    assert "error" in reply, reply
    code: int = reply["error"]["code"]
    return code
