"""What a fake model does for one prompt: a script of steps, chosen by a marker in the prompt.

A test registers a `Script` with the server and puts the marker the server hands back
(`[[script:KEY]]`) in its prompt. On every main request the server finds the last user
message that carries a marker and counts the model turns already taken after it: that
count is the step to play. Once the steps are used up the model ends with a text that
repeats every tool result it was sent after the marker, so a test reads in the answer
what the adapter told the model (a command's output, a refusal, an error).

Steps:
    Call(tool, input)   call a tool (input: a JSON object, or raw text for a freeform tool)
    Say(text)           answer with text; the turn ends there
    Stall()             never answer: hold the request open until the client goes away

Requests that are not the main conversation (Claude Code's side requests, structured
output such as titles, routing or next-speaker checks) are answered by `schema_instance`
or plain text and never advance a script.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

MARKER = re.compile(r"\[\[script:([0-9a-f]{12})\]\]")


@dataclass(frozen=True)
class Call:
    """The model calls `tool` with `input` (a dict of arguments, or text for a custom tool)."""

    tool: str
    input: Mapping[str, Any] | str


@dataclass(frozen=True)
class Say:
    """The model answers with text and ends its turn."""

    text: str


@dataclass(frozen=True)
class Stall:
    """The model never answers this request."""


Step = Call | Say | Stall


@dataclass
class Script:
    """The steps of one prompt; `final` (if set) replaces the echo of tool results at the end."""

    steps: Sequence[Step]
    final: str | None = None
    key: str = field(default_factory=lambda: uuid.uuid4().hex[:12])

    @property
    def marker(self) -> str:
        return f"[[script:{self.key}]]"


@dataclass(frozen=True)
class ToolResult:
    """What the adapter sent back for one tool call."""

    text: str
    is_error: bool = False


@dataclass(frozen=True)
class View:
    """A main request as the script reads it: the marker, turns taken since, tool results."""

    key: str | None
    turns_taken: int
    results: tuple[ToolResult, ...]
    tools: frozenset[str]


def find_marker(text: str) -> str | None:
    found = MARKER.findall(text)
    return found[-1] if found else None


def next_step(script: Script | None, view: View) -> Step:
    """The step a main request gets."""
    if script is None:
        return Say(
            "This fake model has no script for this prompt (no known [[script:...]] marker)."
        )
    if view.turns_taken < len(script.steps):
        step = script.steps[view.turns_taken]
        if isinstance(step, Call) and view.tools and step.tool not in view.tools:
            offered = ", ".join(sorted(view.tools))
            return Say(f"SCRIPT ERROR: the tool {step.tool!r} is not offered (offered: {offered})")
        return step
    if script.final is not None:
        return Say(script.final)
    return Say(echo(view.results))


def echo(results: Sequence[ToolResult]) -> str:
    """The final answer: every tool result the model was sent, in order."""
    if not results:
        return "Done. No tool results were seen."
    shown = "; ".join(
        f"{'ERROR ' if result.is_error else ''}{' '.join(result.text.split())!r}"
        for result in results
    )
    return f"Done. Tool results seen: {shown}"


# Values picked for well-known structured-output fields, so side requests steer nowhere:
# gemini-cli's next-speaker check must hand the turn back to the user, codex's guardian
# (never reached in a supervised mode) would deny.
SCHEMA_CHOICES: Mapping[str, Any] = {
    "next_speaker": "user",
    "outcome": "deny",
    "model_choice": "flash",
}


def schema_instance(schema: Any, name: str = "") -> Any:
    """A small value that satisfies a JSON schema (as far as side requests need)."""
    if not isinstance(schema, Mapping):
        return "ok"
    if name in SCHEMA_CHOICES:
        wanted = SCHEMA_CHOICES[name]
        choices = schema.get("enum")
        if not choices or wanted in choices:
            return wanted
    if "const" in schema:
        return schema["const"]
    if schema.get("enum"):
        return schema["enum"][0]
    for combinator in ("anyOf", "oneOf", "allOf"):
        if schema.get(combinator):
            return schema_instance(schema[combinator][0], name)
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if isinstance(kind, str):
        kind = kind.lower()
    if kind == "object" or "properties" in schema:
        properties = schema.get("properties") or {}
        return {key: schema_instance(value, key) for key, value in properties.items()}
    if kind == "array":
        return []
    if kind in ("integer", "number"):
        return 0
    if kind == "boolean":
        return False
    if kind == "null":
        return None
    return "Offline test"
