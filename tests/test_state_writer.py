"""The state writer on a real SQLite file: one row per key per batch (latest wins), a write
refused because another process holds the lock fails with the cause and is kept for the
retry, the causes are named from SQLite's own errors, and a withdrawn write is never retried."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from sqlalchemy import event

from a2a_acp_bridge import state
from a2a_acp_bridge.errors import StateWriteError
from a2a_acp_bridge.schema import tasks
from a2a_acp_bridge.state import StateDatabase
from a2a_acp_bridge.state_writer import Delete, Upsert, describe_failure

pytestmark = pytest.mark.anyio


def task_row(task_id: str, body: bytes) -> dict[str, Any]:
    return {
        "id": task_id,
        "context_id": "c",
        "owner": "",
        "state": "TASK_STATE_WORKING",
        "updated_ns": 1,
        "finished_ns": None,
        "body": body,
    }


def stored(path: Path) -> dict[str, bytes]:
    with sqlite3.connect(path) as db:
        return dict(db.execute("select id, body from tasks").fetchall())


@pytest.fixture
async def database(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[StateDatabase]:
    # A lock held by another process fails a write after this long (5 s in service).
    monkeypatch.setattr(state, "BUSY_TIMEOUT_MS", 200)
    async with StateDatabase(tmp_path / "state") as opened:  # its writer runs
        yield opened


async def test_a_batch_writes_the_latest_state_of_each_key_once(database: StateDatabase) -> None:
    writer = database.writer
    current = {"body": b"first"}
    for body in (b"first", b"second", b"third"):
        current["body"] = body
        writer.submit(("task", "t1"), Upsert(tasks, lambda: task_row("t1", current["body"])))
    writer.submit(("task", "t2"), Upsert(tasks, lambda: task_row("t2", b"gone")))
    writer.submit(("task", "t2"), Delete(tasks, {"id": "t2"}))
    assert writer.pending == 2
    assert await writer.flush()
    assert writer.batches == 1
    assert stored(database.path) == {"t1": b"third"}


async def test_a_lock_held_elsewhere_fails_the_write_with_the_cause_until_it_is_released(
    database: StateDatabase,
) -> None:
    writer = database.writer
    other = sqlite3.connect(database.path, isolation_level=None)
    other.execute("begin immediate")  # another process's write lock (a long backup, a shell)
    try:
        with pytest.raises(StateWriteError) as refused:
            await writer.write(("task", "t1"), Upsert(tasks, lambda: task_row("t1", b"kept")))
        assert refused.value.problem == "it is locked by another process"
        assert database.health.problem == "it is locked by another process"
        assert writer.pending == 1  # kept for the retry
    finally:
        other.execute("rollback")
        other.close()
    assert await writer.flush()
    assert database.health.ok
    assert stored(database.path) == {"t1": b"kept"}


async def test_a_withdrawn_write_is_not_retried(database: StateDatabase) -> None:
    writer = database.writer
    other = sqlite3.connect(database.path, isolation_level=None)
    other.execute("begin immediate")
    op = Upsert(tasks, lambda: task_row("t1", b"refused"))
    try:
        with pytest.raises(StateWriteError):
            await writer.write(("task", "t1"), op)
        writer.withdraw(("task", "t1"), op)
    finally:
        other.execute("rollback")
        other.close()
    assert writer.pending == 0
    assert await writer.flush()
    assert stored(database.path) == {}


async def test_the_causes_are_named_from_sqlite_s_own_errors(database: StateDatabase) -> None:
    """A read-only file system cannot be made under an open database in a test (the kernel
    refuses the remount while files are open for writing), so SQLite's own error for a
    read-only database is raised for real and named."""
    read_only = sqlite3.connect(f"file:{database.path}?mode=ro", uri=True)
    try:
        with pytest.raises(sqlite3.OperationalError) as raised:
            read_only.execute("insert into meta values ('k', 'v')")
    finally:
        read_only.close()
    assert describe_failure(raised.value) == "it is read-only"
    assert describe_failure(OSError(28, "No space left on device")) == "the disk is full"


async def test_a_cancellation_inside_a_write_waits_for_it_and_tears_nothing(
    tmp_path: Path,
) -> None:
    # The cancellation lands on the first statement of the batch's transaction: before, the
    # batch was lost and SQLAlchemy left a connection-closing task that never ended (it hung
    # the event loop's shutdown); now the write completes and the database closes.
    async with StateDatabase(tmp_path / "state") as database:
        writer = database.writer
        writer.submit(("task", "t1"), Upsert(tasks, lambda: task_row("t1", b"kept")))
        with anyio.CancelScope() as scope:

            def cancel_now(*_: Any) -> None:
                scope.cancel()

            event.listen(database.engine.sync_engine, "before_cursor_execute", cancel_now)
            try:
                await writer.flush()
            finally:
                event.remove(database.engine.sync_engine, "before_cursor_execute", cancel_now)
        assert scope.cancel_called  # the listener did cancel, inside the transaction
        assert stored(database.path) == {"t1": b"kept"}
    # Before, SQLAlchemy's closing task was still there, waiting forever.
    leftover = [t for t in asyncio.all_tasks() if "graceful_close" in repr(t.get_coro())]
    assert not leftover
