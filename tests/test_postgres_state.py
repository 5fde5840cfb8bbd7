"""The state in PostgreSQL (A2A_DATABASE_URL): the same schema built by the same migration
steps, replicas started together migrating it once, a newer schema refused, a server out
of reach refused at start with a message that names the database but never the password,
and a bridge's tasks, push configs and conversations kept across a restart. A real
PostgreSQL server (tests/support/postgres.py), no mocks."""

from __future__ import annotations

import signal
from pathlib import Path

import anyio
import httpx
import pytest
from sqlalchemy import Connection, inspect, text
from sqlalchemy.ext.asyncio import create_async_engine

from a2a_acp_bridge.config import Settings
from a2a_acp_bridge.errors import ConfigError, StateError, StateWriteError
from a2a_acp_bridge.schema import SCHEMA_VERSION, metadata, tasks
from a2a_acp_bridge.state import StateDatabase
from a2a_acp_bridge.state_writer import Upsert
from tests.support.bridge_process import BridgeProcess
from tests.support.postgres import PostgresCluster, fetch_rows
from tests.support.server import make_settings, serve_bridge
from tests.support.wire import rpc, send
from tests.test_state_writer import task_row

pytestmark = pytest.mark.anyio

# The server's socket in its directory (the default port).
SOCKET = ".s.PGSQL.5432"


def described(conn: Connection) -> dict[str, object]:
    found = inspect(conn)
    shape: dict[str, object] = {}
    for table in metadata.sorted_tables:
        shape[table.name] = (
            {c["name"]: (str(c["type"]), c["nullable"]) for c in found.get_columns(table.name)},
            found.get_pk_constraint(table.name)["constrained_columns"],
            sorted(str(i["name"]) for i in found.get_indexes(table.name)),
        )
    return shape


def expected(conn: Connection) -> dict[str, object]:
    shape: dict[str, object] = {}
    for table in metadata.sorted_tables:
        shape[table.name] = (
            {c.name: (str(c.type.compile(conn.dialect)), c.nullable) for c in table.columns},
            [c.name for c in table.primary_key.columns],
            sorted(str(i.name) for i in table.indexes),
        )
    return shape


async def test_replicas_started_together_build_the_schema_once_exactly_as_the_tables_say(
    tmp_path: Path, postgres: PostgresCluster, postgres_database: str
) -> None:
    url = postgres.url(postgres_database)
    replicas = [StateDatabase(tmp_path / f"state{i}", url) for i in range(3)]
    async with anyio.create_task_group() as group:
        for replica in replicas:
            group.start_soon(replica.open)
    assert [r.migrated_from for r in replicas].count(0) == 1  # one built it, two found it
    for replica in replicas:
        await replica.close()
    engine = create_async_engine(url)
    async with engine.connect() as conn:
        assert await conn.run_sync(described) == await conn.run_sync(expected)
        version = (await conn.execute(text("select value from meta"))).scalar()
    await engine.dispose()
    assert version == str(SCHEMA_VERSION)
    assert {i.name for i in tasks.indexes} <= {
        r[0]
        for r in await fetch_rows(
            postgres.dsn(postgres_database), "select indexname from pg_indexes"
        )
    }


async def test_a_database_from_a_newer_bridge_is_refused_and_left_untouched(
    tmp_path: Path, postgres: PostgresCluster, postgres_database: str
) -> None:
    url = postgres.url(postgres_database)
    first = StateDatabase(tmp_path / "state", url)
    await first.open()
    async with first.begin() as conn:
        await conn.execute(text("update meta set value = :v"), {"v": str(SCHEMA_VERSION + 1)})
    await first.close()
    with pytest.raises(StateError, match="newer than this bridge knows"):
        await StateDatabase(tmp_path / "state", url).open()
    rows = await fetch_rows(postgres.dsn(postgres_database), "select value from meta")
    assert rows == [(str(SCHEMA_VERSION + 1),)]


async def test_a_server_out_of_reach_is_refused_at_start_naming_the_database_not_the_password(
    tmp_path: Path,
) -> None:
    # A unix socket directory with no server in it: nothing listens there.
    url = f"postgresql+asyncpg://bridge:s3cret-pw@/bridge_state?host={tmp_path}"
    with pytest.raises(StateError) as refused:
        await StateDatabase(tmp_path / "state", url).open()
    message = str(refused.value)
    assert "PostgreSQL database bridge_state" in message
    assert "cannot be reached" in message
    assert "s3cret-pw" not in message


async def test_a_server_that_comes_up_after_the_bridge_is_waited_for(
    tmp_path: Path,
    postgres: PostgresCluster,
    postgres_database: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # A socket directory the server "arrives" in a second later: compose starts the
    # replicas beside their database, which takes seconds to accept connections.
    late = tmp_path / "late"
    late.mkdir()
    url = f"postgresql+asyncpg://bridge@/{postgres_database}?host={late}"
    database = StateDatabase(tmp_path / "state", url, wait_s=30.0)

    async def arrive() -> None:
        await anyio.sleep(1.0)
        (late / SOCKET).symlink_to(postgres.socket_dir / SOCKET)

    with caplog.at_level("INFO", logger="a2a_acp_bridge.state"):
        async with anyio.create_task_group() as group:
            group.start_soon(arrive)
            await database.open()
    await database.close()
    events = [r.getMessage() for r in caplog.records]
    assert events.count("waiting for the state database") == 1  # once, not per attempt
    assert "the state database answered" in events


async def test_a_server_that_answers_and_refuses_is_not_waited_for(
    tmp_path: Path, postgres: PostgresCluster
) -> None:
    url = postgres.url("no_such_database")
    started = anyio.current_time()
    with pytest.raises(StateError) as refused:
        await StateDatabase(tmp_path / "state", url, wait_s=30.0).open()
    assert anyio.current_time() - started < 10.0  # at once: waiting would not help
    assert "waited" not in str(refused.value)


async def test_a_server_still_out_of_reach_after_the_wait_is_refused_saying_so(
    tmp_path: Path,
) -> None:
    url = f"postgresql+asyncpg://bridge@/bridge_state?host={tmp_path}"
    with pytest.raises(StateError) as refused:
        await StateDatabase(tmp_path / "state", url, wait_s=1.0).open()
    assert "cannot be reached (waited 1 s)" in str(refused.value)


async def test_a_bridge_waiting_for_its_database_stops_when_told_to(tmp_path: Path) -> None:
    # compose's `down` or a rolling update while the database is not up yet: a SIGTERM
    # ends the wait at once instead of after A2A_DATABASE_WAIT_MS.
    env = {
        "A2A_DATABASE_URL": f"postgresql+asyncpg://bridge@/bridge_state?host={tmp_path}",
        "A2A_DATABASE_WAIT_MS": "600000",
        "A2A_PUSH_KEY": "k" * 43 + "=",
    }
    process = BridgeProcess(tmp_path, env)
    process._spawn()
    try:
        with anyio.fail_after(30):
            while not process.events("waiting for the state database"):
                assert process.proc is not None
                assert process.proc.poll() is None, process.log_text()[-2000:]
                await anyio.sleep(0.05)  # polled: another process's log file
        stopped = anyio.current_time()
        assert await process.stop(signal.SIGTERM) == 0
        assert anyio.current_time() - stopped < 10.0  # not the 600 s of the wait
        assert process.events("stopped before the state database could be opened")
        assert process.events("listening") == []
    finally:
        process.close()


def test_the_url_must_be_postgresql_and_is_never_echoed(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as refused:
        Settings.from_env({"A2A_DATABASE_URL": "mysql://u:hunter2@db/x"}, cwd=tmp_path)
    assert "A2A_DATABASE_URL" in str(refused.value)
    assert "hunter2" not in str(refused.value)
    settings = Settings.from_env({"A2A_DATABASE_URL": "postgresql://u:hunter2@db/x"}, cwd=tmp_path)
    assert settings.database_url == "postgresql+asyncpg://u:hunter2@db/x"
    assert "hunter2" not in repr(settings)
    assert Settings.from_env({}, cwd=tmp_path).database_url is None


async def test_tasks_push_configs_and_conversations_outlive_a_restart_on_postgresql(
    tmp_path: Path, postgres: PostgresCluster, postgres_database: str
) -> None:
    env = {"A2A_DATABASE_URL": postgres.url(postgres_database)}
    settings = make_settings(tmp_path, env)
    async with serve_bridge(settings) as bridge, httpx.AsyncClient(timeout=30) as client:
        task = await send(client, bridge.rpc_url, "think kept")
        config = {"taskId": task["id"], "id": "c1", "url": "https://example.com/hook"}
        assert "result" in await rpc(
            client, bridge.rpc_url, "CreateTaskPushNotificationConfig", config
        )
    dsn = postgres.dsn(postgres_database)
    assert await fetch_rows(dsn, "select id, state from tasks") == [
        (task["id"], "TASK_STATE_COMPLETED")
    ]
    assert await fetch_rows(dsn, "select context_id from conversations") == [(task["contextId"],)]
    # No SQLite file was made: the state is in PostgreSQL only.
    assert not (tmp_path / ".a2a-acp-bridge" / "state.db").exists()
    async with (
        serve_bridge(make_settings(tmp_path, env)) as bridge,
        httpx.AsyncClient(timeout=30) as client,
    ):
        again = await rpc(client, bridge.rpc_url, "GetTask", {"id": task["id"]})
        assert again["result"] == task
        configs = await rpc(
            client, bridge.rpc_url, "ListTaskPushNotificationConfigs", {"taskId": task["id"]}
        )
        assert [c["id"] for c in configs["result"]["configs"]] == ["c1"]
        record = bridge.app.state.persistence.book.get(task["contextId"])
        assert record is not None
        assert record.session_id is not None


async def test_a_read_only_postgresql_fails_the_write_with_the_cause_and_recovers(
    tmp_path: Path, postgres: PostgresCluster, postgres_database: str
) -> None:
    dsn = postgres.dsn(postgres_database)
    sever = (
        "select pg_terminate_backend(pid) from pg_stat_activity "
        f"where datname = '{postgres_database}' and pid <> pg_backend_pid()"
    )
    async with StateDatabase(tmp_path / "state", postgres.url(postgres_database)) as database:
        writer = database.writer
        assert await writer.flush()
        # The server turned read-only for this database (a replica promoted wrongly, an
        # operator's switch): its sessions end and new ones may only read.
        await fetch_rows(
            dsn, f"alter database {postgres_database} set default_transaction_read_only = on"
        )
        await fetch_rows(postgres.dsn("postgres"), sever)
        with pytest.raises(StateWriteError) as refused:
            await writer.write(("task", "t1"), Upsert(tasks, lambda: task_row("t1", b"kept")))
        assert refused.value.problem == "it is read-only"
        assert database.health.problem == "it is read-only"
        assert writer.pending == 1  # kept for the retry
        await fetch_rows(
            postgres.dsn("postgres"),
            f"alter database {postgres_database} set default_transaction_read_only = off",
        )
        await fetch_rows(postgres.dsn("postgres"), sever)
        assert await writer.flush()
        assert database.health.ok
    assert await fetch_rows(dsn, "select id, body from tasks") == [("t1", b"kept")]
