"""A fake OpenAI Responses API for codex-acp (codex app-server) on 127.0.0.1.

Serves `POST /v1/responses` as Server-Sent Events and `GET /v1/models`. A request whose
`text.format` asks for a JSON schema is a side request (codex's title generator, its
guardian reviewer) and gets an instance of that schema; any other is the main
conversation and plays the script:

    response.created
    response.output_item.added
    response.output_text.delta / response.function_call_arguments.delta /
        response.custom_tool_call_input.delta
    response.output_item.done
    response.completed (with usage)

A `Call` with a JSON object becomes a `function_call` item (codex's `exec_command`); one
with text becomes a `custom_tool_call` (codex's freeform `apply_patch`, whose input is the
raw `*** Begin Patch` text).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from tests.fakes.script import (
    Call,
    Say,
    Stall,
    Step,
    ToolResult,
    View,
    find_marker,
    next_step,
    schema_instance,
)
from tests.fakes.server import Exchange, FakeModelServer, Seen

MODEL = "gpt-5.5"
TOOL_CALL_ITEMS = frozenset({"function_call", "custom_tool_call", "local_shell_call"})
TOOL_OUTPUT_ITEMS = frozenset(
    {"function_call_output", "custom_tool_call_output", "local_shell_call_output"}
)


class FakeOpenAI(FakeModelServer):
    label = "openai"

    def handle(self, method: str, exchange: Exchange) -> None:
        path = exchange.path
        if method == "POST" and path.rstrip("/") == "/v1/responses":
            self._responses(exchange)
        elif method == "GET" and path.startswith("/v1/models"):
            self.record(Seen(method, path, None, "other"))
            exchange.send_json({"object": "list", "data": [{"id": MODEL, "object": "model"}]})
        else:
            self.not_found(method, exchange)

    def _responses(self, exchange: Exchange) -> None:
        body = exchange.json_body()
        model = str(body.get("model") or MODEL)
        text_format = (body.get("text") or {}).get("format") or {}
        if text_format.get("type") == "json_schema":
            self.record(Seen("POST", exchange.path, model, "side"))
            value = schema_instance(text_format.get("schema"))
            self._stream(exchange, model, [_message_item(json.dumps(value))])
            return
        tools = frozenset(
            str(tool.get("name"))
            for tool in body.get("tools") or ()
            if isinstance(tool, Mapping) and tool.get("name")
        )
        view = read_view(body.get("input") or [], tools)
        step = next_step(self.script(view.key), view)
        self.record(Seen("POST", exchange.path, model, "main", type(step).__name__))
        if isinstance(step, Stall):
            self.stall(exchange)
            return
        self._stream(exchange, model, [output_item(step)])

    def _stream(self, exchange: Exchange, model: str, items: Sequence[dict[str, Any]]) -> None:
        response_id = f"resp_fake_{uuid.uuid4().hex[:16]}"
        response = {
            "id": response_id,
            "object": "response",
            "created_at": int(time.time()),
            "status": "in_progress",
            "model": model,
            "output": [],
        }
        sequence = iter(range(1_000_000))
        exchange.start_stream()

        def event(name: str, **fields: Any) -> None:
            exchange.event({"type": name, "sequence_number": next(sequence), **fields}, name)

        event("response.created", response=response)
        event("response.in_progress", response=response)
        for index, item in enumerate(items):
            kind = item["type"]
            event("response.output_item.added", output_index=index, item=_pending(item))
            if kind == "message":
                text = item["content"][0]["text"]
                part = {"type": "output_text", "text": "", "annotations": []}
                event(
                    "response.content_part.added",
                    item_id=item["id"],
                    output_index=index,
                    content_index=0,
                    part=part,
                )
                event(
                    "response.output_text.delta",
                    item_id=item["id"],
                    output_index=index,
                    content_index=0,
                    delta=text,
                )
                event(
                    "response.output_text.done",
                    item_id=item["id"],
                    output_index=index,
                    content_index=0,
                    text=text,
                )
                event(
                    "response.content_part.done",
                    item_id=item["id"],
                    output_index=index,
                    content_index=0,
                    part={**part, "text": text},
                )
            elif kind == "function_call":
                event(
                    "response.function_call_arguments.delta",
                    item_id=item["id"],
                    output_index=index,
                    delta=item["arguments"],
                )
                event(
                    "response.function_call_arguments.done",
                    item_id=item["id"],
                    output_index=index,
                    arguments=item["arguments"],
                )
            elif kind == "custom_tool_call":
                event(
                    "response.custom_tool_call_input.delta",
                    item_id=item["id"],
                    output_index=index,
                    delta=item["input"],
                )
                event(
                    "response.custom_tool_call_input.done",
                    item_id=item["id"],
                    output_index=index,
                    input=item["input"],
                )
            event("response.output_item.done", output_index=index, item=item)
        usage = {
            "input_tokens": max(1, len(exchange.raw) // 4),
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": 12,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": max(1, len(exchange.raw) // 4) + 12,
        }
        done = {**response, "status": "completed", "output": list(items), "usage": usage}
        event("response.completed", response=done)
        exchange.end_stream()


def output_item(step: Step) -> dict[str, Any]:
    if isinstance(step, Call):
        call_id = f"call_fake_{uuid.uuid4().hex[:12]}"
        if isinstance(step.input, str):
            return {
                "type": "custom_tool_call",
                "id": f"ctc_fake_{uuid.uuid4().hex[:12]}",
                "call_id": call_id,
                "name": step.tool,
                "input": step.input,
                "status": "completed",
            }
        return {
            "type": "function_call",
            "id": f"fc_fake_{uuid.uuid4().hex[:12]}",
            "call_id": call_id,
            "name": step.tool,
            "arguments": json.dumps(dict(step.input)),
            "status": "completed",
        }
    assert isinstance(step, Say)
    return _message_item(step.text)


def _message_item(text: str) -> dict[str, Any]:
    return {
        "type": "message",
        "id": f"msg_fake_{uuid.uuid4().hex[:12]}",
        "status": "completed",
        "role": "assistant",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }


def _pending(item: Mapping[str, Any]) -> dict[str, Any]:
    pending = {**item, "status": "in_progress"}
    if item["type"] == "message":
        pending["content"] = []
    elif item["type"] == "function_call":
        pending["arguments"] = ""
    elif item["type"] == "custom_tool_call":
        pending["input"] = ""
    return pending


def read_view(items: Sequence[Any], tools: frozenset[str]) -> View:
    """The marker of the last user message carrying one, and what followed it."""
    start = None
    key = None
    for index, item in enumerate(items):
        if not isinstance(item, Mapping) or item.get("role") != "user":
            continue
        found = find_marker(_text_of(item.get("content")))
        if found is not None:
            start, key = index, found
    if start is None:
        return View(None, 0, (), tools)
    turns = 0
    results: list[ToolResult] = []
    for item in items[start + 1 :]:
        if not isinstance(item, Mapping):
            continue
        kind = item.get("type", "message")
        if kind in TOOL_CALL_ITEMS or (kind == "message" and item.get("role") == "assistant"):
            turns += 1
        elif kind in TOOL_OUTPUT_ITEMS:
            results.append(ToolResult(_output_text(item.get("output"))))
    return View(key, turns, tuple(results), tools)


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(str(part.get("text", "")) for part in content if isinstance(part, Mapping))
    return ""


def _output_text(output: Any) -> str:
    if isinstance(output, str):
        return output
    if isinstance(output, Mapping):
        return str(output.get("content") or output.get("output") or json.dumps(output))
    return _text_of(output)
