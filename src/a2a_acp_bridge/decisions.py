"""The decision chain: who decides a permission request, in which order, within one deadline.

    1. the floor (permissions.floor), which nothing overrides;
    2. the policy file (policy.py, ACP_POLICY), if any;
    3. a supervisor (decision.py's seam: the webhook, the console), for what the policy says
       `ask`; an `ask` with no supervisor configured is a refusal that says so;
    4. the built-in table (permissions.decide), for what nothing above decided.

Without a policy the chain is the table exactly (its floor included). `judge` is the pure
part (1, 2, 4); `DecisionChain.decide` adds the supervisor: one deadline per request
(ACP_DECISION_TIMEOUT_MS) bounds the wait, no answer in time is a refusal, the task's
cancel ends the wait at once with the outcome `cancelled`, and whatever a supervisor does
(raises, hangs, answers something that is not allow or deny) is a refusal. While it waits,
the task shows "waiting for the operator's decision on ..." (a WORKING status message)
and the turn's silence deadline is suspended (deadlines.py).

In shadow mode (ACP_POLICY_MODE=log-only) the floor and the policy still run and are
recorded, but the table decides; the supervisor is not asked (a shadow question would make
a human decide for nothing, and the turn wait for it), and the ledger says so.

Every verdict, the effective one and the shadow ones, becomes a ledger row (ledger.py),
written before the answer leaves, and a metric per decider.
"""

from __future__ import annotations

import difflib
import json
import logging
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import anyio

from a2a_acp_bridge.boundary import Boundary
from a2a_acp_bridge.decision import DIFF_LIMIT_BYTES, Answer, Question, Supervisor
from a2a_acp_bridge.errors import StateWriteError
from a2a_acp_bridge.events import FileDiff, Notice
from a2a_acp_bridge.ledger import DecisionLedger, LedgerEntry
from a2a_acp_bridge.metrics import Metrics
from a2a_acp_bridge.permissions import (
    MODE_KIND,
    Decider,
    Decision,
    PermissionRequest,
    Rule,
    Supervision,
    decide,
    floor,
    is_plan_exit_tool,
)
from a2a_acp_bridge.policy import Policy, command_of, tool_name_of
from a2a_acp_bridge.schema import DEFAULT_PRINCIPAL
from a2a_acp_bridge.turn import Turn

logger = logging.getLogger(__name__)

ENFORCE = "enforce"
LOG_ONLY = "log-only"
POLICY_MODES = (ENFORCE, LOG_ONLY)
DEFAULT_DECISION_TIMEOUT_S = 120.0
# rawInput a question carries at most (JSON characters); beyond, it is cut and says so.
RAW_INPUT_LIMIT = 16 * 1024
# A supervisor's reason, as recorded and told, at most.
REASON_LIMIT = 1000
FLOOR_RULES = frozenset(
    {
        Rule.PROTECTED_PATH,
        Rule.READ_PROTECTED,
        Rule.SPECIAL_PATH,
        Rule.UNREADABLE_PATH,
        Rule.MODE_DROPS_SUPERVISION,
        Rule.MODE_UNKNOWN,
    }
)


@dataclass(frozen=True)
class Ruling:
    """One decider's verdict on one request: `verdict` is allow, deny, ask or cancelled."""

    decider: str
    verdict: str
    rule: str
    reason: str
    latency_s: float = 0.0
    shadow: bool = False


@dataclass(frozen=True)
class Judgement:
    """What the floor, the policy and the table say: `decision` None when the policy asks
    a supervisor (`ruling.verdict == "ask"`)."""

    ruling: Ruling
    decision: Decision | None
    shadow: tuple[Ruling, ...] = ()


@dataclass(frozen=True)
class Outcome:
    """The chain's verdict: the decision `answer` turns into an option, who made it, and
    every ruling to record (the effective one last)."""

    decision: Decision
    rulings: tuple[Ruling, ...]

    @property
    def ruling(self) -> Ruling:
        return self.rulings[-1]


@dataclass(frozen=True)
class Where:
    """Whose request it is: the ids a question and a ledger row carry."""

    adapter: str
    session_id: str
    context_id: str | None = None
    task_id: str | None = None
    principal: str = DEFAULT_PRINCIPAL


def judge(
    request: PermissionRequest,
    boundary: Boundary,
    supervision: Supervision,
    policy: Policy | None,
    *,
    mode: str = ENFORCE,
    table: Decider = decide,
) -> Judgement:
    """The floor, the policy and the table, without any waiting (pure but for resolving
    paths, as the table)."""
    if policy is None or request.kind == MODE_KIND or is_plan_exit_tool(request, supervision):
        return _by_table(request, boundary, supervision, table)
    verdict = policy.evaluate(request, boundary)
    opened = boundary
    if verdict is not None and verdict.decision == "allow" and verdict.lifted:
        protection = replace(
            boundary.protection, writable=boundary.protection.writable | verdict.lifted
        )
        opened = replace(boundary, protection=protection)
    refusal = floor(request, opened, supervision)
    if refusal is not None:
        ruling = Ruling("floor", "deny", refusal.rule.value, refusal.reason)
        judgement = Judgement(ruling, refusal)
    elif verdict is None:
        return _by_table(request, boundary, supervision, table)
    elif verdict.decision == "ask":
        ruling = Ruling("policy", "ask", verdict.rule, verdict.reason)
        judgement = Judgement(ruling, None)
    else:
        allow = verdict.decision == "allow"
        said = "allows" if allow else "denies"
        reason = f"the policy's rule {verdict.rule!r} {said} it: {verdict.reason}"
        ruling = Ruling("policy", verdict.decision, verdict.rule, reason)
        judgement = Judgement(ruling, Decision(allow, Rule.POLICY, reason))
    if mode == LOG_ONLY:
        shadow = replace(judgement.ruling, shadow=True)
        if shadow.verdict == "ask":
            shadow = replace(shadow, reason=shadow.reason + " (shadow: no supervisor asked)")
        table_judgement = _by_table(request, boundary, supervision, table)
        return replace(table_judgement, shadow=(shadow,))
    return judgement


def _by_table(
    request: PermissionRequest, boundary: Boundary, supervision: Supervision, table: Decider
) -> Judgement:
    decision = table(request, boundary, supervision)
    decider = "floor" if decision.rule in FLOOR_RULES else "table"
    verdict = "allow" if decision.allow else "deny"
    return Judgement(Ruling(decider, verdict, decision.rule.value, decision.reason), decision)


class DecisionChain:
    """The chain of one bridge: its policy, its supervisor, its ledger and its deadline."""

    def __init__(
        self,
        *,
        policy: Policy | None = None,
        mode: str = ENFORCE,
        timeout_s: float = DEFAULT_DECISION_TIMEOUT_S,
        supervisor: Supervisor | None = None,
        table: Decider = decide,
        metrics: Metrics | None = None,
        ledger: DecisionLedger | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.policy = policy
        self.mode = mode
        self.timeout_s = timeout_s
        self.supervisor = supervisor
        self.table = table
        self.metrics = metrics
        self.ledger = ledger
        self.clock = clock

    async def decide(
        self,
        request: PermissionRequest,
        boundary: Boundary,
        supervision: Supervision,
        where: Where,
        turn: Turn,
        *,
        notify: Callable[[Notice], None] | None = None,
        diffs: Sequence[FileDiff] = (),
    ) -> Outcome:
        """The chain's verdict on one request (module docstring); never raises for what a
        decider does, never waits past the deadline."""
        started = self.clock()
        try:
            judgement = judge(
                request, boundary, supervision, self.policy, mode=self.mode, table=self.table
            )
        except Exception:
            logger.exception("the decision chain failed; refusing", extra={"rule": "chain"})
            reason = "the permission classifier failed"
            decision = Decision(False, Rule.CLASSIFIER_FAILED, reason)
            judgement = Judgement(Ruling("chain", "deny", decision.rule.value, reason), decision)
        elapsed = self.clock() - started
        shadow = tuple(replace(r, latency_s=elapsed) for r in judgement.shadow)
        first = replace(judgement.ruling, latency_s=elapsed)
        if judgement.decision is not None:
            return Outcome(judgement.decision, (*shadow, first))
        if self.supervisor is None:
            reason = (
                f"the policy's rule {first.rule!r} asks a supervisor ({first.reason}), and "
                "none is configured: refused"
            )
            ruling = replace(first, verdict="deny", reason=reason)
            return Outcome(Decision(False, Rule.NO_SUPERVISOR, reason), (*shadow, ruling))
        answer_ruling, decision = await self._ask(
            self.supervisor, request, boundary, where, turn, first, started, notify, diffs
        )
        return Outcome(decision, (*shadow, first, answer_ruling))

    async def _ask(
        self,
        supervisor: Supervisor,
        request: PermissionRequest,
        boundary: Boundary,
        where: Where,
        turn: Turn,
        asking: Ruling,
        started: float,
        notify: Callable[[Notice], None] | None,
        diffs: Sequence[FileDiff],
    ) -> tuple[Ruling, Decision]:
        now = time.time()
        question = Question(
            id=uuid.uuid4().hex,
            principal=where.principal,
            context_id=where.context_id or "",
            task_id=where.task_id or "",
            session_id=where.session_id,
            adapter=where.adapter,
            tool_call_id=request.tool_call_id,
            kind=request.kind or "other",
            title=request.label,
            tool_name=tool_name_of(request),
            raw_input=_bounded_raw(request.raw_input),
            locations=tuple(str(p) for p in request.locations),
            command=command_of(request) if request.kind == "execute" else None,
            diff=diff_text(diffs),
            root=str(boundary.root),
            owned=boundary.owned,
            allow_execute=boundary.allow_execute,
            rule=asking.rule,
            reason=asking.reason,
            asked_at=now,
            deadline=now + self.timeout_s,
        )
        if notify is not None:
            notify(Notice(f"waiting for the operator's decision on {request.label}"))
        result: dict[str, Any] = {}
        since = self.clock()
        turn.deciding(since)
        try:
            async with anyio.create_task_group() as group:

                async def ask() -> None:
                    try:
                        with anyio.fail_after(self.timeout_s):
                            result["answer"] = await supervisor.ask(question)
                    except TimeoutError:
                        result["timeout"] = True
                    except Exception as exc:
                        result["error"] = exc
                    group.cancel_scope.cancel()

                async def watch() -> None:
                    await turn.stopped.wait()
                    result["cancelled"] = True
                    group.cancel_scope.cancel()

                group.start_soon(ask)
                group.start_soon(watch)
        finally:
            turn.decided(since)
        latency = self.clock() - started
        name = str(getattr(supervisor, "name", "supervisor"))
        if result.get("cancelled") or turn.interrupted:
            reason = "the task was cancelled while its supervisor was asked"
            return (
                Ruling(name, "cancelled", Rule.TURN_CANCELLED.value, reason, latency),
                Decision(False, Rule.TURN_CANCELLED, reason),
            )
        if result.get("timeout"):
            if self.metrics is not None:
                self.metrics.decision_timed_out()
            reason = (
                f"no decision came within {self.timeout_s:g} s (ACP_DECISION_TIMEOUT_MS): refused"
            )
            return (
                Ruling(name, "deny", Rule.DECISION_TIMEOUT.value, reason, latency),
                Decision(False, Rule.DECISION_TIMEOUT, reason),
            )
        answer = result.get("answer")
        if "error" in result or not _is_answer(answer):
            logger.warning(
                "the supervisor failed or answered nonsense; refusing",
                extra={"supervisor": name, "error": type(result.get("error")).__name__},
            )
            reason = f"the supervisor ({name}) gave no usable answer: refused"
            return (
                Ruling(name, "deny", Rule.SUPERVISOR_FAILED.value, reason, latency),
                Decision(False, Rule.SUPERVISOR_FAILED, reason),
            )
        assert isinstance(answer, Answer)
        decider = answer.decider if isinstance(answer.decider, str) and answer.decider else name
        allow = answer.verdict == "allow"
        said = " ".join(answer.reason.split())[:REASON_LIMIT] or "no reason given"
        reason = f"the {decider} {'allowed' if allow else 'refused'} it: {said}"
        return (
            Ruling(decider[:64], answer.verdict, Rule.SUPERVISOR.value, reason, latency),
            Decision(allow, Rule.SUPERVISOR, reason),
        )

    # --- recording ------------------------------------------------------------------------

    def entries(
        self,
        outcome: Outcome,
        request: PermissionRequest,
        where: Where,
        *,
        chosen: str | None,
        allowed: bool,
    ) -> list[LedgerEntry]:
        """The ledger rows of one outcome: its shadow and intermediate rulings as they
        were, the effective one with what was actually answered."""
        now = time.time_ns()
        command = command_of(request)
        rows = []
        last = len(outcome.rulings) - 1
        for index, ruling in enumerate(outcome.rulings):
            verdict = ruling.verdict
            if index == last and verdict != "cancelled":
                verdict = "allow" if allowed else ("cancelled" if chosen is None else "deny")
            rows.append(
                LedgerEntry(
                    id=uuid.uuid4().hex,
                    time_ns=now + index,
                    principal=where.principal,
                    context_id=where.context_id,
                    task_id=where.task_id,
                    session_id=where.session_id,
                    adapter=where.adapter,
                    tool_call_id=request.tool_call_id,
                    kind=request.kind,
                    title=request.title,
                    locations=tuple(str(p) for p in request.locations),
                    command=command,
                    offered=tuple((o.option_id, o.kind) for o in request.options),
                    chosen=chosen if index == last else None,
                    verdict=verdict,
                    decider=ruling.decider,
                    rule=ruling.rule,
                    reason=ruling.reason,
                    latency_ns=int(ruling.latency_s * 1e9),
                    shadow=ruling.shadow,
                )
            )
        return rows

    async def record(
        self,
        outcome: Outcome,
        request: PermissionRequest,
        where: Where,
        *,
        chosen: str | None,
        allowed: bool,
    ) -> bool:
        """Count and write the outcome's rows before the answer leaves; False when the
        ledger could not be written (the caller then refuses)."""
        rows = self.entries(outcome, request, where, chosen=chosen, allowed=allowed)
        self._count(rows)
        if self.ledger is None:
            return True
        try:
            await self.ledger.record(rows)
        except StateWriteError as exc:
            logger.error(
                "the decision could not be written to the ledger; refusing",
                extra={"problem": str(exc), "tool_call_id": request.tool_call_id},
            )
            return False
        return True

    def note(
        self,
        outcome: Outcome,
        request: PermissionRequest,
        where: Where,
        *,
        chosen: str | None,
        allowed: bool,
    ) -> None:
        """Record a decision the bridge already answered (malformed, between turns)."""
        rows = self.entries(outcome, request, where, chosen=chosen, allowed=allowed)
        self._count(rows)
        if self.ledger is not None:
            self.ledger.submit(rows)

    def _count(self, rows: Sequence[LedgerEntry]) -> None:
        if self.metrics is None:
            return
        for row in rows:
            decider = f"{row.decider} (shadow)" if row.shadow else row.decider
            self.metrics.decided_by(decider, row.verdict, row.latency_ns / 1e9)
        for row in rows:
            logger.info(
                "decider ruled",
                extra={
                    "decider": row.decider,
                    "verdict": row.verdict,
                    "rule": row.rule,
                    "shadow": row.shadow,
                    "latency_ms": round(row.latency_ns / 1e6, 3),
                    "tool_call_id": row.tool_call_id,
                },
            )


def bridge_outcome(decision: Decision) -> Outcome:
    """An outcome the bridge decided before any decider (no turn, cancelled, malformed)."""
    verdict = "allow" if decision.allow else "deny"
    return Outcome(decision, (Ruling("bridge", verdict, decision.rule.value, decision.reason),))


def _is_answer(value: object) -> bool:
    return (
        isinstance(value, Answer)
        and value.verdict in ("allow", "deny")
        and isinstance(value.reason, str)
    )


def _bounded_raw(raw: Any) -> Any:
    try:
        text = json.dumps(raw, default=str)
    except (TypeError, ValueError):
        return {"unreadable": True}
    if len(text) <= RAW_INPUT_LIMIT:
        return json.loads(text)
    return {"truncated": text[:RAW_INPUT_LIMIT]}


def diff_text(diffs: Sequence[FileDiff]) -> str | None:
    """The tool call's diffs as one unified diff, cut at DIFF_LIMIT_BYTES."""
    if not diffs:
        return None
    chunks: list[str] = []
    for diff in diffs:
        chunks.extend(
            difflib.unified_diff(
                (diff.old_text or "").splitlines(keepends=True),
                diff.new_text.splitlines(keepends=True),
                fromfile="/dev/null" if diff.old_text is None else f"a/{diff.path}",
                tofile=f"b/{diff.path}",
            )
        )
    text = "".join(chunks)
    data = text.encode("utf-8")
    if len(data) <= DIFF_LIMIT_BYTES:
        return text
    cut = data[:DIFF_LIMIT_BYTES].decode("utf-8", "ignore")
    return cut + f"\n... (cut at {DIFF_LIMIT_BYTES} bytes)\n"
