"""Questions from the agent (ACP elicitation) go to the caller; permissions never do."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from a2a.types.a2a_pb2 import StreamResponse, TaskState
from google.protobuf.json_format import ParseDict

from a2a_acp_bridge.a2a.client import render
from tests.support.agents import scripted_agent
from tests.support.server import make_settings, serve_bridge
from tests.support.wire import (
    TERMINAL,
    answer_text,
    assembled,
    last_chunks,
    rpc,
    send,
    state_of,
    status_text,
    stream,
    texts,
    user_message,
)

pytestmark = pytest.mark.anyio

FORM = {
    "type": "object",
    "properties": {
        "branch": {"type": "string"},
        "remote": {"type": "string"},
        "force": {"type": "boolean"},
    },
    "required": ["branch"],
}
SCRIPT = {
    "by_prompt": {
        "one field": [
            {"op": "say", "text": "let me ask\n"},
            {"op": "ask", "message": "Which file should I edit?"},
            {"op": "say", "text": "thanks\n"},
        ],
        "two fields": [{"op": "ask", "message": "Where to push?", "schema": FORM}],
        "no fields": [
            {"op": "ask", "message": "Shall I go on?", "schema": {"type": "object"}},
        ],
    }
}


def _answers(task: dict[str, Any]) -> list[dict[str, Any]]:
    """What the scripted agent reported receiving for its questions."""
    return [
        json.loads(line.removeprefix("answer: "))
        for line in answer_text(task).splitlines()
        if line.startswith("answer: ")
    ]


def _settings(tmp_path: Path, **extra: str) -> Any:
    return make_settings(tmp_path, {"ACP_AGENT": scripted_agent(tmp_path, SCRIPT), **extra})


async def test_a_question_puts_the_task_in_input_required_with_its_form(tmp_path: Path) -> None:
    async with serve_bridge(_settings(tmp_path)) as bridge, httpx.AsyncClient(timeout=30) as c:
        task = await send(c, bridge.rpc_url, "two fields")
        fetched = await rpc(c, bridge.rpc_url, "GetTask", {"id": task["id"]})
        await rpc(c, bridge.rpc_url, "CancelTask", {"id": task["id"]})
    assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    parts = task["status"]["message"]["parts"]
    assert parts[0]["text"] == "Where to push?"
    assert parts[1]["mediaType"] == "application/schema+json"
    assert parts[1]["data"]["properties"] == FORM["properties"]
    assert parts[1]["data"]["required"] == ["branch"]
    assert fetched["result"]["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"


async def test_the_next_message_answers_the_question_and_the_turn_goes_on(tmp_path: Path) -> None:
    async with serve_bridge(_settings(tmp_path)) as bridge, httpx.AsyncClient(timeout=30) as c:
        asked = await send(c, bridge.rpc_url, "one field")
        reply = user_message("notes.txt", task_id=asked["id"])
        done = (await rpc(c, bridge.rpc_url, "SendMessage", {"message": reply}))["result"]["task"]
    assert asked["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    assert done["id"] == asked["id"]
    assert done["status"]["state"] == "TASK_STATE_COMPLETED"
    (answer,) = _answers(done)
    assert answer["action"] == "accept"
    assert answer["content"] == {"answer": "notes.txt"}
    assert answer["_meta"]["a2a"] == {
        "taskId": asked["id"],
        "contextId": asked["contextId"],
        "messageId": reply["messageId"],
    }
    assert answer_text(done).startswith("let me ask\n")
    assert answer_text(done).endswith("thanks\n")
    users = [m["parts"][0]["text"] for m in done["history"] if m["role"] == "ROLE_USER"]
    assert users == ["one field", "notes.txt"]


async def test_a_form_of_several_fields_takes_a_data_part_and_restates_after_text(
    tmp_path: Path,
) -> None:
    async with serve_bridge(_settings(tmp_path)) as bridge, httpx.AsyncClient(timeout=30) as c:
        asked = await send(c, bridge.rpc_url, "two fields")
        wrong = await send(c, bridge.rpc_url, "main", task_id=asked["id"])
        missing = user_message("", task_id=asked["id"])
        missing["parts"] = [{"data": {"force": True}}]
        lacking = (await rpc(c, bridge.rpc_url, "SendMessage", {"message": missing}))["result"]
        good = user_message("", task_id=asked["id"])
        good["parts"] = [{"data": {"branch": "main", "force": False}}]
        done = (await rpc(c, bridge.rpc_url, "SendMessage", {"message": good}))["result"]["task"]
    assert wrong["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    assert "several fields" in status_text(wrong["status"])
    assert "Where to push?" in status_text(wrong["status"])
    assert lacking["task"]["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    assert "branch" in status_text(lacking["task"]["status"])
    assert done["status"]["state"] == "TASK_STATE_COMPLETED"
    (answer,) = _answers(done)
    assert answer["content"] == {"branch": "main", "force": False}


async def test_a_form_without_fields_is_accepted_with_the_text_in_meta(tmp_path: Path) -> None:
    async with serve_bridge(_settings(tmp_path)) as bridge, httpx.AsyncClient(timeout=30) as c:
        asked = await send(c, bridge.rpc_url, "no fields")
        done = await send(c, bridge.rpc_url, "yes, go on", task_id=asked["id"])
    (answer,) = _answers(done)
    assert answer["action"] == "accept"
    assert "content" not in answer
    assert answer["_meta"]["a2a"]["text"] == "yes, go on"


async def test_cancelling_a_task_that_waits_for_an_answer_declines_the_question(
    tmp_path: Path,
) -> None:
    async with serve_bridge(_settings(tmp_path)) as bridge, httpx.AsyncClient(timeout=30) as c:
        asked = await send(c, bridge.rpc_url, "one field")
        cancelled = await rpc(c, bridge.rpc_url, "CancelTask", {"id": asked["id"]})
        final = (await rpc(c, bridge.rpc_url, "GetTask", {"id": asked["id"]}))["result"]
    assert cancelled["result"]["status"]["state"] == "TASK_STATE_CANCELED"
    assert final["status"]["state"] == "TASK_STATE_CANCELED"
    (answer,) = _answers(final)
    assert answer["action"] == "decline"


async def test_an_unanswered_question_is_declined_after_its_time(tmp_path: Path) -> None:
    settings = _settings(tmp_path, A2A_QUESTION_TIMEOUT_MS="300")
    async with serve_bridge(settings) as bridge, httpx.AsyncClient(timeout=30) as c:
        asked = await send(c, bridge.rpc_url, "one field")
        with anyio.fail_after(20):
            while True:
                task = (await rpc(c, bridge.rpc_url, "GetTask", {"id": asked["id"]}))["result"]
                if task["status"]["state"] in TERMINAL:
                    break
                await anyio.sleep(0.05)
    (answer,) = _answers(task)
    assert answer["action"] == "decline"
    assert task["status"]["state"] == "TASK_STATE_CANCELED"
    notes = [m["parts"][0].get("text", "") for m in task["history"] if m["role"] == "ROLE_AGENT"]
    assert any("No answer came within" in note for note in notes)


async def test_the_stream_stops_at_the_question_and_the_answer_streams_the_rest(
    tmp_path: Path,
) -> None:
    async with serve_bridge(_settings(tmp_path)) as bridge, httpx.AsyncClient(timeout=30) as c:
        first = [e async for e in stream(c, bridge.rpc_url, {"message": user_message("one field")})]
        task_id = first[0]["task"]["id"]
        second = [
            e
            async for e in stream(
                c, bridge.rpc_url, {"message": user_message("main.py", task_id=task_id)}
            )
        ]
    assert state_of(first[-1]) == "TASK_STATE_INPUT_REQUIRED"
    # The answer so far is closed before the question, whole.
    assert texts(last_chunks(first)["answer"]) == "let me ask\n"
    # The stream that answers the question begins with the task, as it is now.
    assert second[0]["task"]["id"] == task_id
    assert second[0]["task"]["status"]["state"] in (
        "TASK_STATE_INPUT_REQUIRED",
        "TASK_STATE_WORKING",
    )
    assert state_of(second[-1]) == "TASK_STATE_COMPLETED"
    whole = last_chunks(second)["answer"]
    assert texts(whole).startswith("let me ask\n")
    assert "thanks" in texts(whole)
    assert assembled(first + second)["answer"] == whole


async def test_a_refused_permission_is_never_turned_into_a_question(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    script = {
        "turns": [
            [
                {
                    "op": "permission",
                    "tool_call": {"toolCallId": "t1", "title": "rm -rf /", "kind": "execute"},
                    "options": [
                        ["allow", "Allow", "allow_once"],
                        ["reject", "Reject", "reject_once"],
                    ],
                },
                {"op": "say", "text": "carried on\n"},
            ]
        ]
    }
    settings = make_settings(
        tmp_path, {"ACP_AGENT": scripted_agent(tmp_path, script), "ACP_CWD": str(shared)}
    )
    async with serve_bridge(settings) as bridge, httpx.AsyncClient(timeout=30) as c:
        events = [e async for e in stream(c, bridge.rpc_url, {"message": user_message("go")})]
    states = [state_of(e) for e in events if state_of(e)]
    assert "TASK_STATE_INPUT_REQUIRED" not in states
    assert states[-1] == "TASK_STATE_COMPLETED"
    lines = [status_text(e["statusUpdate"]["status"]) for e in events if "statusUpdate" in e]
    assert any(line.startswith("Refused by the bridge") for line in lines)


def test_the_send_command_shows_the_question_s_fields_and_how_to_reply() -> None:
    event = ParseDict(
        {
            "statusUpdate": {
                "taskId": "t-1",
                "contextId": "c-1",
                "status": {
                    "state": "TASK_STATE_INPUT_REQUIRED",
                    "message": {
                        "messageId": "m",
                        "role": "ROLE_AGENT",
                        "parts": [{"text": "Where to push?"}, {"data": FORM}],
                    },
                },
            }
        },
        StreamResponse(),
    )
    out = io.StringIO()
    state = render(event, out, [False])
    assert state == TaskState.TASK_STATE_INPUT_REQUIRED
    assert out.getvalue().splitlines() == [
        "[INPUT_REQUIRED] Where to push?",
        "  answer with: branch (string, required), force (boolean), remote (string)",
        "  reply with: send --task t-1 TEXT",
    ]


def test_the_send_command_lists_the_options_of_a_choice() -> None:
    form = {
        "type": "object",
        "properties": {
            "question_0": {
                "type": "string",
                "oneOf": [
                    {"const": "pg", "title": "Postgres"},
                    {"const": "lite", "title": "SQLite"},
                ],
            },
            "question_0_custom": {"type": "string", "title": "Other"},
        },
    }
    event = ParseDict(
        {
            "statusUpdate": {
                "taskId": "t-2",
                "contextId": "c-2",
                "status": {
                    "state": "TASK_STATE_INPUT_REQUIRED",
                    "message": {
                        "messageId": "m",
                        "role": "ROLE_AGENT",
                        "parts": [{"text": "Which database?"}, {"data": form}],
                    },
                },
            }
        },
        StreamResponse(),
    )
    out = io.StringIO()
    render(event, out, [False])
    assert "question_0 (one of: Postgres | SQLite), question_0_custom (string)" in out.getvalue()
