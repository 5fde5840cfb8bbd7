"""The state database at start: created, migrated from an older schema, and refused with
a message when it is damaged, from a newer bridge, another program's, or in use; the push
key file. Real SQLite files; the start-up refusals with real bridge processes."""

from __future__ import annotations

import hashlib
import os
import sqlite3
import time
from pathlib import Path

import httpx
import pytest
from a2a.types.a2a_pb2 import Message, Part, Role, Task, TaskState
from google.protobuf.json_format import MessageToDict
from sqlalchemy import create_engine, inspect

from a2a_acp_bridge.config import Settings
from a2a_acp_bridge.errors import ConfigError, StateError
from a2a_acp_bridge.push_key import KEY_FILE, push_cipher
from a2a_acp_bridge.schema import SCHEMA_VERSION, metadata, migrate, tasks
from a2a_acp_bridge.state import StateDatabase
from tests.support.bridge_process import BridgeProcess
from tests.support.wire import rpc

pytestmark = pytest.mark.anyio


def environment(tmp_path: Path) -> dict[str, str]:
    return {
        "ACP_SANDBOX_DIR": str(tmp_path / "sandboxes"),
        "ACP_STATE_DIR": str(tmp_path / "state"),
    }


def database_at(tmp_path: Path, version: int) -> Path:
    """A state database built by the real migration steps up to `version`."""
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    engine = create_engine(f"sqlite:///{state / 'state.db'}")
    with engine.begin() as conn:
        migrate(conn, target=version)
    engine.dispose()
    return state / "state.db"


def a_finished_task() -> Task:
    task = Task(id="old-task", context_id="old-context")
    task.history.append(
        Message(message_id="m1", role=Role.ROLE_USER, parts=[Part(text="from before")])
    )
    task.status.state = TaskState.TASK_STATE_COMPLETED
    task.status.timestamp.GetCurrentTime()
    return task


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


async def test_a_state_directory_from_the_older_schema_is_migrated_and_its_tasks_served(
    tmp_path: Path,
) -> None:
    path = database_at(tmp_path, 1)
    task = a_finished_task()
    with sqlite3.connect(path) as db:
        db.execute(
            "insert into tasks values (?, ?, '', 'TASK_STATE_COMPLETED', ?, ?, ?)",
            (task.id, task.context_id, time.time_ns(), time.time_ns(), task.SerializeToString()),
        )
    process = await BridgeProcess(tmp_path, environment(tmp_path)).start()
    try:
        async with httpx.AsyncClient(timeout=30) as client:
            got = await rpc(client, process.rpc_url, "GetTask", {"id": task.id})
    finally:
        await process.stop()
    assert got["result"] == MessageToDict(task)
    (opened,) = process.events("state database opened")
    assert (opened["migrated_from"], opened["schema_version"]) == (1, SCHEMA_VERSION)
    with sqlite3.connect(path) as db:
        version = db.execute("select value from meta where key = 'schema_version'").fetchone()
        names = {row[0] for row in db.execute("select name from sqlite_master")}
    assert version == (str(SCHEMA_VERSION),)
    assert "conversations" in names


async def test_a_database_from_a_newer_bridge_is_refused_at_start_and_left_untouched(
    tmp_path: Path,
) -> None:
    path = database_at(tmp_path, SCHEMA_VERSION)
    with sqlite3.connect(path) as db:
        db.execute("update meta set value = '99' where key = 'schema_version'")
    before = digest(path)
    process = BridgeProcess(tmp_path, environment(tmp_path))
    assert await process.run_to_exit() == 1
    (refused,) = process.events("the state directory cannot be used")
    assert f"schema version 99, newer than this bridge knows ({SCHEMA_VERSION})" in refused["error"]
    assert process.events("listening") == []
    assert digest(path) == before


@pytest.mark.parametrize("damage", ["not a database", "damaged pages"])
async def test_a_corrupt_database_file_is_refused_at_start_with_a_message(
    tmp_path: Path, damage: str
) -> None:
    if damage == "not a database":
        state = tmp_path / "state"
        state.mkdir()
        path = state / "state.db"
        path.write_bytes(os.urandom(8192))
    else:
        path = database_at(tmp_path, SCHEMA_VERSION)
        with sqlite3.connect(path) as db:
            db.execute("pragma journal_mode = delete")
            for i in range(200):
                db.execute(
                    "insert into tasks (id, context_id, owner, state, updated_ns, finished_ns, "
                    "body) values (?, 'c', '', 'TASK_STATE_COMPLETED', 1, 1, ?)",
                    (f"t{i}", os.urandom(300)),
                )
        raw = bytearray(path.read_bytes())
        page = 4096
        raw[2 * page : 6 * page] = os.urandom(4 * page)  # index and table pages
        path.write_bytes(bytes(raw))
    before = digest(path)
    process = BridgeProcess(tmp_path, environment(tmp_path))
    assert await process.run_to_exit() == 1
    (refused,) = process.events("the state directory cannot be used")
    assert "is damaged" in refused["error"]
    assert "restore a backup" in refused["error"]
    assert digest(path) == before


async def test_another_program_s_sqlite_database_is_not_written_into(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    with sqlite3.connect(state / "state.db") as db:
        db.execute("create table accounts (id integer primary key, owner text)")
    database = StateDatabase(state)
    with pytest.raises(StateError, match="not an a2a-acp-bridge state database"):
        await database.open()
    # The lock is released with the refusal: a corrected start can take it.
    (state / "state.db").unlink()
    await database.open()
    await database.close()


async def test_one_state_directory_serves_one_bridge_at_a_time(tmp_path: Path) -> None:
    first = StateDatabase(tmp_path / "state")
    await first.open()
    try:
        with pytest.raises(StateError, match=f"another a2a-acp-bridge \\(pid {os.getpid()}\\)"):
            await StateDatabase(tmp_path / "state").open()
    finally:
        await first.close()
    second = StateDatabase(tmp_path / "state")
    await second.open()
    await second.close()


async def test_a_new_database_is_built_by_the_migrations_exactly_as_the_tables_say(
    tmp_path: Path,
) -> None:
    database = StateDatabase(tmp_path / "state")
    await database.open()
    await database.close()
    assert stat_mode(tmp_path / "state") == 0o700
    engine = create_engine(f"sqlite:///{database.path}")
    found = inspect(engine)
    for table in metadata.sorted_tables:
        columns = {
            c["name"]: (str(c["type"]), c["nullable"]) for c in found.get_columns(table.name)
        }
        expected = {
            c.name: (str(c.type.compile(engine.dialect)), c.nullable) for c in table.columns
        }
        assert columns == expected, table.name
        keys = found.get_pk_constraint(table.name)["constrained_columns"]
        assert keys == [c.name for c in table.primary_key.columns]
    assert {i["name"] for i in found.get_indexes(tasks.name)} == {i.name for i in tasks.indexes}
    engine.dispose()


def stat_mode(path: Path) -> int:
    return path.stat().st_mode & 0o777


def test_the_push_key_file_is_made_private_and_refused_when_others_may_read_it(
    tmp_path: Path,
) -> None:
    cipher = push_cipher((), tmp_path)
    key_file = tmp_path / KEY_FILE
    assert stat_mode(key_file) == 0o600
    sealed = cipher.encrypt(b"credentials")
    assert push_cipher((), tmp_path).decrypt(sealed) == b"credentials"
    key_file.chmod(0o644)
    with pytest.raises(StateError, match="may be read by others"):
        push_cipher((), tmp_path)


def test_a2a_push_key_encrypts_and_the_old_key_file_still_decrypts(tmp_path: Path) -> None:
    old = push_cipher((), tmp_path).encrypt(b"sealed with the file's key")
    key = "a" * 43 + "="
    settings = Settings.from_env({"A2A_PUSH_KEY": key}, cwd=tmp_path)
    assert settings.push_keys == (key,)
    cipher = push_cipher(settings.push_keys, tmp_path)
    assert cipher.decrypt(old) == b"sealed with the file's key"
    assert push_cipher((key,), tmp_path / "elsewhere").decrypt(cipher.encrypt(b"x")) == b"x"
    with pytest.raises(ConfigError, match="A2A_PUSH_KEY") as refused:
        Settings.from_env({"A2A_PUSH_KEY": "too-short-key"}, cwd=tmp_path)
    assert "too-short-key" not in str(refused.value)


def test_the_durations_and_the_state_directory_are_settings(tmp_path: Path) -> None:
    settings = Settings.from_env(
        {"A2A_TASK_TTL": "12h", "ACP_SANDBOX_TTL": "0", "ACP_STATE_DIR": "st"}, cwd=tmp_path
    )
    assert settings.task_ttl_s == 12 * 3600
    assert settings.sandbox_ttl_s is None
    assert settings.state_dir == tmp_path / "st"
    defaults = Settings.from_env({}, cwd=tmp_path)
    assert defaults.state_dir == tmp_path / ".a2a-acp-bridge"
    assert defaults.sandbox_ttl_s == 7 * 86400
    with pytest.raises(ConfigError, match="ACP_SANDBOX_TTL"):
        Settings.from_env({"ACP_SANDBOX_TTL": "a week"}, cwd=tmp_path)
