"""The state directory: one SQLite database, locked, checked and migrated at start.

`ACP_STATE_DIR` (default `./.a2a-acp-bridge`) holds `state.db` (with its `-wal` and `-shm`
files while the bridge runs), `push.key` (push_key.py) and `lock`. `StateDatabase.open`
makes the directory (mode 0700), takes the lock (one bridge per state directory: two would
each fail the other's running tasks at start), and opens the database in WAL mode with
`synchronous=FULL` (a commit is on disk when it returns) and a busy timeout, then checks
it (`PRAGMA quick_check`) and migrates it (schema.py). A file that is not a database, a
damaged one, one from a newer bridge or another program's, is refused with `StateError`
saying what to do: the bridge never writes into what it cannot read.

While running, every write goes through the `StateWriter` (state_writer.py), whose batches
run in this object's task group: `async with database:` starts it, and its end writes what
is still pending.

The engine is SQLAlchemy's asyncio engine over `aiosqlite`. With `A2A_DATABASE_URL` it is
PostgreSQL over `asyncpg` instead, shared by every replica (docs/scaling.md): the same
schema, migrations and writer; no file to check and no lock file (several replicas share
the database by design), but the migration takes a PostgreSQL advisory lock, so replicas
started together upgrade it once, one after the other. The directory still holds the
push key file and the adapters' homes. A server that cannot be reached yet (started beside
the bridge, as compose starts them) is waited for, up to `A2A_DATABASE_WAIT_MS`; one that
answers and refuses (a wrong password, no such database) is refused at once.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from types import TracebackType
from typing import Any

import anyio
from anyio.abc import TaskGroup
from sqlalchemy import create_engine, event, make_url, text
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from a2a_acp_bridge.errors import StateError
from a2a_acp_bridge.schema import SCHEMA_VERSION, migrate, migrate_refusal, schema_version
from a2a_acp_bridge.state_writer import (
    UNREACHABLE,
    StateHealth,
    StateWriter,
    describe_failure,
    untorn,
)

logger = logging.getLogger(__name__)

DATABASE_FILE = "state.db"
LOCK_FILE = "lock"
# A write waits this long for a lock another process holds (a backup, an sqlite3 shell)
# before it fails as "locked".
BUSY_TIMEOUT_MS = 5000
# At shutdown, how long the last writes may take (a full disk fails them at once).
CLOSE_FLUSH_S = 10.0
SQLITE_MAGIC = b"SQLite format 3\x00"
PAGE_SIZE = 16384
# PostgreSQL: how long connecting may take, and one statement at most (a write or a read
# is bounded even when the server stops answering: a connection is used shielded).
PG_CONNECT_S = 10.0
PG_COMMAND_S = 30.0
# PostgreSQL's port when the URL names none.
PG_DEFAULT_PORT = 5432
# While waiting for a server that cannot be reached yet: how often to try again.
PG_RETRY_S = 0.5
# The advisory lock the migration holds (any fixed number: "a2a-acp-bridge schema").
PG_MIGRATION_LOCK = 0x2A2AAC9B


class StateDatabase:
    """The state directory's database. `await open()` at start, then `async with` it."""

    def __init__(self, directory: Path, url: str | None = None, *, wait_s: float = 0.0) -> None:
        self.directory = directory
        self.path = directory / DATABASE_FILE
        # A PostgreSQL URL (config.DatabaseUrl), else the SQLite file at `path`.
        self.url = url
        # PostgreSQL: how long `open` waits for a server it cannot reach yet.
        self.wait_s = wait_s
        self.health = StateHealth()
        self._engine: AsyncEngine | None = None
        self._writer: StateWriter | None = None
        self._lock_fd: int | None = None
        self._group: TaskGroup | None = None
        self.migrated_from: int | None = None

    @property
    def engine(self) -> AsyncEngine:
        if self._engine is None:
            raise RuntimeError("the state database is not open")
        return self._engine

    @property
    def writer(self) -> StateWriter:
        if self._writer is None:
            raise RuntimeError("the state database is not open")
        return self._writer

    @property
    def is_open(self) -> bool:
        return self._engine is not None

    @property
    def shared(self) -> bool:
        """PostgreSQL: other replicas may use the database at the same time."""
        return self.url is not None

    @property
    def where(self) -> str:
        """The database, as a log line or an error names it (never with a password)."""
        if self.url is None:
            return str(self.path)
        url = make_url(self.url)
        host = url.host or url.query.get("host") or "localhost"
        return f"PostgreSQL database {url.database or '?'} on {host}"

    @property
    def tcp_port(self) -> int | None:
        """The TCP port of a PostgreSQL server reached over the network (None: SQLite or a
        unix socket). The bridge keeps its adapters off it (server.py): an agent that could
        reach the shared database could write a handover as any caller."""
        if self.url is None:
            return None
        url = make_url(self.url)
        host = url.host or str(url.query.get("host") or "")
        if not host or host.startswith("/"):
            return None
        return url.port or PG_DEFAULT_PORT

    async def open(self) -> None:
        """Make, lock, check and migrate; StateError says what is wrong. Idempotent."""
        if self._engine is not None:
            return
        self._make_directory()
        if self.url is not None:
            await self._open_shared(self.url)
            return
        self._take_lock()
        try:
            await anyio.to_thread.run_sync(self._check_file)
            engine = create_async_engine(f"sqlite+aiosqlite:///{self.path}")
            event.listen(engine.sync_engine, "connect", _configure)
            try:
                with untorn():
                    async with engine.begin() as conn:
                        found, version = await conn.run_sync(migrate)
            except StateError:
                await engine.dispose()
                raise
            except (SQLAlchemyError, OSError) as exc:
                await engine.dispose()
                raise StateError(self._unusable(exc)) from None
        except BaseException:
            self._release_lock()
            raise
        self._engine = engine
        self._writer = StateWriter(engine, self.health)
        self.migrated_from = found if found != version else None
        self._opened(found, version)

    async def _open_shared(self, url: str) -> None:
        engine = create_async_engine(
            url,
            pool_pre_ping=True,
            connect_args={"timeout": PG_CONNECT_S, "command_timeout": PG_COMMAND_S},
        )
        try:
            found, version = await self._wait_and_migrate(engine)
        except BaseException:
            # Refused, or the start cancelled while waiting: no connection is left open.
            with anyio.CancelScope(shield=True):
                await engine.dispose()
            raise
        self._engine = engine
        self._writer = StateWriter(engine, self.health)
        self.migrated_from = found if found != version else None
        self._opened(found, version)

    async def _wait_and_migrate(self, engine: AsyncEngine) -> tuple[int, int]:
        """Migrate; a server not reached yet is tried again for up to `wait_s`."""
        started = anyio.current_time()
        waiting = False
        while True:
            try:
                found, version = await self._migrate_shared(engine)
                break
            except (SQLAlchemyError, OSError) as exc:
                reason = describe_failure(exc, "postgresql")
                if reason != UNREACHABLE or anyio.current_time() - started >= self.wait_s:
                    waited = f" (waited {self.wait_s:g} s)" if waiting else ""
                    raise StateError(
                        f"the state database ({self.where}) cannot be used: {reason}{waited}"
                    ) from None
                if not waiting:
                    waiting = True
                    logger.warning(
                        "waiting for the state database",
                        extra={"database": self.where, "error": reason, "up_to_s": self.wait_s},
                    )
            # Polled: a server that is not there yet has nothing to wake a waiter with.
            await anyio.sleep(PG_RETRY_S)
        if waiting:
            logger.info(
                "the state database answered",
                extra={"after_s": round(anyio.current_time() - started, 1)},
            )
        return found, version

    @staticmethod
    async def _migrate_shared(engine: AsyncEngine) -> tuple[int, int]:
        with untorn():
            async with engine.begin() as conn:
                # Replicas started together: one migrates, the others wait and find it done.
                await conn.execute(
                    text("SELECT pg_advisory_xact_lock(:key)"), {"key": PG_MIGRATION_LOCK}
                )
                found, version = await conn.run_sync(migrate)
        return found, version

    def _opened(self, found: int, version: int) -> None:
        logger.info(
            "state database opened",
            extra={
                "path": self.where,
                "schema_version": version,
                **({"migrated_from": found} if found != version else {}),
            },
        )

    @contextlib.asynccontextmanager
    async def connect(self) -> AsyncIterator[AsyncConnection]:
        """A connection for reads, never torn by a cancellation (see `untorn`)."""
        with untorn():
            async with self.engine.connect() as conn:
                yield conn

    @contextlib.asynccontextmanager
    async def begin(self) -> AsyncIterator[AsyncConnection]:
        """A transaction, never torn by a cancellation (see `untorn`)."""
        with untorn():
            async with self.engine.begin() as conn:
                yield conn

    async def __aenter__(self) -> StateDatabase:
        await self.open()
        self._group = anyio.create_task_group()
        await self._group.__aenter__()
        self._group.start_soon(self._run_writer)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        group = self._group
        if group is not None:
            group.cancel_scope.cancel()
            await group.__aexit__(exc_type, exc, tb)
            self._group = None
        await self.close()

    async def _run_writer(self) -> None:
        # The writer survives its own failures (state_writer.py); anything else is a bug
        # that must not take the server down: logged, and the loop started again.
        while True:
            try:
                await self.writer.run()
            except Exception:
                logger.exception("the state writer failed; starting it again")
                await anyio.sleep(1.0)

    async def close(self) -> None:
        """Write what is pending (bounded), close the engine, release the lock."""
        if self._engine is None:
            return
        with anyio.move_on_after(CLOSE_FLUSH_S, shield=True):
            if not await self.writer.flush():
                logger.error(
                    "the state database could not take the last writes",
                    extra={"pending": self.writer.pending, "problem": self.health.problem},
                )
        with anyio.CancelScope(shield=True):
            await self._engine.dispose()
        self._engine = None
        self._release_lock()

    # --- start-up checks ---------------------------------------------------------------

    def _make_directory(self) -> None:
        try:
            self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        except OSError as exc:
            raise StateError(
                f"ACP_STATE_DIR {self.directory} cannot be created: {exc.strerror}"
            ) from None
        if not self.directory.is_dir():
            raise StateError(f"ACP_STATE_DIR {self.directory} is not a directory")

    def _take_lock(self) -> None:
        path = self.directory / LOCK_FILE
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            raise StateError(f"the state lock {path} cannot be opened: {exc.strerror}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            holder = _read_pid(fd)
            os.close(fd)
            if exc.errno in (errno.EAGAIN, errno.EACCES):
                who = f" (pid {holder})" if holder else ""
                raise StateError(
                    f"another a2a-acp-bridge{who} uses the state directory {self.directory}: "
                    "give each bridge its own ACP_STATE_DIR"
                ) from None
            raise StateError(f"the state lock {path} cannot be taken: {exc.strerror}") from None
        with contextlib.suppress(OSError):
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()}\n".encode())
        self._lock_fd = fd

    def _release_lock(self) -> None:
        if self._lock_fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._lock_fd)
            self._lock_fd = None

    def _check_file(self) -> None:
        """A file that is there must be a sound SQLite database of a version this bridge
        knows: checked read-only, before anything (even the switch to WAL) writes to it."""
        try:
            with self.path.open("rb") as file:
                head = file.read(len(SQLITE_MAGIC))
        except FileNotFoundError:
            return
        except OSError as exc:
            raise StateError(
                f"the state database {self.path} cannot be read: {exc.strerror}"
            ) from None
        if not head:
            return
        if head != SQLITE_MAGIC:
            raise StateError(self._damaged("it is not a SQLite database"))
        uri = f"file:{self.path}?mode=ro"
        engine = create_engine("sqlite://", creator=lambda: sqlite3.connect(uri, uri=True))
        try:
            with engine.connect() as conn:
                check = conn.execute(text("PRAGMA quick_check")).scalar()
                if check != "ok":
                    raise StateError(self._damaged(f"its check reports {check!r}"))
                found = schema_version(conn)
        except (SQLAlchemyError, OSError) as exc:
            raise StateError(self._unusable(exc)) from None
        finally:
            engine.dispose()
        if found > SCHEMA_VERSION:
            migrate_refusal(found)

    def _damaged(self, why: str) -> str:
        return (
            f"the state database {self.path} is damaged ({why}); the bridge will not write "
            "into it. Move it (and its -wal and -shm files) aside to start empty, or restore "
            "a backup (docs/operations.md)"
        )

    def _unusable(self, exc: BaseException) -> str:
        original = getattr(exc, "orig", None) or exc
        if isinstance(original, sqlite3.DatabaseError) and (
            "not a database" in str(original) or "malformed" in str(original)
        ):
            return self._damaged(str(original))
        return f"the state database {self.path} cannot be used: {describe_failure(exc)}"


def _configure(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        # Before the first table exists only: fewer, larger pages write a task of a few MB
        # in about half the time of 4 KiB pages (measured).
        cursor.execute(f"PRAGMA page_size = {PAGE_SIZE}")
        cursor.execute("PRAGMA journal_mode = WAL")
        cursor.execute("PRAGMA synchronous = FULL")
        # The writer checkpoints when idle (state_writer.py), not inside a task's commit.
        cursor.execute("PRAGMA wal_autocheckpoint = 0")
    finally:
        cursor.close()


def _read_pid(fd: int) -> str:
    with contextlib.suppress(OSError, ValueError):
        os.lseek(fd, 0, os.SEEK_SET)
        return os.read(fd, 32).decode().strip()
    return ""


__all__ = ["SCHEMA_VERSION", "StateDatabase"]
