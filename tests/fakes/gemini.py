"""A fake Gemini API (v1beta) for gemini-cli (`gemini --acp`) on 127.0.0.1.

Serves `POST /v1beta/models/MODEL:streamGenerateContent?alt=sse` (Server-Sent Events,
one `data:` line per chunk, no event names), `:generateContent` (one JSON response) and
`:countTokens`. A request that asks for JSON output (`generationConfig.responseJsonSchema`,
`responseSchema` or `responseMimeType: application/json`) is a side request (gemini-cli's
model router and next-speaker check) and gets an instance of the schema; any other is the
main conversation and plays the script. A `Call` becomes a `functionCall` part.
"""

from __future__ import annotations

import json
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

PREFIX = "/v1beta/models/"
# Vertex AI's paths: express mode (an API key), and a project's location.
VERTEX_PREFIX = "/v1beta1/"
VERTEX_MODELS = "publishers/google/models/"


class FakeGemini(FakeModelServer):
    label = "gemini"

    def handle(self, method: str, exchange: Exchange) -> None:
        path = exchange.path
        model_path = _model_path(path)
        if method == "POST" and model_path is not None and ":" in model_path:
            model, _, action = model_path.rpartition(":")
            if action in ("streamGenerateContent", "generateContent"):
                self._generate(exchange, model, stream=action == "streamGenerateContent")
                return
            if action == "countTokens":
                self.record(Seen(method, path, model, "other"))
                exchange.send_json({"totalTokens": max(1, len(exchange.raw) // 4)})
                return
        if method == "GET" and path.rstrip("/") == PREFIX.rstrip("/"):
            self.record(Seen(method, path, None, "other"))
            exchange.send_json({"models": []})
            return
        self.not_found(method, exchange)

    def _generate(self, exchange: Exchange, model: str, *, stream: bool) -> None:
        body = exchange.json_body()
        config = body.get("generationConfig") or {}
        schema = config.get("responseJsonSchema") or config.get("responseSchema")
        if schema is not None or config.get("responseMimeType") == "application/json":
            self.record(Seen("POST", exchange.path, model, "side"))
            parts = [{"text": json.dumps(schema_instance(schema))}]
            self._answer(exchange, model, parts, stream=stream)
            return
        tools = frozenset(
            str(declaration.get("name"))
            for tool in body.get("tools") or ()
            if isinstance(tool, Mapping)
            for declaration in tool.get("functionDeclarations") or ()
            if isinstance(declaration, Mapping)
        )
        view = read_view(body.get("contents") or [], tools)
        step = next_step(self.script(view.key), view)
        system = " ".join(
            str(part.get("text", "")) for part in _parts(body.get("systemInstruction") or {})
        )
        self.record(Seen("POST", exchange.path, model, "main", type(step).__name__, system))
        if isinstance(step, Stall):
            self.stall(exchange)
            return
        self._answer(exchange, model, content_parts(step), stream=stream)

    def _answer(
        self, exchange: Exchange, model: str, parts: list[dict[str, Any]], *, stream: bool
    ) -> None:
        prompt_tokens = max(1, len(exchange.raw) // 4)
        response = {
            "candidates": [
                {
                    "content": {"role": "model", "parts": parts},
                    "finishReason": "STOP",
                    "index": 0,
                }
            ],
            "usageMetadata": {
                "promptTokenCount": prompt_tokens,
                "candidatesTokenCount": 12,
                "totalTokenCount": prompt_tokens + 12,
            },
            "modelVersion": model,
        }
        if not stream:
            exchange.send_json(response)
            return
        exchange.start_stream()
        exchange.event(response)
        exchange.end_stream()


def content_parts(step: Step) -> list[dict[str, Any]]:
    if isinstance(step, Call):
        args = dict(step.input) if isinstance(step.input, Mapping) else {"input": step.input}
        return [{"functionCall": {"name": step.tool, "args": args}}]
    assert isinstance(step, Say)
    return [{"text": step.text}]


def read_view(contents: Sequence[Any], tools: frozenset[str]) -> View:
    """The marker of the last user content carrying one, and what followed it."""
    start = None
    key = None
    for index, content in enumerate(contents):
        if not isinstance(content, Mapping) or content.get("role", "user") != "user":
            continue
        text = " ".join(str(part.get("text", "")) for part in _parts(content))
        found = find_marker(text)
        if found is not None:
            start, key = index, found
    if start is None:
        return View(None, 0, (), tools)
    turns = 0
    results: list[ToolResult] = []
    for content in contents[start + 1 :]:
        if not isinstance(content, Mapping):
            continue
        if content.get("role") == "model":
            turns += 1
            continue
        for part in _parts(content):
            response = part.get("functionResponse")
            if isinstance(response, Mapping):
                results.append(_result(response.get("response")))
    return View(key, turns, tuple(results), tools)


def _parts(content: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [part for part in content.get("parts") or () if isinstance(part, Mapping)]


def _result(response: Any) -> ToolResult:
    if isinstance(response, Mapping):
        if "error" in response:
            return ToolResult(str(response["error"]), is_error=True)
        if "output" in response:
            return ToolResult(str(response["output"]))
        return ToolResult(json.dumps(response))
    return ToolResult(str(response))


def _model_path(path: str) -> str | None:
    """`MODEL:action` of a Gemini API or a Vertex AI request path, else None."""
    if path.startswith(PREFIX):
        return path[len(PREFIX) :]
    if path.startswith(VERTEX_PREFIX) and VERTEX_MODELS in path:
        return path.split(VERTEX_MODELS, 1)[1]
    return None
