"""What the caller gets back: answer text, files and data as parts, the report, a direct
message when the agent asks for one, few stored parts, and the A2A ids in the prompt."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from a2a.types.a2a_pb2 import Artifact, Part

from a2a_acp_bridge.a2a.store import MERGE_LIMIT, fold_last_text_part
from tests.support.agents import scripted_agent
from tests.support.server import make_settings, serve_bridge
from tests.support.wire import (
    artifact,
    assembled,
    last_chunks,
    rpc,
    send,
    stream,
    task_report,
    user_message,
)

pytestmark = pytest.mark.anyio

PNG = base64.b64encode(b"\x89PNG\r\n\x1a\nfake").decode()
SCRIPT = {
    "echo_meta": True,
    "init_meta": {"a2a": {"directReplies": True}},
    "by_prompt": {
        "files": [
            {"op": "say", "text": "here they are\n"},
            {
                "op": "content",
                "block": {
                    "type": "resource_link",
                    "uri": "https://example.com/out.txt",
                    "name": "out.txt",
                    "mimeType": "text/plain",
                },
            },
            {
                "op": "content",
                "block": {
                    "type": "resource",
                    "resource": {
                        "uri": "file:///work/notes.md",
                        "mimeType": "text/markdown",
                        "text": "# notes\n",
                    },
                },
            },
            {
                "op": "content",
                "block": {
                    "type": "resource",
                    "resource": {
                        "uri": "file:///work/result.json",
                        "mimeType": "application/json",
                        "text": '{"ok": true, "count": 2}',
                    },
                },
            },
            {"op": "content", "block": {"type": "image", "mimeType": "image/png", "data": PNG}},
        ],
        "quick": [
            {"op": "say", "text": "just this"},
            {"op": "end_meta", "meta": {"a2a": {"reply": "message"}}},
        ],
        "quick with a tool": [
            {"op": "tool_call", "call": {"toolCallId": "t1", "title": "ls", "kind": "read"}},
            {"op": "say", "text": "just this"},
            {"op": "end_meta", "meta": {"a2a": {"reply": "message"}}},
        ],
        # Four bursts, apart: at least four streamed chunks however loaded the machine is.
        "long": [
            step
            for _ in range(4)
            for step in ({"op": "chunks", "n": 100, "size": 50}, {"op": "sleep", "seconds": 0.15})
        ],
    },
}


def _settings(tmp_path: Path, script: dict[str, Any] = SCRIPT) -> Any:
    return make_settings(tmp_path, {"ACP_AGENT": scripted_agent(tmp_path, script)})


def _meta_line(text: str) -> dict[str, Any]:
    for line in text.splitlines():
        if line.startswith("meta: "):
            parsed: dict[str, Any] = json.loads(line.removeprefix("meta: "))
            return parsed
    raise AssertionError("no meta line")


async def test_files_and_data_the_agent_returns_are_parts_of_the_answer(tmp_path: Path) -> None:
    async with serve_bridge(_settings(tmp_path)) as bridge, httpx.AsyncClient(timeout=30) as c:
        task = await send(c, bridge.rpc_url, "files")
    found = artifact(task, "answer")
    assert found is not None
    parts = found["parts"]
    link, notes, data, image = parts[-4:]
    assert link == {
        "url": "https://example.com/out.txt",
        "filename": "out.txt",
        "mediaType": "text/plain",
    }
    assert base64.b64decode(notes["raw"]) == b"# notes\n"
    assert notes["filename"] == "notes.md"
    assert notes["mediaType"] == "text/markdown"
    assert data["data"] == {"ok": True, "count": 2}
    assert data["filename"] == "result.json"
    assert base64.b64decode(image["raw"]).startswith(b"\x89PNG")
    assert image["mediaType"] == "image/png"
    assert task_report(task)["stopReason"] == "end_turn"
    assert "here they are\n" in "".join(part.get("text", "") for part in parts)


async def test_an_agent_that_asks_for_it_answers_a_blocking_send_with_a_message(
    tmp_path: Path,
) -> None:
    async with serve_bridge(_settings(tmp_path)) as bridge, httpx.AsyncClient(timeout=30) as c:
        reply = await rpc(c, bridge.rpc_url, "SendMessage", {"message": user_message("quick")})
        listed = await rpc(c, bridge.rpc_url, "ListTasks", {})
    message = reply["result"]["message"]
    assert message["role"] == "ROLE_AGENT"
    assert message["parts"][-1]["text"].endswith("just this")
    assert message["contextId"]
    assert "taskId" not in message
    assert listed["result"]["tasks"] == []


@pytest.mark.parametrize(
    "how", ["streaming", "return-immediately", "push", "not-only-text"], ids=str
)
async def test_otherwise_the_answer_is_always_a_task(tmp_path: Path, how: str) -> None:
    text = "quick with a tool" if how == "not-only-text" else "quick"
    params: dict[str, Any] = {"message": user_message(text)}
    if how == "return-immediately":
        params["configuration"] = {"returnImmediately": True}
    if how == "push":
        params["configuration"] = {"taskPushNotificationConfig": {"url": "https://example.com/h"}}
    async with serve_bridge(_settings(tmp_path)) as bridge, httpx.AsyncClient(timeout=30) as c:
        if how == "streaming":
            events = [e async for e in stream(c, bridge.rpc_url, params)]
            assert "task" in events[0]
            assert all("message" not in e for e in events)
            return
        reply = await rpc(c, bridge.rpc_url, "SendMessage", params)
    assert "task" in reply["result"]


async def test_the_prompt_carries_the_a2a_ids_in_its_meta(tmp_path: Path) -> None:
    async with serve_bridge(_settings(tmp_path)) as bridge, httpx.AsyncClient(timeout=30) as c:
        message = user_message("hello")
        reply = await rpc(c, bridge.rpc_url, "SendMessage", {"message": message})
    task = reply["result"]["task"]
    found = artifact(task, "answer")
    assert found is not None
    text = "".join(p.get("text", "") for p in found["parts"])
    assert _meta_line(text) == {
        "a2a": {
            "taskId": task["id"],
            "contextId": task["contextId"],
            "messageId": message["messageId"],
        }
    }


async def test_a_long_answer_streams_in_chunks_but_is_stored_in_few_parts(tmp_path: Path) -> None:
    async with serve_bridge(_settings(tmp_path)) as bridge, httpx.AsyncClient(timeout=30) as c:
        events = [e async for e in stream(c, bridge.rpc_url, {"message": user_message("long")})]
        task_id = events[0]["task"]["id"]
        stored = (await rpc(c, bridge.rpc_url, "GetTask", {"id": task_id}))["result"]
    updates = [
        e["artifactUpdate"]
        for e in events
        if "artifactUpdate" in e and e["artifactUpdate"]["artifact"]["artifactId"] == "answer"
    ]
    chunks = [p.get("text", "") for u in updates[:-1] for p in u["artifact"]["parts"]]
    found = artifact(stored, "answer")
    assert found is not None
    stored_texts = [p["text"] for p in found["parts"] if "text" in p]
    assert "".join(stored_texts) == "".join(chunks)
    assert len("".join(stored_texts)) > 20000
    assert len(chunks) > len(stored_texts)
    assert len(stored_texts) <= 20000 // MERGE_LIMIT + 3
    # The closing update carries the stored (folded) parts, not one part per chunk.
    closing = updates[-1]
    assert closing["lastChunk"] is True
    assert closing.get("append", False) is False
    assert closing["artifact"]["parts"] == found["parts"]
    assert assembled(events)["answer"] == last_chunks(events)["answer"] == found["parts"]


def test_folding_joins_small_plain_text_and_leaves_everything_else_alone() -> None:
    answer = Artifact(artifact_id="answer", parts=[Part(text="a"), Part(text="b")])
    fold_last_text_part(answer)
    assert [p.text for p in answer.parts] == ["ab"]
    answer.parts.append(Part(url="https://example.com/x", filename="x"))
    answer.parts.append(Part(text="c"))
    fold_last_text_part(answer)
    assert len(answer.parts) == 3
    big = Artifact(artifact_id="answer", parts=[Part(text="x" * MERGE_LIMIT), Part(text="y")])
    fold_last_text_part(big)
    assert len(big.parts) == 2
    typed = Artifact(parts=[Part(text="a"), Part(text="b", media_type="text/x-diff")])
    fold_last_text_part(typed)
    assert len(typed.parts) == 2
