"""The decision ledger: every permission decision of every decider, durable.

One row per decider's verdict on one request (the `decisions` table, schema.py): the time,
the caller's principal, context, task, session, adapter, tool call id, kind, title,
locations, command, offered options, chosen option, verdict, decider, rule, reason, latency,
and whether it was a shadow verdict (ACP_POLICY_MODE=log-only). The decision path awaits
`record` (the state writer commits the row's batch at once), so a row is on disk before
the permission answer leaves; a row that cannot be written fails the decision closed
(decisions.py). `recent` keeps the last rows in memory for the console.

Retention: rows older than ACP_DECISION_TTL go, and beyond ACP_DECISION_RETENTION the
oldest; the sweep (sweep.py) calls `sweep` once a minute, a bounded number per pass.

Read back with `query` (GET /decisions) or, from another process, `read_ledger`
(`a2a-acp-bridge decisions`: the SQLite file opened read-only, or the PostgreSQL database
of `A2A_DATABASE_URL`).
"""

from __future__ import annotations

import json
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
from sqlalchemy import Select, func, inspect, select
from sqlalchemy.ext.asyncio import create_async_engine

from a2a_acp_bridge.errors import StateWriteError
from a2a_acp_bridge.schema import decisions
from a2a_acp_bridge.state import DATABASE_FILE, StateDatabase
from a2a_acp_bridge.state_writer import Delete, Upsert

# Rows kept in memory for the console.
RECENT_ROWS = 500
# Rows deleted by one sweep pass at most (the next pass, a minute later, goes on).
SWEEP_BATCH = 5000
# The most rows one query returns.
MAX_QUERY_ROWS = 1000
# How long a ledger write may take before the decision is refused instead.
LEDGER_WRITE_S = 10.0


@dataclass(frozen=True)
class LedgerEntry:
    """One row of the ledger."""

    id: str
    time_ns: int
    principal: str
    context_id: str | None
    task_id: str | None
    session_id: str | None
    adapter: str
    tool_call_id: str
    kind: str | None
    title: str | None
    locations: tuple[str, ...]
    command: str | None
    offered: tuple[tuple[str | None, str | None], ...]
    chosen: str | None
    verdict: str
    decider: str
    rule: str
    reason: str
    latency_ns: int
    shadow: bool = False

    def row(self) -> dict[str, Any]:
        values = asdict(self)
        values["locations"] = json.dumps(list(self.locations))
        values["offered"] = json.dumps([{"optionId": i, "kind": k} for i, k in self.offered])
        return values

    def to_json(self) -> dict[str, Any]:
        """The entry as GET /decisions and `decisions --json` show it."""
        return {
            "id": self.id,
            "time": _iso(self.time_ns),
            "principal": self.principal,
            "contextId": self.context_id,
            "taskId": self.task_id,
            "sessionId": self.session_id,
            "adapter": self.adapter,
            "toolCallId": self.tool_call_id,
            "kind": self.kind,
            "title": self.title,
            "locations": list(self.locations),
            "command": self.command,
            "offered": [{"optionId": i, "kind": k} for i, k in self.offered],
            "chosen": self.chosen,
            "verdict": self.verdict,
            "decider": self.decider,
            "rule": self.rule,
            "reason": self.reason,
            "latencyMs": round(self.latency_ns / 1e6, 3),
            "shadow": self.shadow,
        }

    @classmethod
    def from_row(cls, row: Any) -> LedgerEntry:
        values = dict(row)
        locations = _json_list(values.get("locations"))
        offered = _json_list(values.get("offered"))
        values["locations"] = tuple(str(p) for p in locations)
        values["offered"] = tuple(
            (o.get("optionId"), o.get("kind")) for o in offered if isinstance(o, dict)
        )
        values["shadow"] = bool(values.get("shadow"))
        return cls(**{k: values[k] for k in cls.__dataclass_fields__})


def _json_list(text: object) -> list[Any]:
    try:
        value = json.loads(str(text))
    except (TypeError, ValueError):
        return []
    return value if isinstance(value, list) else []


def _iso(time_ns: int) -> str:
    seconds, ns = divmod(time_ns, 1_000_000_000)
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds))
    return f"{stamp}.{ns // 1_000_000:03d}Z"


def parse_since(text: str) -> int | None:
    """A time as `since` takes it: ISO 8601 (UTC unless it says otherwise) or seconds since
    the epoch; ns since the epoch, or None when it is neither."""
    text = text.strip()
    try:
        return (
            int(float(text) * 1e9) if text and text.replace(".", "", 1).isdigit() else _iso_ns(text)
        )
    except (ValueError, OverflowError):
        return None


def _iso_ns(text: str) -> int:
    moment = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1e9)


class DecisionLedger:
    """The ledger over the state database (its writer batches every row)."""

    def __init__(
        self,
        database: StateDatabase,
        *,
        ttl_s: float | None = None,
        retention: int | None = None,
    ) -> None:
        self.database = database
        self.ttl_s = ttl_s
        self.retention = retention
        self._recent: deque[LedgerEntry] = deque(maxlen=RECENT_ROWS)

    def recent(self, limit: int) -> list[LedgerEntry]:
        """The last `limit` entries recorded by this process, newest first (the console)."""
        items = list(self._recent)[-max(limit, 0) :] if limit > 0 else []
        return items[::-1]

    async def record(self, entries: Sequence[LedgerEntry]) -> None:
        """Write the entries and return once committed; StateWriteError if they could not be
        (within LEDGER_WRITE_S)."""
        if not entries:
            return
        writer = self.database.writer
        for entry in entries[:-1]:
            writer.submit(("decision", entry.id), Upsert(decisions, entry.row))
        last = entries[-1]
        try:
            with anyio.fail_after(LEDGER_WRITE_S):
                await writer.write(("decision", last.id), Upsert(decisions, last.row))
        except TimeoutError:
            raise StateWriteError(
                f"the ledger was not written within {LEDGER_WRITE_S:g} s"
            ) from None
        self._recent.extend(entries)

    def submit(self, entries: Sequence[LedgerEntry]) -> None:
        """Write the entries with the next batch (a decision already answered elsewhere)."""
        writer = self.database.writer
        for entry in entries:
            writer.submit(("decision", entry.id), Upsert(decisions, entry.row), soon=True)
        self._recent.extend(entries)

    async def query(
        self,
        *,
        context_id: str | None = None,
        since_ns: int | None = None,
        limit: int = 100,
        principal: str | None = None,
    ) -> list[LedgerEntry]:
        """Entries newest first, filtered by context, time and (unless None) principal."""
        statement = query_statement(
            context_id=context_id, since_ns=since_ns, limit=limit, principal=principal
        )
        async with self.database.connect() as conn:
            rows = (await conn.execute(statement)).mappings().all()
        return [LedgerEntry.from_row(row) for row in rows]

    async def sweep(self, now_ns: int) -> list[str]:
        """Delete what the retention settings let go (a bounded number); the ids deleted."""
        doomed: list[str] = []
        async with self.database.connect() as conn:
            if self.ttl_s is not None:
                cutoff = now_ns - int(self.ttl_s * 1e9)
                old = select(decisions.c.id).where(decisions.c.time_ns < cutoff)
                doomed.extend((await conn.execute(old.limit(SWEEP_BATCH))).scalars())
            if self.retention is not None and len(doomed) < SWEEP_BATCH:
                count = (await conn.execute(select(func.count()).select_from(decisions))).scalar()
                excess = int(count or 0) - self.retention - len(doomed)
                if excess > 0:
                    oldest = (
                        select(decisions.c.id)
                        .order_by(decisions.c.time_ns)
                        .offset(len(doomed))
                        .limit(min(excess, SWEEP_BATCH - len(doomed)))
                    )
                    doomed.extend((await conn.execute(oldest)).scalars())
        writer = self.database.writer
        for entry_id in dict.fromkeys(doomed):
            writer.submit(("decision", entry_id), Delete(decisions, {"id": entry_id}))
        if doomed:
            await writer.flush()
        return list(dict.fromkeys(doomed))


def query_statement(
    *,
    context_id: str | None = None,
    since_ns: int | None = None,
    limit: int = 100,
    principal: str | None = None,
) -> Select[Any]:
    """The ledger's entries newest first, filtered by context, time and (unless None)
    principal: one query for GET /decisions and the `decisions` command."""
    statement = select(decisions).order_by(decisions.c.time_ns.desc())
    if principal is not None:
        statement = statement.where(decisions.c.principal == principal)
    if context_id is not None:
        statement = statement.where(decisions.c.context_id == context_id)
    if since_ns is not None:
        statement = statement.where(decisions.c.time_ns >= since_ns)
    return statement.limit(max(1, min(limit, MAX_QUERY_ROWS)))


async def read_ledger(
    state_dir: Path,
    database_url: str | None = None,
    *,
    context_id: str | None = None,
    since_ns: int | None = None,
    limit: int = 100,
) -> list[LedgerEntry]:
    """The ledger as another process reads it, without writing to it (the bridge may be
    running): the PostgreSQL database of `database_url`, else the state directory's SQLite
    file, opened read-only (FileNotFoundError when there is none)."""
    if database_url is None:
        path = state_dir / DATABASE_FILE
        if not path.is_file():
            raise FileNotFoundError(str(path))
        url = f"sqlite+aiosqlite:///file:{path}?mode=ro&uri=true"
    else:
        url = database_url
    statement = query_statement(context_id=context_id, since_ns=since_ns, limit=limit)

    engine = create_async_engine(url)
    try:
        async with engine.connect() as conn:
            present = await conn.run_sync(lambda sync: inspect(sync).has_table(decisions.name))
            if not present:
                return []
            rows = (await conn.execute(statement)).mappings().all()
    finally:
        await engine.dispose()
    return [LedgerEntry.from_row(row) for row in rows]
