"""The human console's waiting room: questions parked until an operator clicks.

`ConsoleSupervisor.ask` parks a question and waits for `decide` (a click in the console,
console_web.py), the question's deadline (a deny) or the cancellation of the task (the
chain answers `cancelled`). Whatever ends the wait, the question leaves the waiting list
and joins the recent ones, so a late click is told it came too late (`gone`) rather than
not found (`unknown`). Readers of the console follow `version`, which moves on every
change, by awaiting `changed()`.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import anyio

from a2a_acp_bridge.decision import Answer, Question, log_answer

logger = logging.getLogger(__name__)

# Recent decisions the console shows (its own memory; the ledger keeps every one).
RECENT_LIMIT = 50
# Ended question ids remembered, so a late click gets "too late", not "unknown".
ENDED_MEMORY = 1000
MAX_REASON_CHARS = 500
# A wait cancelled this close to its deadline was ended by the deadline, not by a cancel.
DEADLINE_SLACK_S = 0.1

Outcome = Callable[[str, float, str | None], None]  # (verdict, seconds, failure cause)
Decided = Literal["decided", "unknown", "gone"]


@dataclass
class Waiting:
    """A parked question and, once decided, its answer."""

    question: Question
    done: anyio.Event
    answer: Answer | None = None
    by: str = ""  # who clicked (the client's address), for the log line


def question_view(question: Question) -> dict[str, Any]:
    """What the console shows of a waiting question (JSON; the page escapes it all)."""
    return {
        "id": question.id,
        "principal": question.principal,
        "task_id": question.task_id,
        "context_id": question.context_id,
        "adapter": question.adapter,
        "kind": question.kind,
        "title": question.title,
        "tool_name": question.tool_name,
        "command": question.command,
        "diff": question.diff,
        "locations": list(question.locations),
        "root": question.root,
        "rule": question.rule,
        "reason": question.reason,
        "asked_at": question.asked_at,
        "deadline": question.deadline,
    }


class ConsoleSupervisor:
    """Parks questions for a human; see the module's docstring."""

    name = "console"

    def __init__(
        self, *, on_outcome: Outcome | None = None, clock: Callable[[], float] = time.time
    ) -> None:
        self._waiting: dict[str, Waiting] = {}
        self._recent: deque[dict[str, Any]] = deque(maxlen=RECENT_LIMIT)
        self._ended: OrderedDict[str, str] = OrderedDict()
        self._changed = anyio.Event()
        self._on_outcome = on_outcome
        self._clock = clock
        self.version = 0

    async def ask(self, question: Question) -> Answer:
        """The operator's answer, or a deny when the deadline passes first."""
        waiting = Waiting(question, anyio.Event())
        self._waiting[question.id] = waiting
        self._touch()
        started = time.monotonic()
        how = "cancelled"
        try:
            with anyio.move_on_after(max(0.0, question.deadline - self._clock())):
                await waiting.done.wait()
            if waiting.answer is None:
                how = "expired"
                waiting.answer = Answer(
                    "deny", "no operator decided before the deadline", self.name
                )
            else:
                how = "decided"
            return waiting.answer
        finally:
            if how == "cancelled" and self._clock() >= question.deadline - DEADLINE_SLACK_S:
                # The chain's own deadline (the same instant) cancelled the wait.
                how = "expired"
            self._waiting.pop(question.id, None)
            self._end(waiting, how, time.monotonic() - started)

    def decide(self, question_id: str, verdict: str, reason: str, *, by: str = "") -> Decided:
        """Answer a waiting question (a click from `by`): `unknown` id, `gone` (decided,
        expired or cancelled already), or `decided`."""
        waiting = self._waiting.get(question_id)
        if waiting is not None and waiting.answer is not None:
            return "gone"  # clicked twice, or from two windows: the first click stands
        if waiting is None:
            return "gone" if question_id in self._ended else "unknown"
        if verdict not in ("allow", "deny"):
            raise ValueError("verdict must be allow or deny")
        text = reason.strip()[:MAX_REASON_CHARS]
        default = "the operator allowed it" if verdict == "allow" else "the operator denied it"
        waiting.answer = Answer(
            "allow" if verdict == "allow" else "deny", text or default, self.name
        )
        waiting.by = by
        waiting.done.set()
        return "decided"

    def waiting(self) -> list[dict[str, Any]]:
        """The questions that wait, the oldest first."""
        ordered = sorted(self._waiting.values(), key=lambda w: w.question.asked_at)
        return [question_view(w.question) for w in ordered if w.answer is None]

    def recent(self) -> list[dict[str, Any]]:
        """How the last questions ended, the newest first."""
        return list(reversed(self._recent))

    async def changed(self, version: int) -> None:
        """Return once `version` is no longer the current one."""
        while self.version == version:
            await self._changed.wait()

    def _touch(self) -> None:
        self.version += 1
        self._changed.set()
        self._changed = anyio.Event()

    def _end(self, waiting: Waiting, how: str, elapsed: float) -> None:
        question = waiting.question
        answer = waiting.answer
        verdict = answer.verdict if answer is not None and how == "decided" else "deny"
        reason = answer.reason if answer is not None else "the task was cancelled"
        self._ended[question.id] = how
        while len(self._ended) > ENDED_MEMORY:
            self._ended.popitem(last=False)
        self._recent.append(
            {
                **question_view(question),
                "diff": None,
                "verdict": verdict,
                "by": self.name,
                "how": how,
                "answer_reason": reason,
                "decider": self.name,
                "ended_at": self._clock(),
            }
        )
        self._touch()
        cause = None if how == "decided" else ("timeout" if how == "expired" else "cancelled")
        if self._on_outcome is not None:
            self._on_outcome(verdict, elapsed, cause)
        log_answer(self.name, question, verdict, cause, elapsed, by=waiting.by or None)
