"""From ACP turn events to what the A2A caller sees: a pure, synchronous mapping.

`TurnProgress.feed(events)` returns the outputs to publish, in order:

- `AnswerText`: text for the answer artifact. Text is coalesced: a batch of chunks is
  flushed when the buffer holds about 160 characters or a newline, when the channel
  changes (answer and thinking), before any tool, plan or notice, and at the end. The
  first answer text goes out at once. Text held below those marks is flushed after
  `HOLD_S` by a tick (`feed([])`), so a slow agent still streams.
- `StatusText`: a WORKING status message: thinking, a tool call (title, kind, status;
  repeated only when its status changes), a plan, a refusal by the bridge, a notice.
- `ChangeMade`: a file edit the agent completed (ACP diff content), for the `changes`
  artifact.
- `AnswerFile`: a file or structured data in the answer (ACP image, audio, resource or
  resource link), a part of its own in the answer artifact.
- `Question`: the agent asks the caller something; the task waits in INPUT_REQUIRED.

`TurnProgress.outcome(...)` decides the task's final state and its note, and
`TurnProgress.summary(...)` builds the turn's report (the final status's metadata).
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from a2a_acp_bridge.events import (
    FileChunk,
    FileDiff,
    ModeSeen,
    Notice,
    PermissionSeen,
    PlanSeen,
    QuestionAsked,
    TextChunk,
    ToolCallSeen,
    TurnEnd,
    TurnEvent,
)
from a2a_acp_bridge.permissions import Refusal

FLUSH_CHARS = 160
# Longest time text below the flush mark waits for more before it is sent anyway.
HOLD_S = 0.1
# The end of the answer kept to quote an agent's refusal in the task's status.
ANSWER_TAIL_CHARS = 2000
STATUS_LABELS = {
    "pending": "pending",
    "in_progress": "running",
    "completed": "done",
    "failed": "failed",
}


@dataclass(frozen=True, slots=True)
class AnswerText:
    text: str


@dataclass(frozen=True, slots=True)
class StatusText:
    text: str


@dataclass(frozen=True, slots=True)
class ChangeMade:
    tool_call_id: str
    diff: FileDiff


@dataclass(frozen=True, slots=True)
class AnswerFile:
    file: FileChunk


@dataclass(frozen=True, slots=True)
class Question:
    question: QuestionAsked


Output = AnswerText | StatusText | ChangeMade | AnswerFile | Question


class FinalState(enum.Enum):
    COMPLETED = "completed"
    CANCELED = "canceled"
    REJECTED = "rejected"
    FAILED = "failed"


@dataclass(frozen=True)
class Outcome:
    state: FinalState
    message: str | None


@dataclass
class _ToolCall:
    tool_call_id: str
    title: str | None
    kind: str | None
    status: str | None
    announced_status: str | None = None
    changes_sent: bool = False
    # The latest diffs reported for the call: claude-agent-acp and codex-acp send them with
    # the tool call (or an update) before its permission request, not with its completion.
    diffs: tuple[FileDiff, ...] = ()


class TurnProgress:
    """The state of one turn as the caller sees it."""

    def __init__(self) -> None:
        self._buffer: list[str] = []
        self._buffered = 0
        self._channel: str | None = None
        self._answered = False
        self._tool_calls: dict[str, _ToolCall] = {}
        self.refusals: list[Refusal] = []
        self._answer_tail = ""

    # --- feeding -----------------------------------------------------------------------

    def feed(self, events: Sequence[TurnEvent]) -> list[Output]:
        """Outputs for a batch of events; an empty batch is a tick that releases held text."""
        out: list[Output] = []
        if not events:
            self._flush(out)
            return out
        for event in events:
            kind = type(event)
            if kind is TextChunk:
                assert isinstance(event, TextChunk)
                if event.channel != self._channel and self._buffer:
                    self._flush(out)
                self._channel = event.channel
                self._buffer.append(event.text)
                self._buffered += len(event.text)
                continue
            self._flush(out)
            if kind is FileChunk:
                assert isinstance(event, FileChunk)
                self._answered = True
                out.append(AnswerFile(event))
            elif kind is QuestionAsked:
                assert isinstance(event, QuestionAsked)
                out.append(Question(event))
            elif kind is ToolCallSeen:
                assert isinstance(event, ToolCallSeen)
                self._tool_call(event, out)
            elif kind is PermissionSeen:
                assert isinstance(event, PermissionSeen)
                if event.refusal is not None:
                    self.refusals.append(event.refusal)
                    out.append(StatusText(f"Refused by the bridge: {event.refusal.summary()}"))
            elif kind is PlanSeen:
                assert isinstance(event, PlanSeen)
                lines = [f"· [{entry.status}] {entry.content}" for entry in event.entries]
                out.append(StatusText("Plan:\n" + "\n".join(lines)))
            elif kind is ModeSeen:
                assert isinstance(event, ModeSeen)
                out.append(StatusText(f"The agent's mode is now {event.mode_id!r}."))
            elif kind is Notice:
                assert isinstance(event, Notice)
                out.append(StatusText(event.text))
        if self._buffer and self._due():
            self._flush(out)
        return out

    @property
    def holding(self) -> bool:
        """True when text is held back below the flush mark (a tick will release it)."""
        return bool(self._buffer)

    def finish(self) -> list[Output]:
        out: list[Output] = []
        self._flush(out)
        return out

    def _due(self) -> bool:
        if self._buffered >= FLUSH_CHARS:
            return True
        if self._channel == "answer" and not self._answered:
            return True  # the first answer text goes out at once
        return any("\n" in piece for piece in self._buffer)

    def _flush(self, out: list[Output]) -> None:
        if not self._buffer:
            return
        text = "".join(self._buffer)
        self._buffer.clear()
        self._buffered = 0
        if self._channel == "thought":
            out.append(StatusText(f"Thinking: {text}"))
        else:
            self._answered = True
            self._answer_tail = (self._answer_tail + text)[-ANSWER_TAIL_CHARS:]
            out.append(AnswerText(text))

    def _tool_call(self, event: ToolCallSeen, out: list[Output]) -> None:
        call = self._tool_calls.get(event.tool_call_id)
        if call is None:
            call = _ToolCall(event.tool_call_id, event.title, event.kind, event.status or "pending")
            self._tool_calls[event.tool_call_id] = call
        else:
            call.title = event.title if event.title is not None else call.title
            call.kind = event.kind if event.kind is not None else call.kind
            call.status = event.status if event.status is not None else call.status
        if event.diffs:
            call.diffs = event.diffs
        if call.status != call.announced_status:
            call.announced_status = call.status
            title = " ".join((call.title or call.tool_call_id).split())
            label = STATUS_LABELS.get(call.status or "pending", call.status or "pending")
            out.append(StatusText(f"Tool call: {title} ({call.kind or 'other'}, {label})"))
        if call.status == "completed" and call.diffs and not call.changes_sent:
            call.changes_sent = True
            out.extend(ChangeMade(call.tool_call_id, diff) for diff in call.diffs)

    # --- the end -----------------------------------------------------------------------

    @property
    def failed_tool_calls(self) -> int:
        return sum(1 for call in self._tool_calls.values() if call.status == "failed")

    def tool_calls(self) -> list[dict[str, Any]]:
        return [
            {
                "toolCallId": call.tool_call_id,
                "title": call.title or "",
                "kind": call.kind or "other",
                "status": call.status or "pending",
            }
            for call in self._tool_calls.values()
        ]

    def outcome(self, end: TurnEnd, *, cancel_reason: str | None, agent: str) -> Outcome:
        """The task's final state and its note. A cancelled task (cancel_reason set) ends
        CANCELED whatever the agent reported, also `end_turn`."""
        refused = [refusal.summary() for refusal in self.refusals]
        if cancel_reason is not None:
            if end.stop_reason == "end_turn":
                return Outcome(
                    FinalState.CANCELED,
                    f"{cancel_reason} The agent had already finished this turn; "
                    "its answer is in the artifact.",
                )
            return Outcome(FinalState.CANCELED, cancel_reason)
        reason = end.stop_reason
        if reason == "cancelled":
            if refused:
                return Outcome(FinalState.CANCELED, "Refused by the bridge: " + "; ".join(refused))
            return Outcome(FinalState.CANCELED, f"{agent} cancelled the turn.")
        if reason == "refusal":
            words = self._answer_tail.strip()
            return Outcome(FinalState.REJECTED, words or f"{agent} refused the request.")
        if reason in ("max_tokens", "max_turn_requests"):
            why = (
                "the agent reached its token limit"
                if reason == "max_tokens"
                else ("the agent reached its limit of model requests for one turn")
            )
            return Outcome(FinalState.COMPLETED, f"Stopped early: {why} ({reason}).")
        notes = []
        if refused:
            notes.append(f"{len(refused)} action(s) refused by the bridge: " + "; ".join(refused))
        failed = self.failed_tool_calls
        if failed:
            notes.append(f"{failed} tool call(s) failed")
        if notes:
            return Outcome(FinalState.COMPLETED, "Done, but " + "; and ".join(notes) + ".")
        return Outcome(FinalState.COMPLETED, None)

    def summary(self, end: TurnEnd, *, session_id: str) -> dict[str, Any]:
        """The turn's report, for the final status's metadata (a2a/artifacts.py)."""
        data: dict[str, Any] = {
            "stopReason": end.stop_reason,
            "usage": dict(end.usage),
            "toolCalls": self.tool_calls(),
            "failedToolCalls": self.failed_tool_calls,
            "refusedByBridge": [refusal_to_dict(refusal) for refusal in self.refusals],
            "sessionId": session_id,
        }
        return data


def refusal_to_dict(refusal: Refusal) -> dict[str, Any]:
    return {
        "action": refusal.label,
        "toolCallId": refusal.tool_call_id,
        "kind": refusal.kind or "other",
        "rule": refusal.rule,
        "reason": refusal.reason,
        "answer": refusal.answer if refusal.answer is not None else "cancelled",
        "turn": refusal.turn_effect,
        "offered": [{"optionId": option_id, "kind": kind} for option_id, kind in refusal.offered],
    }
