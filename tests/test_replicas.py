"""Several replicas on one PostgreSQL state (docs/scaling.md): any replica answers GetTask,
ListTasks and CancelTask for a task another one runs; a replica killed with SIGKILL has its
running tasks ended FAILED by another one within the lease TTL and a second, and leaves no
task non-terminal and no adapter behind on the others.

Real bridges on 127.0.0.1 (in this process, or real `serve` processes for the kill), the
demo agent, a real PostgreSQL (tests/support/postgres.py)."""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import signal
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import asyncpg
import httpx
import pytest
from a2a.server.context import ServerCallContext
from a2a.types.a2a_pb2 import TaskPushNotificationConfig
from cryptography.fernet import Fernet, MultiFernet

from a2a_acp_bridge.a2a.orphans import REPLICA_STOPPED
from a2a_acp_bridge.a2a.ownership import REDACTED, StoredOwner, owner_context
from a2a_acp_bridge.a2a.push import V03, VERSION_STATE
from a2a_acp_bridge.schema import DEFAULT_PRINCIPAL
from tests.support.agents import AGENTS_DIR, agent_io, scripted_agent
from tests.support.bridge_process import BridgeProcess
from tests.support.postgres import PostgresCluster, fetch_rows
from tests.support.server import RunningBridge, make_settings, serve_bridge
from tests.support.tasks import start_sleeping
from tests.support.webhook import serve_webhook
from tests.support.wire import rpc, send, state_of, stream, submit, user_message
from tests.test_sweep import sweep

pytestmark = pytest.mark.anyio

# A push key every replica shares (their configs are read by each other).
PUSH_KEY = base64.urlsafe_b64encode(b"k" * 32).decode()
# How long a test waits for the agent to have its prompt, or a state to reach a replica.
PROMPT_SEEN_S = 30.0
STATE_SEEN_S = 30.0
LEASE_TTL_MS = 2000
# A cancel through another replica is answered once the owner cancelled (about 0.1 s
# measured); the bound only keeps a lost signal from hanging the test.
CANCEL_ANSWERED_S = 10.0
# Replicas full with one busy adapter each, refusing at once when every one is.
ONE_ADAPTER_EACH = {
    "ACP_MAX_SESSIONS": "1",
    "ACP_ADMISSION_TIMEOUT_MS": "0",
    "A2A_LEASE_TTL_MS": str(LEASE_TTL_MS),
}


@contextlib.asynccontextmanager
async def replicas(
    tmp_path: Path, url: str, count: int, env: dict[str, str] | None = None
) -> AsyncIterator[list[RunningBridge]]:
    async with contextlib.AsyncExitStack() as stack:
        started = []
        for i in range(count):
            settings = make_settings(
                tmp_path / f"r{i}",
                {"A2A_DATABASE_URL": url, "A2A_PUSH_KEY": PUSH_KEY, **(env or {})},
            )
            started.append(await stack.enter_async_context(serve_bridge(settings)))
        yield started


async def state_on(client: httpx.AsyncClient, url: str, task_id: str) -> str:
    reply = await rpc(client, url, "GetTask", {"id": task_id})
    return str(reply["result"]["status"]["state"])


async def wait_for_state(client: httpx.AsyncClient, url: str, task_id: str, state: str) -> None:
    """Unbounded here: each caller bounds it with its own deadline."""
    while True:
        if await state_on(client, url, task_id) == state:
            return
        await anyio.sleep(0.05)  # polled: another process's write to the database


async def test_any_replica_answers_get_list_and_cancel_for_a_task_another_runs(
    tmp_path: Path,
    postgres: PostgresCluster,
    postgres_database: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    url = postgres.url(postgres_database)
    async with (
        replicas(tmp_path, url, 2) as (first, second),
        httpx.AsyncClient(timeout=30) as client,
    ):
        done = await send(client, first.rpc_url, "think finished on the first")
        running = await start_sleeping(client, first)
        # The second never saw either: it reads them from the database.
        assert (await rpc(client, second.rpc_url, "GetTask", {"id": done["id"]}))["result"] == done
        assert await state_on(client, second.rpc_url, running["id"]) == "TASK_STATE_WORKING"
        listed = await rpc(client, second.rpc_url, "ListTasks", {})
        assert {t["id"] for t in listed["result"]["tasks"]} == {done["id"], running["id"]}
        # Its own tasks beside the other's.
        own = await send(client, second.rpc_url, "think on the second")
        listed = await rpc(client, first.rpc_url, "ListTasks", {})
        assert {t["id"] for t in listed["result"]["tasks"]} == {
            done["id"],
            running["id"],
            own["id"],
        }
        unknown = await rpc(client, second.rpc_url, "GetTask", {"id": "no-such-task"})
        assert unknown["error"]["code"] == -32001
        # Push configs: made on one replica, read and deleted on the other.
        config = {"taskId": running["id"], "id": "c1", "url": "https://example.com/hook"}
        assert "result" in await rpc(
            client, first.rpc_url, "CreateTaskPushNotificationConfig", config
        )
        listed_configs = await rpc(
            client, second.rpc_url, "ListTaskPushNotificationConfigs", {"taskId": running["id"]}
        )
        assert [c["id"] for c in listed_configs["result"]["configs"]] == ["c1"]
        got = await rpc(
            client,
            second.rpc_url,
            "GetTaskPushNotificationConfig",
            {"taskId": running["id"], "id": "c1"},
        )
        assert got["result"]["url"] == "https://example.com/hook"
        assert "result" in await rpc(
            client,
            second.rpc_url,
            "DeleteTaskPushNotificationConfig",
            {"taskId": running["id"], "id": "c1"},
        )
        after = await rpc(
            client, first.rpc_url, "ListTaskPushNotificationConfigs", {"taskId": running["id"]}
        )
        assert after["result"].get("configs", []) == []
        # Cancelled through the replica that does not run it: the owner tells its agent.
        with caplog.at_level(logging.DEBUG, logger="a2a_acp_bridge.acp.transport"):
            started = time.monotonic()
            with anyio.fail_after(CANCEL_ANSWERED_S):
                cancelled = await rpc(client, second.rpc_url, "CancelTask", {"id": running["id"]})
            took = time.monotonic() - started
        assert cancelled["result"]["status"]["state"] == "TASK_STATE_CANCELED"
        assert await state_on(client, first.rpc_url, running["id"]) == "TASK_STATE_CANCELED"
        frames = [str(getattr(r, "frame", "")) for r in caplog.records]
        assert any("session/cancel" in frame for frame in frames)
        print(f"cancel through another replica answered in {took * 1000:.0f} ms")
        again = await rpc(client, second.rpc_url, "CancelTask", {"id": running["id"]})
        assert again["error"]["code"] == -32002  # not cancelable: it has ended


@pytest.fixture
async def processes() -> AsyncIterator[list[BridgeProcess]]:
    started: list[BridgeProcess] = []
    try:
        yield started
    finally:
        for process in started:
            process.close()


def replica_env(tmp_path: Path, url: str) -> dict[str, str]:
    # Sandboxes and state (the adapters' homes) on storage every replica shares: a
    # conversation goes on, its memory loaded, on whichever replica takes it next.
    return {
        "A2A_DATABASE_URL": url,
        "A2A_PUSH_KEY": PUSH_KEY,
        "A2A_LEASE_TTL_MS": str(LEASE_TTL_MS),
        "ACP_SANDBOX_DIR": str(tmp_path / "shared" / "sandboxes"),
        "ACP_STATE_DIR": str(tmp_path / "shared" / "state"),
    }


def prompted(sandboxes: Path, text: str) -> bool:
    return any(
        f'"text": "{text}"' in path.read_text() for path in sandboxes.glob("*/.demo-agent/*.jsonl")
    )


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


async def test_a_replica_killed_mid_task_has_its_task_failed_and_its_conversation_goes_on(
    tmp_path: Path,
    postgres: PostgresCluster,
    postgres_database: str,
    processes: list[BridgeProcess],
) -> None:
    url = postgres.url(postgres_database)
    env = replica_env(tmp_path, url)
    for i in range(3):
        workdir = tmp_path / f"r{i}"
        workdir.mkdir()
        processes.append(await BridgeProcess(workdir, env, f"r{i}").start())
    doomed, *survivors = processes
    sandboxes = Path(env["ACP_SANDBOX_DIR"])
    async with httpx.AsyncClient(timeout=30) as client:
        first = await send(client, doomed.rpc_url, "write notes.txt: kept across replicas")
        context = first["contextId"]
        running = await submit(client, doomed.rpc_url, "sleep 600", context_id=context)
        with anyio.fail_after(PROMPT_SEEN_S):
            while not prompted(sandboxes, "sleep 600"):  # noqa: ASYNC110 - the agent's file
                await anyio.sleep(0.02)
        # Seen from another replica at once (its WORKING follows within a batch).
        assert await state_on(client, survivors[0].rpc_url, running["id"]) in {
            "TASK_STATE_SUBMITTED",
            "TASK_STATE_WORKING",
        }
        killed_at = time.monotonic()
        assert await doomed.stop(signal.SIGKILL) == -signal.SIGKILL
        # Within the lease TTL and a second (issue 16), another replica has ended it.
        with anyio.fail_after(LEASE_TTL_MS / 1000 + 1.0):
            await wait_for_state(client, survivors[0].rpc_url, running["id"], "TASK_STATE_FAILED")
        ended_after = time.monotonic() - killed_at
        failed = await rpc(client, survivors[1].rpc_url, "GetTask", {"id": running["id"]})
        assert failed["result"]["status"]["message"]["parts"][0]["text"] == REPLICA_STOPPED
        # The conversation goes on on another replica, in its sandbox, its memory loaded.
        again = await send(
            client, survivors[1].rpc_url, "read notes.txt\nrecall", context_id=context
        )
        assert again["status"]["state"] == "TASK_STATE_COMPLETED"
        text = str(again["artifacts"])
        assert "kept across replicas" in text
        assert "write notes.txt" in text  # the demo agent recalls the earlier prompt
        # Nothing is left non-terminal, on any replica.
        states = await fetch_rows(postgres.dsn(postgres_database), "select state from tasks")
        assert {s for (s,) in states} <= {"TASK_STATE_COMPLETED", "TASK_STATE_FAILED"}
        for survivor in survivors:
            assert await survivor.stop(signal.SIGTERM) == 0
    # No adapter left behind by the replicas that stopped cleanly.
    for survivor in survivors:
        pids = [int(e["pid"]) for e in survivor.events("adapter spawned")]
        assert not [pid for pid in pids if alive(pid)]
    assert ended_after <= LEASE_TTL_MS / 1000 + 1.0
    rows = await fetch_rows(postgres.dsn(postgres_database), "select id from replicas")
    assert rows == []  # the survivors left; the dead one was removed when found dead


async def test_a_subscriber_on_a_third_replica_sees_every_event_in_order_from_the_start(
    tmp_path: Path, postgres: PostgresCluster, postgres_database: str
) -> None:
    url = postgres.url(postgres_database)
    async with (
        replicas(tmp_path, url, 3) as (owner, _other, third),
        httpx.AsyncClient(timeout=30) as client,
    ):
        task = await submit(client, owner.rpc_url, "think the very first thought\nsleep 600")
        task_id = task["id"]
        with anyio.fail_after(STATE_SEEN_S):
            # The thought reached the database (the prompt holds the words too: not them).
            while "Thinking: the very first thought" not in str(  # noqa: ASYNC110 - a batch
                (await rpc(client, third.rpc_url, "GetTask", {"id": task_id}))["result"]
            ):
                await anyio.sleep(0.05)
        events: list[dict[str, Any]] = []

        async def follow() -> None:
            async for event in stream(
                client, third.rpc_url, {"id": task_id}, method="SubscribeToTask"
            ):
                events.append(event)

        # The stream ends by itself on the terminal event; the bound only catches a hang.
        with anyio.fail_after(STATE_SEEN_S):
            async with anyio.create_task_group() as group:
                group.start_soon(follow)
                while len(events) < 2:  # noqa: ASYNC110 - the stored task, then the replay
                    await anyio.sleep(0.02)
                cancelled = await rpc(client, owner.rpc_url, "CancelTask", {"id": task_id})
                assert cancelled["result"]["status"]["state"] == "TASK_STATE_CANCELED"
    assert events[0]["task"]["id"] == task_id  # the stored task first (the SDK's rule)
    replayed = [json.dumps(e) for e in events[1:]]
    # From the task's start: its first event (the task as submitted), the thought, in order.
    assert "task" in events[1]
    assert events[1]["task"]["status"]["state"] == "TASK_STATE_SUBMITTED"
    thought = next(i for i, e in enumerate(replayed) if "Thinking: the very first thought" in e)
    working = next(i for i, e in enumerate(replayed) if '"TASK_STATE_WORKING"' in e)
    assert working < thought
    assert state_of(events[-1]) == "TASK_STATE_CANCELED"
    assert [state_of(e) for e in events[1:-1]].count("TASK_STATE_CANCELED") == 0


async def test_a_conversation_s_messages_sent_round_robin_all_run_on_its_one_adapter_in_order(
    tmp_path: Path, postgres: PostgresCluster, postgres_database: str
) -> None:
    url = postgres.url(postgres_database)
    async with (
        replicas(tmp_path, url, 3) as running,
        httpx.AsyncClient(timeout=30) as client,
    ):
        first = await send(client, running[0].rpc_url, "write a.txt: from the first message")
        context = first["contextId"]
        answers = [first]
        for i, replica in enumerate([running[1], running[2], running[0], running[1]]):
            answers.append(
                await send(client, replica.rpc_url, f"think turn {i}", context_id=context)
            )
        # Streamed through a replica that does not run it: every event, to the end.
        events = [
            event
            async for event in stream(
                client,
                running[2].rpc_url,
                {"message": user_message("read a.txt\nrecall", context_id=context)},
            )
        ]
    assert [a["status"]["state"] for a in answers] == ["TASK_STATE_COMPLETED"] * 5
    assert state_of(events[-1]) == "TASK_STATE_COMPLETED"
    streamed = json.dumps(events)
    assert "from the first message" in streamed
    # One adapter, on the replica that took the conversation first; its memory in order.
    assert running[0].bridge.root_of(context) is not None
    assert running[1].bridge.root_of(context) is None
    assert running[2].bridge.root_of(context) is None
    recalled = streamed[streamed.index("I remember") :]
    positions = [recalled.index(f"think turn {i}") for i in range(4)]
    assert positions == sorted(positions)


async def live_reported(dsn: str, expected: list[int], column: str = "live") -> None:
    """Until the replicas' heartbeats report these adapter counts (sorted): live adapters,
    or with `column="busy"` those in a turn."""
    while True:
        rows = await fetch_rows(dsn, f"select {column} from replicas")
        if sorted(int(count) for (count,) in rows) == expected:
            return
        await anyio.sleep(0.05)  # polled: the heartbeats, written every TTL / 3


async def test_a_full_replica_passes_a_new_conversation_to_one_with_room_and_rejects_when_all_are(
    tmp_path: Path, postgres: PostgresCluster, postgres_database: str
) -> None:
    url = postgres.url(postgres_database)
    dsn = postgres.dsn(postgres_database)
    async with (
        replicas(tmp_path, url, 3, ONE_ADAPTER_EACH) as running,
        httpx.AsyncClient(timeout=30) as client,
    ):
        busy = [await start_sleeping(client, running[0])]
        with anyio.fail_after(STATE_SEEN_S):
            await live_reported(dsn, [0, 0, 1])
        # The first is full: the new conversation runs on another replica, answered here.
        placed = await send(client, running[0].rpc_url, "think placed elsewhere")
        assert placed["status"]["state"] == "TASK_STATE_COMPLETED"
        assert running[0].bridge.root_of(placed["contextId"]) is None
        hosts = [r for r in running[1:] if r.bridge.root_of(placed["contextId"]) is not None]
        assert len(hosts) == 1
        # Fill the other two, then every replica is full: REJECTED.
        for replica in running[1:]:
            await let_idle_go(replica)
            busy.append(await start_sleeping(client, replica))
        with anyio.fail_after(STATE_SEEN_S):
            await live_reported(dsn, [1, 1, 1])
        refused = await send(client, running[0].rpc_url, "think nowhere to go")
        assert refused["status"]["state"] == "TASK_STATE_REJECTED"
        for task in busy:
            assert await state_on(client, running[0].rpc_url, task["id"]) == "TASK_STATE_WORKING"


async def test_a_replica_whose_adapters_are_all_idle_has_room_for_another_s_new_conversation(
    tmp_path: Path, postgres: PostgresCluster, postgres_database: str
) -> None:
    # Full of live adapters is not full: an idle one gives way to a new conversation, there
    # as here, so placement counts the busy ones.
    url = postgres.url(postgres_database)
    dsn = postgres.dsn(postgres_database)
    async with (
        replicas(tmp_path, url, 3, ONE_ADAPTER_EACH) as (receiver, idle, busy),
        httpx.AsyncClient(timeout=30) as client,
    ):
        sleeping = [await start_sleeping(client, busy)]
        finished = await send(client, idle.rpc_url, "think and then rest")
        sleeping.append(await start_sleeping(client, receiver))
        with anyio.fail_after(STATE_SEEN_S):
            await live_reported(dsn, [1, 1, 1])
            await live_reported(dsn, [0, 1, 1], column="busy")
        placed = await send(client, receiver.rpc_url, "think placed where one was idle")
        assert placed["status"]["state"] == "TASK_STATE_COMPLETED"
        assert idle.bridge.root_of(placed["contextId"]) is not None
        assert receiver.bridge.root_of(placed["contextId"]) is None
        assert finished["status"]["state"] == "TASK_STATE_COMPLETED"
        for task in sleeping:
            assert await state_on(client, busy.rpc_url, task["id"]) == "TASK_STATE_WORKING"


async def let_idle_go(replica: RunningBridge) -> None:
    """Stop its idle adapters now (the idle reaper's job), so a new one has room."""
    replica.bridge._reap_idle(0.0)
    for conversation in list(replica.bridge._conversations.values()):
        if conversation.retiring is not None:
            await conversation.retiring.wait()


QUESTION = {
    "by_prompt": {
        "one field": [
            {"op": "say", "text": "let me ask\n"},
            {"op": "ask", "message": "Which file should I edit?"},
            {"op": "say", "text": "thanks\n"},
        ]
    }
}


async def test_an_answer_streamed_through_another_replica_begins_with_the_task(
    tmp_path: Path, postgres: PostgresCluster, postgres_database: str
) -> None:
    # A stream MUST begin with the Task (spec 1.0, 3.1.2), whichever replica runs it.
    agent = scripted_agent(tmp_path, QUESTION)
    env = {
        "ACP_AGENT": agent,
        "ACP_ISOLATION_WRITE": str(agent_io(tmp_path)),
        "ACP_ISOLATION_READ": str(AGENTS_DIR),
    }
    url = postgres.url(postgres_database)
    async with (
        replicas(tmp_path, url, 2, env) as (holder, other),
        httpx.AsyncClient(timeout=30) as client,
    ):
        asked = [
            e async for e in stream(client, holder.rpc_url, {"message": user_message("one field")})
        ]
        task_id = asked[0]["task"]["id"]
        answer = user_message("main.py", task_id=task_id, context_id=asked[0]["task"]["contextId"])
        answered = [e async for e in stream(client, other.rpc_url, {"message": answer})]
    assert state_of(asked[-1]) == "TASK_STATE_INPUT_REQUIRED"
    assert answered[0]["task"]["id"] == task_id
    assert state_of(answered[-1]) == "TASK_STATE_COMPLETED"
    assert "thanks" in json.dumps(answered)


async def test_a_hand_over_its_dead_receiver_left_is_removed_by_the_reaper(
    tmp_path: Path, postgres: PostgresCluster, postgres_database: str
) -> None:
    dsn = postgres.dsn(postgres_database)
    async with replicas(tmp_path, postgres.url(postgres_database), 1):
        now_ns = time.time_ns()
        db = await asyncpg.connect(dsn)
        try:
            for handover_id, created_ns in (("left", now_ns - 3600 * 10**9), ("fresh", now_ns)):
                await db.execute(
                    "insert into handovers (id, replica, owner, request, created_ns)"
                    " values ($1, 'gone-replica', 'default', $2, $3)",
                    handover_id,
                    b"a request",
                    created_ns,
                )
        finally:
            await db.close()
        with anyio.fail_after(STATE_SEEN_S):
            while await fetch_rows(dsn, "select id from handovers where id = 'left'"):  # noqa: ASYNC110
                await anyio.sleep(0.1)  # polled: the reaper runs every REAP_EVERY_S
        kept = await fetch_rows(dsn, "select id from handovers")
    assert kept == [("fresh",)]


async def test_a_0_3_callers_message_handed_over_keeps_its_webhook_in_0_3(
    tmp_path: Path, postgres: PostgresCluster, postgres_database: str
) -> None:
    # The holder runs the message for the receiver's caller: as that caller, in its version.
    env = {"A2A_PUSH_ALLOW_PRIVATE": "true"}
    url = postgres.url(postgres_database)
    async with (
        replicas(tmp_path, url, 2, env) as (holder, other),
        serve_webhook() as hook,
        httpx.AsyncClient(timeout=30) as client,
    ):
        first = await send(client, holder.rpc_url, "think first, on its holder")
        message = {
            "kind": "message",
            "messageId": "m-handed-03",
            "role": "user",
            "contextId": first["contextId"],
            "parts": [{"kind": "text", "text": "think handed over"}],
        }
        body = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "message/send",
            "params": {
                "message": message,
                "configuration": {"pushNotificationConfig": {"url": hook.url, "token": "t03"}},
            },
        }
        # No A2A-Version header: a 0.3 request, to the replica that does not hold it.
        reply = (await client.post(other.rpc_url, json=body)).json()
        deliveries = await hook.wait_for_state("completed")
    task = reply["result"]
    assert task["kind"] == "task"
    assert holder.bridge.root_of(first["contextId"]) is not None  # run by the holder
    bodies = [d.body for d in deliveries]
    assert bodies
    assert all(b["kind"] == "task" and b["id"] == task["id"] for b in bodies)


def sharing_one_volume(tmp_path: Path, url: str, env: dict[str, str]) -> dict[str, str]:
    """Replicas on one volume (docs/scaling.md, "memory kept"): the sandboxes and the
    state directory (the adapter HOMEs) are the same directories for each."""
    shared = tmp_path / "volume"
    return {
        "A2A_DATABASE_URL": url,
        "A2A_PUSH_KEY": PUSH_KEY,
        "ACP_SANDBOX_DIR": str(shared / "sandboxes"),
        "ACP_STATE_DIR": str(shared / "state"),
        **env,
    }


async def test_a_replica_s_sweep_leaves_what_another_runs_and_sweeps_the_unused_once(
    tmp_path: Path, postgres: PostgresCluster, postgres_database: str
) -> None:
    env = sharing_one_volume(tmp_path, postgres.url(postgres_database), {"ACP_SANDBOX_TTL": "1h"})
    dsn = postgres.dsn(postgres_database)
    async with contextlib.AsyncExitStack() as stack, httpx.AsyncClient(timeout=30) as client:
        first = await stack.enter_async_context(serve_bridge(make_settings(tmp_path / "r0", env)))
        kept = await send(client, first.rpc_url, "write kept.txt: the first's work")
        kept_id = kept["contextId"]
        root = first.bridge.root_of(kept_id)
        assert root is not None
        home = first.bridge.homes.parent / root.name
        assert await first.app.state.persistence.database.writer.flush()
        # Started after it, the second loads the first's conversation with the others.
        second = await stack.enter_async_context(serve_bridge(make_settings(tmp_path / "r1", env)))
        book = second.app.state.persistence.book
        stale = book.get(kept_id)
        assert stale is not None
        unused = await send(client, second.rpc_url, "write old.txt: nobody's any more")
        unused_root = second.bridge.root_of(unused["contextId"])
        assert unused_root is not None
        # The first uses its conversation again; the second's copy is older now.
        again = await send(client, first.rpc_url, "think again", context_id=kept_id)
        assert again["status"]["state"] == "TASK_STATE_COMPLETED"
        assert await first.app.state.persistence.database.writer.flush()
        for replica in (first, second):
            await let_idle_go(replica)
        # What the database says decides, not the second's copy.
        assert not await book.forget_unused(kept_id, stale.last_used_ns + 1)
        # A week on: the second leaves the conversation the first holds, and sweeps its own.
        report = await sweep(second, 24 * 8)
        assert report.conversations == (unused["contextId"],)
        assert (root / "kept.txt").exists()
        assert home.is_dir()
        assert not unused_root.exists()
        assert await fetch_rows(dsn, "select context_id from conversations") == [(kept_id,)]
        # Swept once: the first finds only its own.
        report = await sweep(first, 24 * 8)
        assert report.conversations == (kept_id,)
        assert not root.exists()
        assert not home.exists()
        assert await fetch_rows(dsn, "select context_id from conversations") == []
        # The second's copy goes once it reads that the row went.
        assert await book.fetch(kept_id) is None
        assert book.get(kept_id) is None
        assert (await sweep(second, 24 * 8)).conversations == ()


def stored_push_config(rows: list[tuple[Any, ...]]) -> TaskPushNotificationConfig:
    """The one stored config, decrypted as a replica would."""
    ((body,),) = rows
    config = TaskPushNotificationConfig()
    config.ParseFromString(MultiFernet([Fernet(PUSH_KEY)]).decrypt(body))
    return config


async def test_a_push_config_set_again_on_another_replica_keeps_the_secret_stored_on_the_first(
    tmp_path: Path, postgres: PostgresCluster, postgres_database: str
) -> None:
    dsn = postgres.dsn(postgres_database)
    env = {"A2A_PUSH_ALLOW_PRIVATE": "true"}
    async with (
        serve_webhook() as hook,
        replicas(tmp_path, postgres.url(postgres_database), 2, env) as (first, second),
        httpx.AsyncClient(timeout=30) as client,
    ):
        running = await start_sleeping(client, first)
        config = {"taskId": running["id"], "id": "c1", "url": hook.url, "token": "real-secret"}
        created = await rpc(client, first.rpc_url, "CreateTaskPushNotificationConfig", config)
        assert created["result"]["token"] == REDACTED
        # Edited on the second as it was read back: its secret as the caller sees it.
        edited = {**created["result"], "url": hook.url + "?edited"}
        assert "result" in await rpc(
            client, second.rpc_url, "CreateTaskPushNotificationConfig", edited
        )
        query = f"select body from push_configs where task_id = '{running['id']}'"
        stored = stored_push_config(await fetch_rows(dsn, query))
        assert stored.token == "real-secret"
        assert stored.url == hook.url + "?edited"
        # The replica running the task reads the config again, and pushes with its secret.
        listed = await rpc(
            client, first.rpc_url, "ListTaskPushNotificationConfigs", {"taskId": running["id"]}
        )
        assert [c["url"] for c in listed["result"]["configs"]] == [hook.url + "?edited"]
        await rpc(client, first.rpc_url, "CancelTask", {"id": running["id"]})
        deliveries = await hook.wait_for_state("TASK_STATE_CANCELED")
    assert {d.headers.get("x-a2a-notification-token") for d in deliveries} == {"real-secret"}


async def test_a_config_registered_over_0_3_and_again_over_1_0_elsewhere_gets_1_0_payloads(
    tmp_path: Path, postgres: PostgresCluster, postgres_database: str
) -> None:
    async with (
        replicas(tmp_path, postgres.url(postgres_database), 2) as (first, second),
        httpx.AsyncClient(timeout=30) as client,
    ):
        running = await start_sleeping(client, first)
        stores = [r.app.state.persistence.push_configs for r in (first, second)]
        config = TaskPushNotificationConfig(
            task_id=running["id"], id="c1", url="https://example.com/hook"
        )
        over_v03 = ServerCallContext(
            user=StoredOwner(DEFAULT_PRINCIPAL), state={VERSION_STATE: V03}
        )
        await stores[0].set_info(running["id"], config, over_v03)
        assert stores[0].registered_v03(running["id"], config)
        await stores[1].set_info(running["id"], config, owner_context(DEFAULT_PRINCIPAL))
        # The first reads the task's configs again (as before a delivery): 1.0 now.
        assert len(await stores[0].get_info(running["id"], owner_context(DEFAULT_PRINCIPAL))) == 1
        still_v03 = stores[0].registered_v03(running["id"], config)
        await rpc(client, first.rpc_url, "CancelTask", {"id": running["id"]})
    assert not still_v03
