"""The caller's message as the agent's prompt: every kind of part, the budgets, the errors;
and the caller's answer to a question (reply_from_message)."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from a2a.types.a2a_pb2 import Message
from google.protobuf.json_format import ParseDict

from a2a_acp_bridge.a2a.input import (
    MAX_FILE_BYTES,
    MAX_FILES_BYTES,
    MAX_TEXT_CHARS,
    InputProblem,
    prompt_from_message,
    reply_from_message,
)
from a2a_acp_bridge.events import QuestionAsked
from a2a_acp_bridge.prompt import BlobPart, DataPart, LinkPart, TextPart
from tests.support.agents import scripted_agent
from tests.support.server import make_settings, serve_bridge
from tests.support.wire import answer_text, error_code, rpc, send, user_message

pytestmark = pytest.mark.anyio


def message(*parts: dict[str, Any]) -> Message:
    parsed = Message()
    ParseDict({"messageId": "m1", "role": "ROLE_USER", "parts": list(parts)}, parsed)
    return parsed


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


# --- prompt parts -------------------------------------------------------------------------


def test_every_kind_of_part_becomes_a_prompt_part() -> None:
    parts = prompt_from_message(
        message(
            {"text": "look at these"},
            {"raw": b64(b"\x89PNG"), "mediaType": "image/png", "filename": "a.png"},
            {"url": "https://example.com/b.txt", "mediaType": "text/plain"},
            {"data": {"k": [1, 2]}},
        )
    )
    assert parts == [
        TextPart("look at these"),
        BlobPart(b"\x89PNG", "image/png", "a.png"),
        LinkPart("https://example.com/b.txt", "text/plain", None),
        DataPart({"k": [1, 2]}),
    ]


def test_whitespace_only_text_gives_nothing_to_prompt() -> None:
    assert prompt_from_message(message({"text": "  \n "})) == []


@pytest.mark.parametrize(
    ("parts", "words"),
    [
        ([{"raw": b64(b"x" * (MAX_FILE_BYTES + 1)), "filename": "big.bin"}], "big.bin"),
        (
            [{"raw": b64(b"x" * (MAX_FILES_BYTES // 3 + 1))} for _ in range(3)],
            "add up to",
        ),
        ([{"text": "x" * (MAX_TEXT_CHARS + 1)}], "characters"),
    ],
    ids=["one-file", "all-files", "text"],
)
def test_parts_over_a_budget_are_refused_by_name(parts: list[dict[str, Any]], words: str) -> None:
    with pytest.raises(InputProblem, match=words):
        prompt_from_message(message(*parts))


# --- over HTTP ----------------------------------------------------------------------------


async def test_the_agent_receives_files_links_and_data_as_acp_content(tmp_path: Path) -> None:
    script = {"echo_prompt": True, "turns": [[]]}
    settings = make_settings(tmp_path, {"ACP_AGENT": scripted_agent(tmp_path, script)})
    msg = user_message("read these")
    msg["parts"] += [
        {"raw": b64(b"print(1)\n"), "mediaType": "text/x-python", "filename": "a.py"},
        {"url": "https://example.com/spec.pdf", "mediaType": "application/pdf"},
        {"data": {"ticket": 42}},
    ]
    async with serve_bridge(settings) as bridge, httpx.AsyncClient(timeout=30) as client:
        reply = await rpc(client, bridge.rpc_url, "SendMessage", {"message": msg})
    task = reply["result"]["task"]
    line = next(x for x in answer_text(task).splitlines() if x.startswith("prompt: "))
    blocks = json.loads(line.removeprefix("prompt: "))
    assert blocks[0] == {"type": "text", "text": "read these"}
    assert blocks[1]["type"] == "resource"
    assert blocks[1]["resource"]["text"] == "print(1)\n"
    assert blocks[1]["resource"]["uri"].endswith("a.py")
    assert blocks[2]["type"] == "resource_link"
    assert blocks[2]["uri"] == "https://example.com/spec.pdf"
    assert blocks[2]["name"] == "spec.pdf"
    assert blocks[3]["type"] == "text"
    assert json.loads(blocks[3]["text"]) == {"ticket": 42}
    assert task["history"][0]["parts"] == msg["parts"]


async def test_a_message_over_a_budget_is_refused_and_leaves_no_task(tmp_path: Path) -> None:
    settings = make_settings(
        tmp_path,
        {"ACP_AGENT": scripted_agent(tmp_path, {"turns": [[]]}), "A2A_MAX_BODY_BYTES": "64000000"},
    )
    msg = user_message("x" * (MAX_TEXT_CHARS + 1))
    async with serve_bridge(settings) as bridge, httpx.AsyncClient(timeout=60) as client:
        reply = await rpc(client, bridge.rpc_url, "SendMessage", {"message": msg})
        listed = await rpc(client, bridge.rpc_url, "ListTasks", {})
    assert error_code(reply) == -32602
    assert "the limit is" in reply["error"]["message"]
    assert listed["result"]["tasks"] == []


async def test_a_file_the_agent_cannot_take_is_content_type_not_supported(tmp_path: Path) -> None:
    script = {"prompt_capabilities": {}, "turns": [[{"op": "say", "text": "ok"}]]}
    settings = make_settings(tmp_path, {"ACP_AGENT": scripted_agent(tmp_path, script)})
    msg = user_message("unpack this")
    msg["parts"].append({"raw": b64(b"PK\x03\x04"), "mediaType": "application/zip"})
    async with serve_bridge(settings) as bridge, httpx.AsyncClient(timeout=30) as client:
        await send(client, bridge.rpc_url, "start the agent")
        reply = await rpc(client, bridge.rpc_url, "SendMessage", {"message": msg})
        listed = await rpc(client, bridge.rpc_url, "ListTasks", {"status": "TASK_STATE_FAILED"})
    assert error_code(reply) == -32005
    assert "application/zip" in reply["error"]["message"]
    assert listed["result"]["tasks"] == []


# --- answers to a question ----------------------------------------------------------------

ONE = QuestionAsked("q", "Which?", {"properties": {"name": {"type": "string"}}})
FLAG = QuestionAsked("q", "Sure?", {"properties": {"go": {"type": "boolean"}}})
COUNT = QuestionAsked("q", "How many?", {"properties": {"n": {"type": "integer"}}})
TWO = QuestionAsked(
    "q",
    "Where?",
    {"properties": {"a": {"type": "string"}, "b": {"type": "string"}}, "required": ["a"]},
)
# claude-agent-acp 0.101 asks Claude Code's AskUserQuestion this way: a choice and an
# "Other" box per question, nothing required.
ASK_USER = QuestionAsked(
    "q",
    "Which database?",
    {
        "type": "object",
        "properties": {
            "question_0": {
                "type": "string",
                "oneOf": [
                    {"const": "Postgres", "title": "Postgres"},
                    {"const": "SQLite", "title": "SQLite (file)"},
                ],
            },
            "question_0_custom": {"type": "string", "title": "Other"},
        },
    },
)
PICK = QuestionAsked(
    "q",
    "Colour?",
    {"properties": {"colour": {"type": "string", "enum": ["red", "green"]}}},
)
MANY = QuestionAsked(
    "q",
    "Which checks?",
    {
        "properties": {
            "checks": {
                "type": "array",
                "items": {"anyOf": [{"const": "lint", "title": "Lint"}]},
            }
        }
    },
)
IDS = {"taskId": "t", "contextId": "c", "messageId": "m1"}


@pytest.mark.parametrize(
    ("question", "parts", "content"),
    [
        (ONE, [{"text": "alice"}], {"name": "alice"}),
        (FLAG, [{"text": "yes"}], {"go": True}),
        (FLAG, [{"text": "No"}], {"go": False}),
        (COUNT, [{"text": "3"}], {"n": 3}),
        (TWO, [{"data": {"a": "x", "b": "y"}}], {"a": "x", "b": "y"}),
        (ASK_USER, [{"text": "sqlite (FILE)"}], {"question_0": "SQLite"}),
        (ASK_USER, [{"text": "postgres"}], {"question_0": "Postgres"}),
        (
            ASK_USER,
            [{"text": "Redis, not Memcached"}],
            {"question_0_custom": "Redis, not Memcached"},
        ),
        (PICK, [{"text": "Green"}], {"colour": "green"}),
        (MANY, [{"text": "lint"}], {"checks": ["lint"]}),
    ],
    ids=[
        "text-to-string",
        "yes",
        "no",
        "integer",
        "data",
        "option-by-title",
        "option-by-value",
        "other-box",
        "enum",
        "multi-select",
    ],
)
def test_an_answer_fills_the_form(
    question: QuestionAsked, parts: list[dict[str, Any]], content: dict[str, Any]
) -> None:
    reply = reply_from_message(message(*parts), question, IDS)
    assert not isinstance(reply, str)
    assert reply.action == "accept"
    assert reply.content == content
    assert reply.meta == {"a2a": IDS}


@pytest.mark.parametrize(
    ("question", "parts", "words"),
    [
        (TWO, [{"text": "x"}], "several fields"),
        (TWO, [{"data": {"b": "y"}}], "required field(s) a"),
        (COUNT, [{"text": "many"}], "not a valid integer"),
        (ONE, [{"raw": b64(b"x")}], "a file cannot answer"),
        (ONE, [{"text": " "}], "holds no answer"),
        (ONE, [{"data": [1, 2]}], "JSON object"),
        (PICK, [{"text": "blue"}], "not one of the options of 'colour': red, green"),
    ],
    ids=[
        "text-for-two-fields",
        "missing-required",
        "not-a-number",
        "file",
        "empty",
        "list",
        "not-an-option",
    ],
)
def test_a_message_that_does_not_answer_says_why(
    question: QuestionAsked, parts: list[dict[str, Any]], words: str
) -> None:
    reply = reply_from_message(message(*parts), question, IDS)
    assert isinstance(reply, str)
    assert words in reply


def test_an_answer_without_form_fields_carries_the_text_in_meta() -> None:
    reply = reply_from_message(message({"text": "go"}), QuestionAsked("q", "Ok?", {}), IDS)
    assert not isinstance(reply, str)
    assert reply.content is None
    assert reply.meta == {"a2a": {**IDS, "text": "go"}}
