"""What happens during an ACP turn, in the bridge's own words.

The `acp` package turns the SDK's session updates into these frozen values; the `a2a`
package turns them into A2A events. Neither side sees the other's SDK.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from a2a_acp_bridge.permissions import Refusal

Channel = Literal["answer", "thought"]


@dataclass(frozen=True, slots=True)
class TextChunk:
    """A piece of the agent's answer or of its thinking."""

    channel: Channel
    text: str


@dataclass(frozen=True, slots=True)
class FileChunk:
    """A file (or structured data) in the agent's answer: an ACP image, audio, embedded
    resource or resource link. Exactly one of `uri` (by reference), `data` (bytes) and
    `text` (an embedded text resource) is set."""

    name: str | None
    media_type: str | None
    uri: str | None = None
    data: bytes | None = None
    text: str | None = None


@dataclass(frozen=True, slots=True)
class QuestionAsked:
    """The agent asks its user something (ACP `elicitation/create`, form mode).

    `schema` is the requested JSON Schema (an object with `properties`); the caller's
    answer goes back through `Bridge.answer_question` with `question_id`."""

    question_id: str
    message: str
    schema: Mapping[str, Any]
    tool_call_id: str | None = None


@dataclass(frozen=True)
class QuestionReply:
    """The answer to a QuestionAsked: accept (with the form's content), decline or cancel.
    `meta` travels as the response's `_meta`."""

    action: Literal["accept", "decline", "cancel"]
    content: Mapping[str, Any] | None = None
    meta: Mapping[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class FileDiff:
    """An edit the agent reported: the whole old and new text of one file (old None: new file)."""

    path: str
    old_text: str | None
    new_text: str


@dataclass(frozen=True, slots=True)
class ToolCallSeen:
    """A `tool_call` or `tool_call_update`: only the fields the agent sent are set."""

    tool_call_id: str
    started: bool
    title: str | None = None
    kind: str | None = None
    status: str | None = None
    locations: tuple[str, ...] | None = None
    diffs: tuple[FileDiff, ...] = ()
    raw_input: Any = None


@dataclass(frozen=True, slots=True)
class PlanEntry:
    content: str
    status: str
    priority: str = "medium"


@dataclass(frozen=True, slots=True)
class PlanSeen:
    """The agent's whole plan (each update replaces the previous one)."""

    entries: tuple[PlanEntry, ...]


@dataclass(frozen=True, slots=True)
class ModeSeen:
    """The session's mode changed (current_mode_update or the mode config option)."""

    mode_id: str


@dataclass(frozen=True, slots=True)
class PermissionSeen:
    """The bridge decided a permission request; `refusal` is set when it was not allowed."""

    tool_call_id: str
    label: str
    allowed: bool
    option_id: str | None
    rule: str
    refusal: Refusal | None = None


@dataclass(frozen=True, slots=True)
class Notice:
    """Something the caller should read in the task's progress (memory lost, queued, ...)."""

    text: str


@dataclass(frozen=True)
class TurnEnd:
    """The agent answered session/prompt (`meta`: the answer's `_meta`, if any)."""

    stop_reason: str
    usage: Mapping[str, int] = field(default_factory=dict)
    meta: Mapping[str, Any] = field(default_factory=dict)


TurnEvent = (
    TextChunk
    | FileChunk
    | ToolCallSeen
    | PlanSeen
    | ModeSeen
    | PermissionSeen
    | Notice
    | QuestionAsked
)
