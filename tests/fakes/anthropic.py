"""A fake Anthropic Messages API for claude-agent-acp (Claude Code) on 127.0.0.1.

Serves `POST /v1/messages` (streamed as Server-Sent Events or as one JSON message),
`POST /v1/messages/count_tokens` and `GET /v1/models`. A request that offers tools is the
main conversation and plays the script; one without tools is a side request (Claude Code
asks for titles and summaries that way) and gets a short plain text.

The stream is what the Messages API sends: `message_start`, then per content block
`content_block_start` / `content_block_delta` (`text_delta` or `input_json_delta`) /
`content_block_stop`, then `message_delta` with the stop reason, then `message_stop`.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from tests.fakes.script import Call, Say, Stall, Step, ToolResult, View, find_marker, next_step
from tests.fakes.server import Exchange, FakeModelServer, Seen

SIDE_TEXT = "Offline test"
MODELS = ("claude-opus-4-5", "claude-sonnet-4-5", "claude-haiku-4-5")


class FakeAnthropic(FakeModelServer):
    label = "anthropic"

    def handle(self, method: str, exchange: Exchange) -> None:
        path = exchange.path
        if method == "POST" and path == "/v1/messages":
            self._messages(exchange)
        elif method == "POST" and path == "/v1/messages/count_tokens":
            self.record(Seen(method, path, None, "other"))
            exchange.send_json({"input_tokens": _rough_tokens(exchange.raw)})
        elif method == "GET" and path.startswith("/v1/models"):
            self.record(Seen(method, path, None, "other"))
            data = [
                {
                    "type": "model",
                    "id": model,
                    "display_name": model,
                    "created_at": "2025-01-01T00:00:00Z",
                }
                for model in MODELS
            ]
            exchange.send_json(
                {"data": data, "has_more": False, "first_id": MODELS[0], "last_id": MODELS[-1]}
            )
        else:
            self.not_found(method, exchange)

    def _messages(self, exchange: Exchange) -> None:
        body = exchange.json_body()
        model = str(body.get("model") or "claude")
        tools = frozenset(
            str(tool.get("name")) for tool in body.get("tools") or () if isinstance(tool, Mapping)
        )
        if not tools:
            self.record(Seen("POST", exchange.path, model, "side"))
            self._answer(exchange, body, model, Say(SIDE_TEXT))
            return
        view = read_view(body.get("messages") or [], tools)
        step = next_step(self.script(view.key), view)
        self.record(Seen("POST", exchange.path, model, "main", type(step).__name__))
        if isinstance(step, Stall):
            self.stall(exchange)
            return
        self._answer(exchange, body, model, step)

    def _answer(self, exchange: Exchange, body: Mapping[str, Any], model: str, step: Step) -> None:
        blocks = content_blocks(step)
        stop_reason = "tool_use" if isinstance(step, Call) else "end_turn"
        usage = {"input_tokens": _rough_tokens(exchange.raw), "output_tokens": 12}
        message: dict[str, Any] = {
            "id": f"msg_fake_{uuid.uuid4().hex[:16]}",
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {**usage, "output_tokens": 1},
        }
        if not body.get("stream"):
            exchange.send_json(
                {**message, "content": blocks, "stop_reason": stop_reason, "usage": usage}
            )
            return
        exchange.start_stream()
        exchange.event({"type": "message_start", "message": message}, "message_start")
        for index, block in enumerate(blocks):
            start: dict[str, Any]
            if block["type"] == "text":
                start = {"type": "text", "text": ""}
                delta = {"type": "text_delta", "text": block["text"]}
            else:
                start = {**block, "input": {}}
                delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
            exchange.event(
                {"type": "content_block_start", "index": index, "content_block": start},
                "content_block_start",
            )
            exchange.event(
                {"type": "content_block_delta", "index": index, "delta": delta},
                "content_block_delta",
            )
            exchange.event({"type": "content_block_stop", "index": index}, "content_block_stop")
        exchange.event(
            {
                "type": "message_delta",
                "delta": {"stop_reason": stop_reason, "stop_sequence": None},
                "usage": {"output_tokens": usage["output_tokens"]},
            },
            "message_delta",
        )
        exchange.event({"type": "message_stop"}, "message_stop")
        exchange.end_stream()


def content_blocks(step: Step) -> list[dict[str, Any]]:
    if isinstance(step, Call):
        block = {
            "type": "tool_use",
            "id": f"toolu_fake_{uuid.uuid4().hex[:16]}",
            "name": step.tool,
            "input": dict(step.input) if isinstance(step.input, Mapping) else {"input": step.input},
        }
        return [{"type": "text", "text": f"Calling {step.tool}."}, block]
    assert isinstance(step, Say)
    return [{"type": "text", "text": step.text}]


def read_view(messages: Sequence[Any], tools: frozenset[str]) -> View:
    """The marker of the last user message carrying one, and what followed it."""
    start = None
    key = None
    for index, message in enumerate(messages):
        if not isinstance(message, Mapping) or message.get("role") != "user":
            continue
        found = find_marker(_text_of(message.get("content")))
        if found is not None:
            start, key = index, found
    if start is None:
        return View(None, 0, (), tools)
    turns = 0
    results: list[ToolResult] = []
    for message in messages[start + 1 :]:
        if not isinstance(message, Mapping):
            continue
        if message.get("role") == "assistant":
            turns += 1
            continue
        for block in _blocks(message.get("content")):
            if block.get("type") == "tool_result":
                results.append(
                    ToolResult(_text_of(block.get("content")), bool(block.get("is_error")))
                )
    return View(key, turns, tuple(results), tools)


def _blocks(content: Any) -> list[Mapping[str, Any]]:
    if isinstance(content, list):
        return [block for block in content if isinstance(block, Mapping)]
    return []


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    return " ".join(
        str(block.get("text", "")) for block in _blocks(content) if block.get("type") == "text"
    )


def _rough_tokens(raw: bytes) -> int:
    return max(1, len(raw) // 4)
