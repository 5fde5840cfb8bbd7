"""The decision seam: what a supervisor is asked, what it answers, and what it must be.

A supervisor (the webhook, the human console, or both in turn) is asked only about what the
policy says `ask`. The chain (decisions.py) builds one `Question` per such request, awaits
`Supervisor.ask` under the question's deadline, and treats whatever goes wrong (a raise, a
timeout, the task's cancel) as a refusal. The supervisor answers `allow` or `deny` with a
reason and nothing else: the bridge alone chooses among the options the agent offered.

Shared by the decisions and the supervisors sides of issue 20: fields are only ever added at
the end, with defaults.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Literal, Protocol

logger = logging.getLogger(__name__)

# The most of a diff a question carries (bytes of UTF-8); the rest is cut, and says so.
DIFF_LIMIT_BYTES = 64 * 1024


@dataclass(frozen=True)
class Question:
    """One permission request a supervisor is asked about."""

    id: str  # uuid4 hex, unique per question (the console's handle)
    principal: str  # the A2A caller's principal name ("default" until issue 13)
    context_id: str
    task_id: str
    session_id: str
    adapter: str  # preset name or command
    tool_call_id: str
    kind: str  # ACP ToolKind value ("execute", "edit", ...)
    title: str
    tool_name: str | None  # from _meta / rawInput where the adapter says it
    raw_input: Any  # the tool call's rawInput, JSON-serialisable, truncated
    locations: tuple[str, ...]  # paths as the agent gave them
    command: str | None  # the command line for execute, else None
    diff: str | None  # unified diff text, truncated to DIFF_LIMIT_BYTES
    root: str
    owned: bool  # the bridge made the root (a sandbox) vs a handed ACP_CWD
    allow_execute: bool
    rule: str  # id of the policy rule that said "ask"
    reason: str  # that rule's reason
    asked_at: float  # time.time()
    deadline: float  # time.time() by which an answer must come, else deny


@dataclass(frozen=True)
class Answer:
    """A supervisor's verdict on one question."""

    verdict: Literal["allow", "deny"]
    reason: str
    decider: str  # "webhook", "console", ...


class Supervisor(Protocol):
    """Who is asked about what the policy says `ask`.

    `ask` may raise anything and may never return: the chain wraps every call in the
    question's deadline (anyio.fail_after) and treats a raise, a timeout or a cancellation
    of the task as deny (cancelled), recording why."""

    name: str

    async def ask(self, question: Question) -> Answer: ...


def log_answer(
    supervisor: str,
    question: Question,
    verdict: str,
    cause: str | None,
    elapsed_s: float,
    **more: Any,
) -> None:
    """The one log line of a supervisor's answer (the principal's name, never a token or a
    secret)."""
    logger.info(
        "supervisor answered",
        extra={
            "supervisor": supervisor,
            "question": question.id,
            "principal": question.principal,
            "task_id": question.task_id,
            "context_id": question.context_id,
            "kind": question.kind,
            "verdict": verdict,
            "cause": cause,
            "latency_ms": round(elapsed_s * 1000, 1),
            **more,
        },
    )
