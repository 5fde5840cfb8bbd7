"""The one writer of the state database: batched, write-behind, and patient with trouble.

Every change reaches the database through `StateWriter`. A change is an operation under a
key (a task, a push config, a conversation); a later operation under the same key replaces
the pending one, so a task saved for each of a thousand streamed chunks is written once per
batch, and an upsert builds its row only when the batch is written (the latest state).

- `submit(key, op)`: written with the next batch, at most `WRITE_BEHIND_S` later (a kill -9
  loses at most that much of a streaming answer); `soon=True` starts the batch within
  `SOON_S` (a new task, a state change: gathered with what follows, so the commit does
  not land on a turn's first events).
- `await write(key, op)`: the batch starts at once and the call returns when it is committed,
  or raises `StateWriteError` naming the cause (disk full, read-only, locked).

A batch is one transaction. When it fails, its operations stay pending (unless a newer one
replaced them), `StateHealth` says why (for /readyz and the log), and the writer tries
again, with a doubling pause up to `RETRY_MAX_S`; with nothing pending it writes a probe
row, so it notices by itself when the disk has room again.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, field
from typing import Any

import anyio
from sqlalchemy import Table, and_, delete
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from a2a_acp_bridge.errors import StateWriteError
from a2a_acp_bridge.schema import meta

logger = logging.getLogger(__name__)

# The longest a change waits in memory before its batch is written.
WRITE_BEHIND_S = 0.5
# A `soon` change waits this long for what follows it (measured: a commit at once delays a
# turn's first answer text by about 2 ms).
SOON_S = 0.05
# After a failed batch, the pause before the next attempt: doubling up to the maximum.
RETRY_FIRST_S = 0.5
RETRY_MAX_S = 5.0
PROBE_KEY = "probe"
# SQLite's automatic checkpoint runs inside the commit that crosses its threshold (about 4 ms
# more on a 2 MB task); it is off (state.py) and the writer checkpoints itself, when it is
# idle or at least this often.
CHECKPOINT_EVERY_S = 30.0

Key = tuple[Hashable, ...]


def untorn() -> anyio.CancelScope:
    """The scope every use of a connection runs in: a cancellation waits for it to end.

    Cancelled half-way, SQLAlchemy's aiosqlite adapter tears the connection down on a task
    of its own, which can wait forever on aiosqlite's already stopped thread and so hang
    the event loop's shutdown (seen in the test suite); a batch of writes taken off the
    writer's queue would be lost as well. SQLite's busy timeout bounds the wait.
    """
    return anyio.CancelScope(shield=True)


@dataclass(frozen=True)
class Upsert:
    """Insert or replace the row `row()` builds when the batch is written."""

    table: Table
    row: Callable[[], dict[str, Any]]


@dataclass(frozen=True)
class Delete:
    """Delete the rows whose columns equal `where`."""

    table: Table
    where: Mapping[str, Any]


Op = Upsert | Delete


class StateHealth:
    """Whether the database takes writes now, and if not, why (in a few words, no path)."""

    def __init__(self) -> None:
        self.problem: str | None = None
        self.since: float | None = None
        self.failures = 0

    @property
    def ok(self) -> bool:
        return self.problem is None

    def failed(self, problem: str) -> None:
        self.failures += 1
        if self.problem != problem:
            logger.error(
                "the state database cannot be written; retrying",
                extra={"problem": problem},
            )
            self.problem = problem
            self.since = time.monotonic()

    def recovered(self) -> None:
        if self.problem is not None:
            logger.warning(
                "the state database is writable again",
                extra={
                    "was": self.problem,
                    "after_s": round(time.monotonic() - (self.since or 0.0), 1),
                },
            )
        self.problem = None
        self.since = None


# The words for a PostgreSQL server that does not answer (the start waits for it: state.py).
UNREACHABLE = "the database server cannot be reached"
# PostgreSQL's error classes (SQLSTATE), as the same few words.
_PG_CAUSES = (
    ("53100", "the disk is full"),
    ("25006", "it is read-only"),
    ("55P03", "it is locked by another process"),
    ("40P01", "it is locked by another process"),
    ("08", UNREACHABLE),
    ("57P", UNREACHABLE),
    ("53", "the database server is out of resources"),
    ("XX001", "it is damaged"),
)


def _sqlstate(original: BaseException) -> str:
    for candidate in (original, original.__cause__):
        code = getattr(candidate, "sqlstate", None)
        if isinstance(code, str):
            return code
    return ""


def describe_failure(exc: BaseException, dialect: str = "sqlite") -> str:
    """What went wrong with a write, in words for the caller and /readyz."""
    original = getattr(exc, "orig", None) or exc
    code = _sqlstate(original)
    for prefix, words in _PG_CAUSES:
        if code.startswith(prefix):
            return words
    if dialect == "postgresql" and (
        isinstance(original, OSError | TimeoutError)
        or isinstance(original.__cause__, OSError | TimeoutError)
        or type(original).__name__ in ("InterfaceError", "ConnectionDoesNotExistError")
    ):
        # A socket that refuses, a server gone: asyncpg reports it as an OS error.
        return UNREACHABLE
    name = str(getattr(original, "sqlite_errorname", "") or "")
    text = str(original).lower()
    if name == "SQLITE_FULL" or "disk is full" in text or "no space" in text:
        return "the disk is full"
    if name.startswith("SQLITE_READONLY") or "readonly" in text or "read-only" in text:
        return "it is read-only"
    if name.startswith(("SQLITE_BUSY", "SQLITE_LOCKED")) or "locked" in text:
        return "it is locked by another process"
    if name.startswith("SQLITE_CORRUPT") or "malformed" in text:
        return "it is damaged"
    if name.startswith("SQLITE_IOERR") or isinstance(original, OSError):
        return "an input/output error"
    if name.startswith("SQLITE_CANTOPEN"):
        return "it cannot be opened"
    return "the database refused the write"


@dataclass(eq=False)
class _Ticket:
    done: anyio.Event = field(default_factory=anyio.Event)
    error: StateWriteError | None = None


def upsert_statement(table: Table, dialect: str) -> Any:
    """INSERT ... ON CONFLICT (primary key) DO UPDATE, for SQLite and PostgreSQL."""
    keys = [column.name for column in table.primary_key.columns]
    insert = postgresql.insert(table) if dialect == "postgresql" else sqlite.insert(table)
    updates = {c.name: insert.excluded[c.name] for c in table.columns if c.name not in keys}
    return insert.on_conflict_do_update(index_elements=keys, set_=updates)


class StateWriter:
    """Batches every write to the database (module docstring). Run `run()` in a task group."""

    def __init__(
        self, engine: AsyncEngine, health: StateHealth, *, every_s: float = WRITE_BEHIND_S
    ) -> None:
        self.engine = engine
        self.health = health
        self.every_s = every_s
        self._pending: dict[Key, Op] = {}
        self._tickets: list[_Ticket] = []
        self._wake = anyio.Event()
        self._urgent = anyio.Event()
        self._written_since_checkpoint = False
        self._checkpointed_at = time.monotonic()
        self._pause = RETRY_FIRST_S
        self._statements: dict[str, Any] = {}
        # One batch at a time: two in flight could commit out of order.
        self._lock = anyio.Lock()
        self.batches = 0

    @property
    def pending(self) -> int:
        return len(self._pending)

    def submit(self, key: Key, op: Op, *, soon: bool = False) -> None:
        self._pending[key] = op
        if soon:
            self._wake.set()

    def withdraw(self, key: Key, op: Op) -> None:
        """Drop `op` if it is still pending (a write the caller was told failed)."""
        if self._pending.get(key) is op:
            del self._pending[key]

    async def write(self, key: Key, op: Op) -> None:
        """Write `op` now; returns once committed, else raises StateWriteError."""
        self._pending[key] = op
        ticket = _Ticket()
        self._tickets.append(ticket)
        self._wake.set()
        self._urgent.set()
        await ticket.done.wait()
        if ticket.error is not None:
            raise ticket.error

    async def run(self) -> None:
        """Write batches until cancelled."""
        while True:
            wait_s = self.every_s if self.health.ok else self._pause
            with anyio.move_on_after(wait_s):
                await self._wake.wait()
            if self._wake.is_set() and not self._tickets:
                # A soon change: gather what follows it, unless someone waits.
                with anyio.move_on_after(SOON_S):
                    await self._urgent.wait()
            self._wake = anyio.Event()
            self._urgent = anyio.Event()
            if not self.health.ok and not self._pending:
                self.submit(("meta", PROBE_KEY), Upsert(meta, _probe_row))
            idle = not self._pending and not self._tickets
            ok = await self.flush()
            self._pause = RETRY_FIRST_S if ok else min(self._pause * 2, RETRY_MAX_S)
            if (
                ok
                and self._written_since_checkpoint
                and (idle or time.monotonic() - self._checkpointed_at >= CHECKPOINT_EVERY_S)
            ):
                await self.checkpoint()

    async def checkpoint(self) -> None:
        """Copy the write-ahead log into the database (PASSIVE: never waits for readers).
        SQLite only: PostgreSQL checkpoints by itself."""
        if self.engine.dialect.name != "sqlite":
            self._written_since_checkpoint = False
            return
        async with self._lock:
            try:
                with untorn():
                    async with self.engine.connect() as conn:
                        await conn.exec_driver_sql("PRAGMA wal_checkpoint(PASSIVE)")
            except (SQLAlchemyError, OSError) as exc:
                logger.warning("checkpoint failed", extra={"problem": describe_failure(exc)})
                return
            self._written_since_checkpoint = False
            self._checkpointed_at = time.monotonic()

    async def flush(self) -> bool:
        """Write everything pending in one transaction; True when committed."""
        async with self._lock:
            return await self._flush()

    async def _flush(self) -> bool:
        tickets, self._tickets = self._tickets, []
        if not self._pending:
            for ticket in tickets:
                ticket.done.set()
            return True
        batch, self._pending = self._pending, {}
        rows, deletes = _prepared(batch)
        try:
            with untorn():
                async with self.engine.begin() as conn:
                    await self._apply(conn, rows, deletes)
        except (SQLAlchemyError, OSError) as exc:
            problem = describe_failure(exc, self.engine.dialect.name)
            for key, op in batch.items():
                # A newer operation under the same key, submitted meanwhile, wins.
                self._pending.setdefault(key, op)
            self.health.failed(problem)
            for ticket in tickets:
                ticket.error = StateWriteError(problem)
                ticket.done.set()
            return False
        self.batches += 1
        self._written_since_checkpoint = True
        self.health.recovered()
        for ticket in tickets:
            ticket.done.set()
        return True

    async def _apply(
        self,
        conn: AsyncConnection,
        rows: dict[Table, list[dict[str, Any]]],
        deletes: list[Delete],
    ) -> None:
        dialect = conn.dialect.name
        for table, table_rows in rows.items():
            statement = self._statements.get(table.name)
            if statement is None:
                statement = self._statements[table.name] = upsert_statement(table, dialect)
            await conn.execute(statement, table_rows)
        for op in deletes:
            clauses = [op.table.c[column] == value for column, value in op.where.items()]
            await conn.execute(delete(op.table).where(and_(*clauses)))


def _prepared(batch: dict[Key, Op]) -> tuple[dict[Table, list[dict[str, Any]]], list[Delete]]:
    """The batch's rows, built now (the latest state), grouped by table; and its deletes.
    A row that cannot be built is a bug: logged and left out, never a stopped writer."""
    rows: dict[Table, list[dict[str, Any]]] = {}
    deletes: list[Delete] = []
    for key, op in batch.items():
        if isinstance(op, Delete):
            deletes.append(op)
            continue
        try:
            row = op.row()
        except Exception:
            logger.exception("a state row could not be built; left out", extra={"key": repr(key)})
            continue
        rows.setdefault(op.table, []).append(row)
    return rows, deletes


def _probe_row() -> dict[str, Any]:
    return {"key": PROBE_KEY, "value": str(time.time_ns())}
