"""A throw-away PostgreSQL for the tests: Debian's own binaries, run as an unprivileged user.

One cluster per test session (`PostgresCluster.start`): `initdb` into a fresh directory
under /tmp, then `pg_ctl start` with no TCP listener at all, only a unix socket in that
directory, and trust authentication (nothing but this machine's processes can reach it).
As root, both run as `nobody` through `runuser` (PostgreSQL refuses to run as root). Each
test gets a database of its own (`create_database`, about a tenth of a second), so tests
never see each other's rows. `stop` ends the server by the pid it wrote, and removes the
directory. scripts/test installs the `postgresql` package when it is missing.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import pwd
import shutil
import signal
import sqlite3
import subprocess
import tempfile
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import asyncpg

# How long initdb, the server's start and its stop may take; a createdb.
INITDB_S = 120.0
START_S = 60.0
STOP_S = 30.0
CREATEDB_S = 30.0
SUPERUSER = "bridge"
UNPRIVILEGED = "nobody"


def postgres_binaries() -> Path | None:
    """The newest installed PostgreSQL's bin directory (Debian's layout, else the PATH)."""
    found = sorted(
        Path("/usr/lib/postgresql").glob("*/bin/initdb"),
        key=lambda p: int(p.parent.parent.name) if p.parent.parent.name.isdigit() else 0,
    )
    if found:
        return found[-1].parent
    initdb = shutil.which("initdb")
    return Path(initdb).resolve().parent if initdb else None


PREFIX = "a2a-bridge-pg-"
OWNER_FILE = "owner"


def stop_abandoned() -> None:
    """Stop the clusters of test sessions that died without their teardown (a SIGKILL, a
    closed pipe): each directory names the pid of the session that made it."""
    for root in Path(tempfile.gettempdir()).glob(PREFIX + "*"):
        try:
            owner = int((root / OWNER_FILE).read_text())
        except (OSError, ValueError):
            continue
        if _alive(owner):
            continue
        with contextlib.suppress(OSError, ValueError, IndexError):
            pid = int((root / "data" / "postmaster.pid").read_text().split()[0])
            os.kill(pid, signal.SIGINT)
            _wait_gone(pid, STOP_S)
        shutil.rmtree(root, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class PostgresCluster:
    def __init__(self, bin_dir: Path) -> None:
        self.bin_dir = bin_dir
        self.root = Path(tempfile.mkdtemp(prefix=PREFIX))
        (self.root / OWNER_FILE).write_text(f"{os.getpid()}\n")
        self.data = self.root / "data"
        # The socket directory: the server listens here only (`host=` in a URL).
        self.socket_dir = self.root
        self._as_user: list[str] = []
        if os.geteuid() == 0:
            user = pwd.getpwnam(UNPRIVILEGED)
            os.chown(self.root, user.pw_uid, user.pw_gid)
            self._as_user = ["runuser", "-u", UNPRIVILEGED, "--"]
        self.pid: int | None = None

    def _run(self, *command: str, timeout: float) -> None:
        subprocess.run(
            [*self._as_user, str(self.bin_dir / command[0]), *command[1:]],
            check=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            cwd=self.root,
        )

    def start(self) -> None:
        self._run(
            "initdb",
            "-D",
            str(self.data),
            "-U",
            SUPERUSER,
            "--auth=trust",
            "-E",
            "UTF8",
            "--no-sync",
            timeout=INITDB_S,
        )
        options = (
            f"-c listen_addresses='' -k {self.socket_dir} -c fsync=off "
            "-c synchronous_commit=off -c full_page_writes=off -c max_connections=200"
        )
        self._run(
            "pg_ctl",
            "start",
            "-w",
            "-t",
            str(int(START_S)),
            "-D",
            str(self.data),
            "-l",
            str(self.root / "server.log"),
            "-o",
            options,
            timeout=START_S + 5,
        )
        self.pid = int((self.data / "postmaster.pid").read_text().split()[0])

    def stop(self) -> None:
        pid, self.pid = self.pid, None
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                # SIGINT: PostgreSQL's fast shutdown (sessions ended, no waiting for them).
                os.kill(pid, signal.SIGINT)
                _wait_gone(pid, STOP_S)
        shutil.rmtree(self.root, ignore_errors=True)

    def url(self, database: str) -> str:
        """The SQLAlchemy URL of `database` (the bridge's A2A_DATABASE_URL)."""
        return f"postgresql+asyncpg://{SUPERUSER}@/{database}?host={self.socket_dir}"

    def dsn(self, database: str) -> str:
        """The same for asyncpg itself (a test's own look at the rows)."""
        return f"postgresql://{SUPERUSER}@/{database}?host={self.socket_dir}"

    def create_database(self) -> str:
        """A fresh, empty database; its name."""
        name = "t_" + uuid.uuid4().hex[:16]
        subprocess.run(
            [str(self.bin_dir / "createdb"), "-h", str(self.socket_dir), "-U", SUPERUSER, name],
            check=True,
            timeout=CREATEDB_S,
            stdin=subprocess.DEVNULL,
            capture_output=True,
        )
        return name


def _wait_gone(pid: int, deadline_s: float) -> None:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)  # polled: another process's exit, which sends us nothing
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


async def fetch_rows(dsn: str, query: str) -> list[tuple[Any, ...]]:
    """The rows of `query`, read with asyncpg directly (not through the bridge's code)."""
    conn = await asyncpg.connect(dsn)
    try:
        return [tuple(record) for record in await conn.fetch(query)]
    finally:
        with anyio.CancelScope(shield=True):
            await conn.close()


@dataclass(frozen=True)
class StateBackend:
    """A test's state database: `url` None is the SQLite file in ACP_STATE_DIR."""

    url: str | None
    dsn: str | None

    @property
    def env(self) -> dict[str, str]:
        return {"A2A_DATABASE_URL": self.url} if self.url else {}

    async def rows(self, state_dir: Path, query: str) -> list[tuple[Any, ...]]:
        if self.dsn is not None:
            return await fetch_rows(self.dsn, query)
        with sqlite3.connect(state_dir / "state.db") as db:
            return [tuple(row) for row in db.execute(query).fetchall()]


@contextlib.asynccontextmanager
async def tcp_port_for(cluster: PostgresCluster) -> AsyncIterator[int]:
    """A 127.0.0.1 port that forwards to the cluster's unix socket (the test server has no
    TCP listener): for a bridge that must reach its database over the network."""
    socket_path = str(cluster.socket_dir / ".s.PGSQL.5432")

    async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while chunk := await reader.read(65536):
                writer.write(chunk)
                await writer.drain()
        except OSError:
            pass
        finally:
            writer.close()

    async def forward(client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        try:
            server_r, server_w = await asyncio.open_unix_connection(socket_path)
        except OSError:
            client_w.close()
            return
        await asyncio.gather(pipe(client_r, server_w), pipe(server_r, client_w))

    server = await asyncio.start_server(forward, "127.0.0.1", 0)
    try:
        yield int(server.sockets[0].getsockname()[1])
    finally:
        server.close()
