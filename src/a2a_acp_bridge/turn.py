"""One A2A task's turn on the agent: the one object every layer shares.

The executor creates a `Turn` when it accepts a task (`Bridge.accept` registers it, so a
cancel finds it from that moment on); the bridge queues it and runs it on its
conversation's ACP session; the session's client reads it to answer permission requests
and to hold the agent's question for the caller; the executor reads how it ended. Each fact
about the task lives here once:

- its ids (task, context, the caller's message, and the ACP session once it runs) and the
  principal whose task it is (its conversation is the pair, `conversation_key`; the
  permission path and the decision ledger read `principal` from here);
- the cancel request and its reason (`request_cancel`: the caller's CancelTask, or the
  bridge shutting down) and whether session/cancel was sent to the agent (`interrupted`:
  for the caller's cancel, and also for the bridge's own reasons, a deadline or a mode the
  agent must not work in); from then on every permission request is answered `cancelled`;
- the question the agent asked its user, waiting for the caller's answer;
- the permission requests waiting for a supervisor's decision (`deciding_since`: the
  turn's silence deadline is suspended meanwhile), and `stopped`, set at the interrupt, so
  a pending decision is answered `cancelled` at once;
- how the agent ended its prompt (`end`), and completion (`done`, set once the task's
  final state is published).
"""

from __future__ import annotations

import enum
import time
from dataclasses import dataclass, field

import anyio

from a2a_acp_bridge.events import QuestionAsked, QuestionReply, TurnEnd
from a2a_acp_bridge.principals import conversation_key
from a2a_acp_bridge.schema import DEFAULT_PRINCIPAL

CALLER_CANCEL_REASON = "Cancelled at the caller's request."


class TurnCancelled(Exception):
    """The task was cancelled before its turn reached the agent."""


class Phase(enum.Enum):
    QUEUED = "queued"  # accepted: waiting for its place in the conversation, or its adapter
    RUNNING = "running"  # the agent works on its prompt (or waits for the caller's answer)
    ENDED = "ended"  # the agent's side is over; the final state is being published


@dataclass(eq=False)
class PendingQuestion:
    """The agent's question (ACP elicitation), waiting for the caller's answer."""

    asked: QuestionAsked
    asked_at: float = field(default_factory=time.monotonic)
    reply: QuestionReply | None = None
    _settled: anyio.Event = field(default_factory=anyio.Event)

    def settle(self, reply: QuestionReply) -> bool:
        """Give the answer; False if the question was already answered or declined."""
        if self.reply is not None:
            return False
        self.reply = reply
        self._settled.set()
        return True

    async def wait(self) -> QuestionReply:
        await self._settled.wait()
        assert self.reply is not None
        return self.reply


@dataclass(eq=False)
class Turn:
    """One task waiting for, or running, its turn in a conversation."""

    task_id: str
    context_id: str
    message_id: str | None = None
    session_id: str | None = None
    phase: Phase = Phase.QUEUED
    cancel_reason: str | None = None
    interrupted: bool = False
    question: PendingQuestion | None = None
    end: TurnEnd | None = None
    done: anyio.Event = field(default_factory=anyio.Event)
    # Set when interrupted: a decision waiting on a supervisor ends `cancelled` at once.
    stopped: anyio.Event = field(default_factory=anyio.Event)
    # When each permission request still waiting for a supervisor began (monotonic).
    _deciding: list[float] = field(default_factory=list)
    principal: str = DEFAULT_PRINCIPAL
    # Wakes whoever waits for this turn's place in the queue or for its adapter's start.
    _wake: anyio.Event = field(default_factory=anyio.Event)

    @property
    def conversation_key(self) -> str:
        """The bridge's key of this task's conversation: (principal, contextId)."""
        return conversation_key(self.principal, self.context_id)

    @property
    def running(self) -> bool:
        return self.phase is Phase.RUNNING

    @property
    def cancelled(self) -> bool:
        """The caller (or the bridge's shutdown) asked to cancel this task."""
        return self.cancel_reason is not None

    def request_cancel(self, reason: str | None = None) -> bool:
        """Mark the task cancelled (the first reason stays); False if it already was."""
        if self.cancel_reason is not None:
            return False
        self.cancel_reason = reason or CALLER_CANCEL_REASON
        self.wake()
        return True

    def interrupt(self) -> bool:
        """session/cancel goes to the agent: decline the pending question, and answer every
        later permission request `cancelled`. False if it was already interrupted."""
        if self.interrupted:
            return False
        self.interrupted = True
        self.stopped.set()
        question = self.question
        if question is not None:
            question.settle(QuestionReply("decline"))
        return True

    def ask(self, asked: QuestionAsked) -> PendingQuestion:
        """Hold the agent's question until the caller answers it (or it is declined)."""
        pending = PendingQuestion(asked)
        if self.interrupted:
            pending.settle(QuestionReply("decline"))
        self.question = pending
        return pending

    def deciding(self, since: float) -> None:
        """A permission request waits for a supervisor from `since` (monotonic)."""
        self._deciding.append(since)

    def decided(self, since: float) -> None:
        if since in self._deciding:
            self._deciding.remove(since)

    @property
    def deciding_since(self) -> float | None:
        """When the oldest decision still waiting began, or None."""
        return min(self._deciding) if self._deciding else None

    def answer(self, question_id: str, reply: QuestionReply) -> bool:
        """The caller's answer to the pending question; False if no such question waits."""
        question = self.question
        if question is None or question.asked.question_id != question_id:
            return False
        return question.settle(reply)

    def question_settled(self, pending: PendingQuestion) -> None:
        """The agent has its reply: the question no longer waits."""
        if self.question is pending:
            self.question = None

    def wake(self) -> None:
        self._wake.set()

    async def wait_wake(self) -> None:
        """Wait until woken (its turn in the queue, a cancel), then re-arm."""
        await self._wake.wait()
        self._wake = anyio.Event()

    def rearm(self) -> None:
        """Forget a wake that was set for a reason already handled."""
        if self._wake.is_set():
            self._wake = anyio.Event()

    @property
    def woken(self) -> anyio.Event:
        return self._wake

    def finish(self) -> None:
        """The task's final state (or its failure) is published: nothing waits for it now."""
        self.phase = Phase.ENDED
        self.done.set()
