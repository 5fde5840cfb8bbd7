"""The decision ledger in a real state database: rows written before the answer leaves,
read back filtered, swept by age and by count, and a ledger that cannot be written refusing
the decision instead of letting it through unrecorded."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest
from acp.schema import AllowedOutcome, ToolCallUpdate
from acp.schema import PermissionOption as AcpOption

from a2a_acp_bridge.acp.client import BridgeClient, SessionState
from a2a_acp_bridge.boundary import Boundary
from a2a_acp_bridge.decisions import DecisionChain
from a2a_acp_bridge.events import PermissionSeen
from a2a_acp_bridge.ledger import DecisionLedger, LedgerEntry, read_ledger
from a2a_acp_bridge.permissions import Supervision
from a2a_acp_bridge.policy import parse_policy
from a2a_acp_bridge.state import StateDatabase
from a2a_acp_bridge.sweep import Sweeper
from a2a_acp_bridge.turn import Turn

pytestmark = pytest.mark.anyio

DAY_NS = 86_400 * 10**9
POLICY = parse_policy('[[rule]]\nid="t"\nkind="execute"\ndecision="allow"\ncommands=["npm test"]\n')
OPTIONS = [
    AcpOption(option_id="allow-once", name="Allow", kind="allow_once"),
    AcpOption(option_id="reject", name="Reject", kind="reject_once"),
]


@pytest.fixture
async def database(tmp_path: Path) -> AsyncIterator[StateDatabase]:
    async with StateDatabase(tmp_path / "state") as opened:
        yield opened


def entry(n: int, time_ns: int, context: str = "ctx") -> LedgerEntry:
    return LedgerEntry(
        id=f"id-{n}",
        time_ns=time_ns,
        principal="default",
        context_id=context,
        task_id="task",
        session_id="s",
        adapter="demo",
        tool_call_id=f"call-{n}",
        kind="execute",
        title="npm test",
        locations=(),
        command="npm test",
        offered=(("allow-once", "allow_once"),),
        chosen="allow-once",
        verdict="allow",
        decider="policy",
        rule="t",
        reason="r",
        latency_ns=1000,
    )


async def ask(chain: DecisionChain, root: Path) -> tuple[str, PermissionSeen]:
    state = SessionState(
        boundary=Boundary(root, owned=False), supervision=Supervision(), turn=Turn("task", "ctx")
    )
    client = BridgeClient("demo", chain=chain)
    client.sessions["s"] = state
    call = {
        "toolCallId": "c",
        "title": "npm test",
        "kind": "execute",
        "rawInput": {"command": "npm test"},
    }
    response = await client.request_permission(
        session_id="s", tool_call=ToolCallUpdate.model_validate(call), options=OPTIONS
    )
    outcome = response.outcome
    chosen = outcome.option_id if isinstance(outcome, AllowedOutcome) else "cancelled"
    [event] = [e for e in state.sink.drain() if isinstance(e, PermissionSeen)]
    return chosen, event


async def test_the_row_is_committed_before_the_answer_leaves(
    database: StateDatabase, tmp_path: Path
) -> None:
    ledger = DecisionLedger(database)
    chain = DecisionChain(policy=POLICY, ledger=ledger)
    chosen, _ = await ask(chain, tmp_path)
    assert chosen == "allow-once"
    # Another process, reading the file now, already sees it.
    [row] = await read_ledger(database.directory)
    assert (row.decider, row.verdict, row.rule, row.chosen) == (
        "policy",
        "allow",
        "t",
        "allow-once",
    )
    assert ledger.recent(10) == [row]


async def test_a_ledger_that_cannot_be_written_refuses_the_decision(
    database: StateDatabase, tmp_path: Path
) -> None:
    chain = DecisionChain(policy=POLICY, ledger=DecisionLedger(database))
    # Another program holds the database's write lock past the busy timeout.
    holder = sqlite3.connect(database.path, timeout=0)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        chosen, event = await ask(chain, tmp_path)
    finally:
        holder.rollback()
        holder.close()
    assert chosen == "cancelled"
    assert event.rule == "ledger-failed"
    assert not event.allowed


async def test_queries_filter_by_context_and_time(database: StateDatabase) -> None:
    ledger = DecisionLedger(database)
    now = time.time_ns()
    await ledger.record(
        [entry(1, now - 2 * DAY_NS, "a"), entry(2, now - DAY_NS, "b"), entry(3, now, "a")]
    )
    assert [e.id for e in await ledger.query()] == ["id-3", "id-2", "id-1"]
    assert [e.id for e in await ledger.query(context_id="a")] == ["id-3", "id-1"]
    assert [e.id for e in await ledger.query(since_ns=now - DAY_NS)] == ["id-3", "id-2"]
    assert [e.id for e in await ledger.query(limit=1)] == ["id-3"]


class NoTasks:
    async def sweep(self, now_ns: int) -> list[str]:
        return []

    async def sweep_conversations(self, now_ns: int) -> tuple[list[str], list[Path]]:
        return [], []


async def test_the_sweep_keeps_the_ledger_within_its_age_and_its_count(
    database: StateDatabase,
) -> None:
    now = time.time_ns()
    ledger = DecisionLedger(database, ttl_s=10 * 86_400, retention=3)
    rows = [entry(n, now - (20 - n) * DAY_NS) for n in range(20)]  # id-0 the oldest
    await ledger.record(rows)
    sweeper = Sweeper(NoTasks(), NoTasks(), decisions=ledger, clock=lambda: now)
    report = await sweeper.sweep_once()
    # Ten are older than ten days; of the ten left, the count keeps the newest three.
    assert report.decisions == 17
    assert [e.id for e in await ledger.query()] == ["id-19", "id-18", "id-17"]
    with anyio.fail_after(5):
        assert (await sweeper.sweep_once()).decisions == 0
