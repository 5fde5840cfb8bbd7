"""What the bridge keeps is bounded: tasks beyond A2A_TASK_RETENTION or older than
A2A_TASK_TTL, conversations unused for ACP_SANDBOX_TTL (sandbox and record, never a
handed ACP_CWD), and a conversation that never got an adapter leaves no directory.

The sweep runs once a minute; here a pass is run at a chosen moment (`sweep_once` with a
clock hours ahead) against the real server, its real SQLite file and real sandboxes.
"""

from __future__ import annotations

import functools
import logging
import os
import sqlite3
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from a2a_acp_bridge.boundary import directory_identity
from a2a_acp_bridge.sweep import SweepReport
from tests.support.postgres import StateBackend
from tests.support.server import RunningBridge, make_settings, serve_bridge
from tests.support.tasks import start_sleeping
from tests.support.wire import answer_text, error_code, rpc, send

pytestmark = pytest.mark.anyio

HOUR_NS = 3600 * 10**9


async def sweep(bridge: RunningBridge, hours_ahead: float) -> SweepReport:
    persistence = bridge.app.state.persistence
    report: SweepReport = await persistence.sweeper.sweep_once(
        now_ns=time.time_ns() + int(hours_ahead * HOUR_NS)
    )
    assert await persistence.database.writer.flush()
    return report


def rows(tmp_path: Path, query: str) -> list[tuple[Any, ...]]:
    with sqlite3.connect(tmp_path / ".a2a-acp-bridge" / "state.db") as db:
        return db.execute(query).fetchall()


async def test_finished_tasks_older_than_the_ttl_are_deleted_with_their_push_configs(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, state_backend: StateBackend
) -> None:
    settings = make_settings(tmp_path, {"A2A_TASK_TTL": "1h", **state_backend.env})
    rows = functools.partial(state_backend.rows, settings.state_dir)
    async with serve_bridge(settings) as bridge, httpx.AsyncClient(timeout=30) as client:
        old = [await send(client, bridge.rpc_url, f"think {i}") for i in range(2)]
        config = {"taskId": old[0]["id"], "id": "c1", "url": "https://example.com/hook"}
        assert "result" in await rpc(
            client, bridge.rpc_url, "CreateTaskPushNotificationConfig", config
        )
        running = await start_sleeping(client, bridge)
        assert await sweep(bridge, 0.5) == SweepReport()  # not old enough yet
        with caplog.at_level(logging.INFO, logger="a2a_acp_bridge.sweep"):
            report = await sweep(bridge, 2)
        gone = [await rpc(client, bridge.rpc_url, "GetTask", {"id": t["id"]}) for t in old]
        still = await rpc(client, bridge.rpc_url, "GetTask", {"id": running["id"]})
        assert set(report.tasks) == {t["id"] for t in old}
        assert [error_code(reply) for reply in gone] == [-32001, -32001]
        assert still["result"]["status"]["state"] == "TASK_STATE_WORKING"
        assert await rows("select id from tasks") == [(running["id"],)]
        assert await rows("select count(*) from push_configs") == [(0,)]
    (line,) = [r for r in caplog.records if r.getMessage() == "swept"]
    assert line.tasks == 2  # type: ignore[attr-defined]
    assert set(line.task_ids) == {t["id"] for t in old}  # type: ignore[attr-defined]


async def test_the_retention_holds_in_the_database_and_across_a_restart(
    tmp_path: Path, state_backend: StateBackend
) -> None:
    settings = make_settings(tmp_path, {"A2A_TASK_RETENTION": "2", **state_backend.env})
    rows = functools.partial(state_backend.rows, settings.state_dir)
    async with serve_bridge(settings) as bridge, httpx.AsyncClient(timeout=30) as client:
        tasks = [await send(client, bridge.rpc_url, f"think {i}") for i in range(3)]
        assert await bridge.app.state.persistence.database.writer.flush()
        assert {r[0] for r in await rows("select id from tasks")} == {t["id"] for t in tasks[1:]}
    fewer = make_settings(tmp_path, {"A2A_TASK_RETENTION": "1", **state_backend.env})
    async with serve_bridge(fewer) as bridge, httpx.AsyncClient(timeout=30) as client:
        listed = await rpc(client, bridge.rpc_url, "ListTasks", {})
        assert [t["id"] for t in listed["result"]["tasks"]] == [tasks[2]["id"]]
        assert await bridge.app.state.persistence.database.writer.flush()
    assert await rows("select id from tasks") == [(tasks[2]["id"],)]


async def let_idle_adapters_go(bridge: RunningBridge) -> None:
    """Stop every idle adapter now (the idle reaper's job) and wait until each is stopped."""
    bridge.bridge._reap_idle(0.0)
    for conversation in list(bridge.bridge._conversations.values()):
        if conversation.retiring is not None:
            await conversation.retiring.wait()


async def test_a_conversation_unused_for_the_sandbox_ttl_loses_its_sandbox_and_record(
    tmp_path: Path, state_backend: StateBackend
) -> None:
    settings = make_settings(tmp_path, {"ACP_SANDBOX_TTL": "1h", **state_backend.env})
    async with serve_bridge(settings) as bridge, httpx.AsyncClient(timeout=30) as client:
        idle = await send(client, bridge.rpc_url, "write kept.txt: old work")
        busy = await start_sleeping(client, bridge)
        root = bridge.bridge.root_of(idle["contextId"])
        busy_root = bridge.bridge.root_of(busy["contextId"])
        assert root is not None
        assert busy_root is not None
        assert (root / "kept.txt").exists()
        home = bridge.bridge.homes.parent / root.name
        busy_home = bridge.bridge.homes.parent / busy_root.name
        assert home.is_dir()  # its adapter's own HOME (homes.py)
        await let_idle_adapters_go(bridge)
        assert await sweep(bridge, 0.5) == SweepReport()  # not unused long enough
        report = await sweep(bridge, 24 * 8)
        assert report.conversations == (idle["contextId"],)
        assert not root.exists()
        assert not home.exists()
        assert await state_backend.rows(
            settings.state_dir, "select context_id from conversations"
        ) == [(busy["contextId"],)]
        # The busy conversation (its task runs) keeps everything.
        assert busy_root.exists()
        assert busy_home.exists()
        # The context may be used again: it starts afresh, in a new directory.
        again = await send(client, bridge.rpc_url, "list\nrecall", context_id=idle["contextId"])
        assert "kept.txt" not in answer_text(again)
        assert "I remember no earlier message" in answer_text(again)
        assert bridge.bridge.root_of(idle["contextId"]) != root


async def test_a_handed_acp_cwd_is_never_removed_by_the_sweep(tmp_path: Path) -> None:
    handed = tmp_path / "project"
    handed.mkdir()
    (handed / "precious.txt").write_text("the operator's own file\n")
    settings = make_settings(tmp_path, {"ACP_CWD": str(handed), "ACP_SANDBOX_TTL": "1h"})
    async with serve_bridge(settings) as bridge, httpx.AsyncClient(timeout=30) as client:
        task = await send(client, bridge.rpc_url, "read precious.txt")
        assert task["status"]["state"] == "TASK_STATE_COMPLETED"
        await let_idle_adapters_go(bridge)
        report = await sweep(bridge, 24 * 8)
        assert report.conversations == (task["contextId"],)
        assert rows(tmp_path, "select count(*) from conversations") == [(0,)]
    assert (handed / "precious.txt").read_text() == "the operator's own file\n"
    assert sorted(p.name for p in handed.iterdir()) == [".demo-agent", "precious.txt"]


async def test_empty_directories_a_killed_bridge_left_are_swept_and_nothing_else(
    tmp_path: Path,
) -> None:
    settings = make_settings(tmp_path, {"ACP_SANDBOX_TTL": "1h"})
    parent = settings.sandbox_parent
    parent.mkdir(parents=True)
    empty, full = parent / "ctx-leftover", parent / "ctx-someone"
    empty.mkdir()
    full.mkdir()
    (full / "work.txt").write_text("not ours to judge\n")
    old = time.time() - 10 * 24 * 3600
    for path in (empty, full):
        os.utime(path, (old, old))
    async with serve_bridge(settings) as bridge:
        # The sweep's first pass runs at start; this one finds nothing more to do.
        assert await sweep(bridge, 0) == SweepReport()
    assert not empty.exists()
    assert (full / "work.txt").exists()


async def test_conversations_refused_before_their_adapter_started_leave_no_directory(
    tmp_path: Path,
) -> None:
    settings = make_settings(tmp_path, {"ACP_MAX_SESSIONS": "1", "ACP_ADMISSION_TIMEOUT_MS": "0"})
    async with serve_bridge(settings) as bridge, httpx.AsyncClient(timeout=30) as client:
        busy = await start_sleeping(client, bridge)
        refused = [await send(client, bridge.rpc_url, f"think {i}") for i in range(5)]
        assert {t["status"]["state"] for t in refused} == {"TASK_STATE_REJECTED"}
        busy_root = bridge.bridge.root_of(busy["contextId"])
        assert busy_root is not None
        assert list(settings.sandbox_parent.iterdir()) == [busy_root]
        assert await bridge.app.state.persistence.database.writer.flush()
        assert rows(tmp_path, "select context_id from conversations") == [(busy["contextId"],)]


# Roots a tampered (or corrupted) conversations row may hold: none names a sandbox, and a
# HOME named after them would be every HOME ("/", "") or the state directory ("/x/..").
TAMPERED_ROOTS = ("/", "", "/x/..", ".", "..")


async def test_a_tampered_conversation_row_removes_no_home_nor_the_state_directory(
    tmp_path: Path,
) -> None:
    async with serve_bridge(make_settings(tmp_path)) as bridge, httpx.AsyncClient() as client:
        kept = await send(client, bridge.rpc_url, "write kept.txt: still mine")
        root = bridge.bridge.root_of(kept["contextId"])
        assert root is not None
        home = bridge.bridge.homes.parent / root.name
        other = await send(client, bridge.rpc_url, "write old.txt: let go")
        other_root = bridge.bridge.root_of(other["contextId"])
        assert other_root is not None
    assert home.is_dir()
    identity = directory_identity(other_root)
    assert identity is not None
    with sqlite3.connect(tmp_path / ".a2a-acp-bridge" / "state.db") as db:
        db.executemany(
            "insert into conversations (context_id, principal, root, identity, owned, agent,"
            " session_id, created_ns, last_used_ns) values (?, 'default', ?, ?, 1, 'x', null,"
            " 0, 0)",
            [(f"tampered-{i}", r, "1:2:3") for i, r in enumerate(TAMPERED_ROOTS)],
        )
        # The very sandbox made, spelled so that its last part is "..": trusted (it is that
        # directory), but the HOME it would name is the state directory itself.
        db.execute(
            "update conversations set root = ?, identity = ?, last_used_ns = 0"
            " where context_id = ?",
            (
                str(other_root / ".demo-agent" / ".."),
                ":".join(str(part) for part in identity),
                other["contextId"],
            ),
        )
    settings = make_settings(tmp_path, {"ACP_SANDBOX_TTL": "1h"})
    async with serve_bridge(settings) as bridge:
        await sweep(bridge, 0)  # the pass at start swept them already: nothing is left
        assert rows(tmp_path, "select context_id from conversations") == [(kept["contextId"],)]
    assert (root / "kept.txt").exists()
    assert home.is_dir()
    assert (settings.state_dir / "state.db").exists()
    # Its own sandbox was emptied: the very directory made (rmtree of the path as spelled
    # leaves the emptied directory, which the sweep removes once it is old).
    assert list(other_root.iterdir()) == []
