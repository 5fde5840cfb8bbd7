"""The sweep: what the bridge keeps is bounded, and it says what it removed.

Once at start and then every `SWEEP_EVERY_S` (a minute), the sweep asks the task store to
delete the finished tasks older than A2A_TASK_TTL (those beyond A2A_TASK_RETENTION go as
they are forgotten, a2a/store.py) and the bridge to remove the conversations unused for
ACP_SANDBOX_TTL (their sandbox and record; never a handed ACP_CWD) and the empty
directories a killed bridge left, and the decision ledger to drop the decisions older than
ACP_DECISION_TTL or beyond ACP_DECISION_RETENTION (ledger.py), and logs one line naming
what went. With several replicas on one database, what another replica runs or used since
stays (conversations.py decides from the database). It runs in the bridge's task group
like its other background work: a pass that fails is logged and counted, and the next one
comes a minute later.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import anyio

logger = logging.getLogger(__name__)

SWEEP_EVERY_S = 60.0
# Ids named in one log line at most (the line gives the counts too).
LOGGED_IDS = 20


class TaskSweep(Protocol):
    async def sweep(self, now_ns: int) -> list[str]: ...


class ConversationSweep(Protocol):
    async def sweep_conversations(self, now_ns: int) -> tuple[list[str], list[Path]]: ...


class DecisionSweep(Protocol):
    async def sweep(self, now_ns: int) -> list[str]: ...


@dataclass(frozen=True)
class SweepReport:
    tasks: tuple[str, ...] = ()
    conversations: tuple[str, ...] = ()
    directories: tuple[Path, ...] = ()
    decisions: int = 0

    def __bool__(self) -> bool:
        return bool(self.tasks or self.conversations or self.directories or self.decisions)


class Sweeper:
    def __init__(
        self,
        tasks: TaskSweep,
        conversations: ConversationSweep,
        *,
        every_s: float = SWEEP_EVERY_S,
        clock: Callable[[], int] = time.time_ns,
        on_failure: Callable[[], None] | None = None,
        decisions: DecisionSweep | None = None,
    ) -> None:
        self.decisions = decisions
        self.tasks = tasks
        self.conversations = conversations
        self.every_s = every_s
        self.clock = clock
        self.on_failure = on_failure

    async def run(self) -> None:
        while True:
            try:
                await self.sweep_once()
            except Exception:
                # One bad pass must not end the sweeping (nor the bridge).
                if self.on_failure is not None:
                    self.on_failure()
                logger.exception("the sweep failed; trying again later")
            await anyio.sleep(self.every_s)

    async def sweep_once(self, now_ns: int | None = None) -> SweepReport:
        now = self.clock() if now_ns is None else now_ns
        task_ids = await self.tasks.sweep(now)
        contexts, directories = await self.conversations.sweep_conversations(now)
        dropped = await self.decisions.sweep(now) if self.decisions is not None else []
        report = SweepReport(tuple(task_ids), tuple(contexts), tuple(directories), len(dropped))
        if report:
            logger.info(
                "swept",
                extra={
                    "tasks": len(report.tasks),
                    "conversations": len(report.conversations),
                    "directories": len(report.directories),
                    "decisions": report.decisions,
                    "task_ids": list(report.tasks[:LOGGED_IDS]),
                    "context_ids": list(report.conversations[:LOGGED_IDS]),
                },
            )
        return report
