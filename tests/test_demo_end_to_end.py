"""The whole bridge over real HTTP with its embedded demo agent (a real ACP subprocess)."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from tests.support.server import make_settings, serve_bridge
from tests.support.wire import (
    TERMINAL,
    answer_text,
    assembled,
    last_chunks,
    send,
    state_of,
    stream,
    task_report,
    texts,
    user_message,
)

pytestmark = pytest.mark.anyio


async def test_a_task_completes_with_an_artifact_holding_the_answer(tmp_path: Path) -> None:
    async with serve_bridge(make_settings(tmp_path)) as bridge, httpx.AsyncClient() as client:
        task = await send(client, bridge.rpc_url, "hello there")
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    assert "demo agent" in answer_text(task)
    assert "hello there" in answer_text(task)
    report = task_report(task)
    assert report["stopReason"] == "end_turn"
    assert report["refusedByBridge"] == []
    assert task["history"][0]["parts"][0]["text"] == "hello there"


async def test_a_write_lands_in_the_contexts_sandbox_and_a_follow_up_sees_it(
    tmp_path: Path,
) -> None:
    async with serve_bridge(make_settings(tmp_path)) as bridge, httpx.AsyncClient() as client:
        first = await send(client, bridge.rpc_url, "write notes/a.txt: from the first message")
        context_id = first["contextId"]
        root = bridge.bridge.root_of(context_id)
        second = await send(client, bridge.rpc_url, "read notes/a.txt", context_id=context_id)
    assert first["status"]["state"] == "TASK_STATE_COMPLETED"
    assert root is not None
    assert root.parent == (tmp_path / "sandboxes").resolve()
    assert (root / "notes" / "a.txt").read_text() == "from the first message\n"
    assert second["status"]["state"] == "TASK_STATE_COMPLETED"
    assert second["contextId"] == context_id
    assert "from the first message" in answer_text(second)


async def test_a_second_context_gets_a_different_sandbox(tmp_path: Path) -> None:
    async with serve_bridge(make_settings(tmp_path)) as bridge, httpx.AsyncClient() as client:
        one = await send(client, bridge.rpc_url, "write mine.txt: one")
        two = await send(client, bridge.rpc_url, "read mine.txt")
        root_one = bridge.bridge.root_of(one["contextId"])
        root_two = bridge.bridge.root_of(two["contextId"])
    assert one["contextId"] != two["contextId"]
    assert root_one is not None
    assert root_two is not None
    assert root_one != root_two
    assert (root_one / "mine.txt").exists()
    assert not (root_two / "mine.txt").exists()
    assert "Could not read mine.txt" in answer_text(two)


async def test_the_stream_begins_with_the_task_and_ends_in_a_terminal_state(
    tmp_path: Path,
) -> None:
    async with serve_bridge(make_settings(tmp_path)) as bridge, httpx.AsyncClient() as client:
        events = [
            event
            async for event in stream(
                client, bridge.rpc_url, {"message": user_message("write s.txt: streamed\nlist")}
            )
        ]
    assert "task" in events[0]
    assert events[0]["task"]["status"]["state"] == "TASK_STATE_SUBMITTED"
    assert state_of(events[-1]) == "TASK_STATE_COMPLETED"
    assert all(state_of(e) not in TERMINAL for e in events[:-1])
    kinds = [next(iter(event)) for event in events]
    assert "artifactUpdate" in kinds
    chunks = [e["artifactUpdate"] for e in events if "artifactUpdate" in e]
    answer_chunks = [c for c in chunks if c["artifact"]["artifactId"] == "answer"]
    assert answer_chunks[0].get("append", False) is False
    assert all(c.get("append") for c in answer_chunks[1:-1])
    closing = answer_chunks[-1]
    assert closing.get("lastChunk") is True
    assert closing.get("append", False) is False
    text = texts(closing["artifact"]["parts"])
    assert texts(assembled(events)["answer"]) == text
    # Every artifact is closed whole, the changes too: both kinds of client see the diff.
    changes = last_chunks(events)["changes"]
    assert changes == assembled(events)["changes"]
    assert [p["filename"] for p in changes] == ["s.txt"]
    assert "+streamed" in texts(changes)
    # The closing updates come before the terminal status, each once.
    closings = [i for i, e in enumerate(events) if e.get("artifactUpdate", {}).get("lastChunk")]
    assert len(closings) == 2
    assert all(i < len(events) - 1 for i in closings)
    assert "Wrote s.txt" in text
    assert "s.txt" in text.split("Wrote s.txt")[1]
