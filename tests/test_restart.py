"""A restart loses no task, no conversation: real bridge processes, real signals, one
state directory (a real SQLite file) shared by the process before and the one after.

N tasks run and M are finished when the bridge is stopped (SIGKILL, then SIGTERM); after
the restart every task is terminal, the finished ones answer GetTask byte for byte as
before, and the next message of each conversation runs in its old sandbox, sees its old
files, and finds the demo agent's session loaded (it recalls the earlier messages); no
prompt reached the agent twice and no sandbox was lost.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import stat
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from a2a.types.a2a_pb2 import Task

from a2a_acp_bridge.a2a.ownership import REDACTED
from tests.support.agents import scripted_agent
from tests.support.bridge_process import BridgeProcess
from tests.support.webhook import serve_webhook
from tests.support.wire import (
    A2A_HEADERS,
    TERMINAL,
    answer_text,
    rpc,
    send,
    status_text,
    user_message,
)

pytestmark = pytest.mark.anyio

FINISHED = 3
RUNNING = 2
RESTARTED = "The bridge restarted while this task was running."
SHUTTING_DOWN = "Cancelled: the bridge is shutting down."
# How long a test waits for the agent to have received a prompt (another process's file).
PROMPT_SEEN_S = 30.0
# Bound on the wait for a streamed chunk to reach the database (it goes with the next
# batch, WRITE_BEHIND_S = 0.5 s later; the bound only keeps a broken writer from hanging).
BATCH_WRITTEN_S = 10.0


def sleeping(i: int) -> str:
    return f"think task {i}\nsleep 600"


def environment(tmp_path: Path) -> dict[str, str]:
    return {
        "ACP_SANDBOX_DIR": str(tmp_path / "sandboxes"),
        "ACP_STATE_DIR": str(tmp_path / "state"),
        "A2A_PUSH_ALLOW_PRIVATE": "true",
    }


@pytest.fixture
async def processes(tmp_path: Path) -> AsyncIterator[list[BridgeProcess]]:
    started: list[BridgeProcess] = []
    try:
        yield started
    finally:
        for process in started:
            process.close()


async def raw_call(client: httpx.AsyncClient, url: str, method: str, params: dict[str, Any]) -> str:
    """One JSON-RPC call with a fixed id: the whole response, to compare across restarts.
    Canonical JSON (sorted keys): a data part is a protobuf Struct, a map whose key order
    protobuf does not keep, so only the order of its keys may differ on the wire."""
    body = {"jsonrpc": "2.0", "id": "same", "method": method, "params": params}
    response = await client.post(url, json=body, headers=A2A_HEADERS)
    assert response.status_code == 200
    return json.dumps(response.json(), sort_keys=True)


def transcripts(sandboxes: Path) -> list[Path]:
    return sorted(sandboxes.glob("*/.demo-agent/*.jsonl"))


def prompts_seen(sandboxes: Path, text: str) -> int:
    """How many times the demo agents were prompted with `text` (their transcripts)."""
    return sum(
        1
        for path in transcripts(sandboxes)
        for line in path.read_text().splitlines()
        if json.loads(line) == {"role": "user", "text": text}
    )


async def wait_for_prompts(sandboxes: Path, text: str, count: int) -> None:
    with anyio.fail_after(PROMPT_SEEN_S):
        while prompts_seen(sandboxes, text) < count:  # noqa: ASYNC110 - the agents' files
            await anyio.sleep(0.02)


def sandbox_of(process: BridgeProcess, context_id: str) -> list[str]:
    """Every cwd the bridge opened a session in for this context (from its log)."""
    return [
        str(entry["cwd"])
        for entry in process.events("session opened")
        if entry.get("context_id") == context_id
    ]


def stored_states(state_dir: Path) -> dict[str, str]:
    with sqlite3.connect(state_dir / "state.db") as db:
        return dict(db.execute("select id, state from tasks").fetchall())


async def run_then_stop(
    tmp_path: Path, processes: list[BridgeProcess], stop: signal.Signals
) -> dict[str, Any]:
    """The first bridge: M finished tasks, N running ones, then the signal."""
    first = await BridgeProcess(tmp_path, environment(tmp_path), "first").start()
    processes.append(first)
    sandboxes = tmp_path / "sandboxes"
    finished: list[dict[str, Any]] = []
    running: list[dict[str, Any]] = []
    async with httpx.AsyncClient(timeout=60) as client:
        for i in range(FINISHED):
            task = await send(client, first.rpc_url, f"write note{i}.txt: kept {i}")
            assert task["status"]["state"] == "TASK_STATE_COMPLETED"
            finished.append(task)
        for i in range(RUNNING):
            message = {
                "messageId": uuid.uuid4().hex,
                "role": "ROLE_USER",
                "parts": [{"text": sleeping(i)}],
            }
            reply = await rpc(
                client,
                first.rpc_url,
                "SendMessage",
                {"message": message, "configuration": {"returnImmediately": True}},
            )
            running.append(reply["result"]["task"])
        for i in range(RUNNING):
            await wait_for_prompts(sandboxes, sleeping(i), 1)
        before = {
            t["id"]: await raw_call(client, first.rpc_url, "GetTask", {"id": t["id"]})
            for t in finished
        }
        subscribed = {
            t["id"]: await raw_call(client, first.rpc_url, "SubscribeToTask", {"id": t["id"]})
            for t in finished
        }
    directories = {p.name for p in sandboxes.iterdir()}
    code = await first.stop(stop)
    return {
        "first": first,
        "finished": finished,
        "running": running,
        "before": before,
        "subscribed": subscribed,
        "directories": directories,
        "code": code,
    }


async def check_the_restart(
    tmp_path: Path, processes: list[BridgeProcess], run: dict[str, Any], ended_with: str
) -> None:
    sandboxes = tmp_path / "sandboxes"
    first: BridgeProcess = run["first"]
    second = await BridgeProcess(tmp_path, environment(tmp_path), "second").start()
    processes.append(second)
    async with httpx.AsyncClient(timeout=60) as client:
        # Every task is terminal: the running ones ended with the reason, nothing re-run.
        for task in run["running"]:
            got = (await rpc(client, second.rpc_url, "GetTask", {"id": task["id"]}))["result"]
            assert got["status"]["state"] in TERMINAL
            assert status_text(got["status"]) == ended_with
        # The finished ones are served exactly as before the restart.
        for task in run["finished"]:
            after = await raw_call(client, second.rpc_url, "GetTask", {"id": task["id"]})
            assert after == run["before"][task["id"]]
            again = await raw_call(client, second.rpc_url, "SubscribeToTask", {"id": task["id"]})
            assert again == run["subscribed"][task["id"]]
        listed = (await rpc(client, second.rpc_url, "ListTasks", {}))["result"]["tasks"]
        assert {t["id"] for t in listed} == {t["id"] for t in run["finished"] + run["running"]}
        # Each conversation goes on in its old sandbox, with its files and its memory.
        for i, task in enumerate(run["finished"]):
            context_id = task["contextId"]
            reply = await send(
                client, second.rpc_url, f"read note{i}.txt\nrecall", context_id=context_id
            )
            text = answer_text(reply)
            assert reply["status"]["state"] == "TASK_STATE_COMPLETED"
            assert f"kept {i}" in text
            assert f"I remember: write note{i}.txt: kept {i}" in text
            assert sandbox_of(second, context_id) == sandbox_of(first, context_id)
        for i, task in enumerate(run["running"]):
            reply = await send(client, second.rpc_url, "recall", context_id=task["contextId"])
            assert f"I remember: {sleeping(i)}" in answer_text(reply)
            assert sandbox_of(second, task["contextId"]) == sandbox_of(first, task["contextId"])
    opened = second.events("session opened")
    assert len(opened) == FINISHED + RUNNING
    assert all(entry["loaded"] is True for entry in opened)
    # No prompt reached an agent twice, and no sandbox was lost or added.
    for i in range(RUNNING):
        assert prompts_seen(sandboxes, sleeping(i)) == 1
    assert {p.name for p in sandboxes.iterdir()} == run["directories"]


async def test_after_sigkill_every_task_is_terminal_and_every_conversation_goes_on(
    tmp_path: Path, processes: list[BridgeProcess]
) -> None:
    run = await run_then_stop(tmp_path, processes, signal.SIGKILL)
    assert run["code"] == -signal.SIGKILL
    run["first"].end_leftover_adapters()
    # Killed: the database still says the running tasks were running ...
    states = stored_states(tmp_path / "state")
    assert sorted(states[t["id"]] for t in run["running"]) == ["TASK_STATE_WORKING"] * RUNNING
    # ... and the next start ends them.
    await check_the_restart(tmp_path, processes, run, RESTARTED)


async def test_after_sigterm_everything_is_written_and_no_task_is_left_running(
    tmp_path: Path, processes: list[BridgeProcess]
) -> None:
    run = await run_then_stop(tmp_path, processes, signal.SIGTERM)
    assert run["code"] == 0
    # Before any restart: every task is terminal in the database.
    states = stored_states(tmp_path / "state")
    assert len(states) == FINISHED + RUNNING
    assert all(state in TERMINAL for state in states.values())
    await check_the_restart(tmp_path, processes, run, SHUTTING_DOWN)


async def test_a_task_ended_by_the_restart_is_pushed_to_its_webhook_whose_secrets_rest_encrypted(
    tmp_path: Path, processes: list[BridgeProcess]
) -> None:
    env = environment(tmp_path)
    first = await BridgeProcess(tmp_path, env, "first").start()
    processes.append(first)
    secret, token = "webhook-secret-" + uuid.uuid4().hex, "token-" + uuid.uuid4().hex
    async with serve_webhook() as hook, httpx.AsyncClient(timeout=60) as client:
        config = {
            "url": hook.url,
            "token": token,
            "authentication": {"scheme": "Bearer", "credentials": secret},
        }
        reply = await rpc(
            client,
            first.rpc_url,
            "SendMessage",
            {
                "message": user_message(sleeping(0)),
                "configuration": {
                    "returnImmediately": True,
                    "taskPushNotificationConfig": config,
                },
            },
        )
        task_id = reply["result"]["task"]["id"]
        await wait_for_prompts(tmp_path / "sandboxes", sleeping(0), 1)
        assert await first.stop(signal.SIGKILL) == -signal.SIGKILL
        first.end_leftover_adapters()

        state_dir = tmp_path / "state"
        stored = b"".join(
            (state_dir / name).read_bytes()
            for name in os.listdir(state_dir)
            if (state_dir / name).is_file()  # homes/ holds the adapters' HOMEs
        )
        assert secret.encode() not in stored
        assert token.encode() not in stored
        assert stat.S_IMODE((state_dir / "push.key").stat().st_mode) == 0o600
        with sqlite3.connect(state_dir / "state.db") as db:
            assert db.execute("select count(*) from push_configs").fetchone() == (1,)

        hook.reset_arrival()
        second = await BridgeProcess(tmp_path, env, "second").start()
        processes.append(second)
        deliveries = await hook.wait_for_state("TASK_STATE_FAILED")
        listed = await rpc(
            client, second.rpc_url, "ListTaskPushNotificationConfigs", {"taskId": task_id}
        )
    failed = [d for d in deliveries if "TASK_STATE_FAILED" in json.dumps(d.body)]
    assert failed[-1].headers["authorization"] == f"Bearer {secret}"
    assert failed[-1].headers["x-a2a-notification-token"] == token
    assert RESTARTED in json.dumps(failed[-1].body)
    configs = listed["result"]["configs"]
    # The secrets are write-only: the list says a token is set, never which (issue 13).
    assert [(c["url"], c["token"]) for c in configs] == [(hook.url, REDACTED)]
    assert secret not in json.dumps(listed)


async def test_a_webhook_registered_over_0_3_still_gets_the_0_3_task_after_a_restart(
    tmp_path: Path, processes: list[BridgeProcess]
) -> None:
    env = environment(tmp_path)
    first = await BridgeProcess(tmp_path, env, "first").start()
    processes.append(first)
    async with serve_webhook() as hook, httpx.AsyncClient(timeout=60) as client:
        message = {
            "kind": "message",
            "messageId": uuid.uuid4().hex,
            "role": "user",
            "parts": [{"kind": "text", "text": sleeping(0)}],
        }
        body = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "message/send",
            "params": {
                "message": message,
                "configuration": {
                    "blocking": False,
                    "pushNotificationConfig": {"url": hook.url, "token": "tok-03"},
                },
            },
        }
        # No A2A-Version header: a 0.3 request.
        task_id = (await client.post(first.rpc_url, json=body)).json()["result"]["id"]
        await wait_for_prompts(tmp_path / "sandboxes", sleeping(0), 1)
        assert await first.stop(signal.SIGKILL) == -signal.SIGKILL
        first.end_leftover_adapters()
        hook.reset_arrival()
        second = await BridgeProcess(tmp_path, env, "second").start()
        processes.append(second)
        deliveries = await hook.wait_for_state("failed")
    final = deliveries[-1].body
    assert final["kind"] == "task"
    assert final["id"] == task_id
    assert final["status"]["state"] == "failed"
    assert RESTARTED in json.dumps(final)


async def test_a_killed_bridge_keeps_the_answer_streamed_until_its_last_batch(
    tmp_path: Path, processes: list[BridgeProcess]
) -> None:
    script = {"turns": [[{"op": "say", "text": "streamed before the kill\n"}, {"op": "hang"}]]}
    env = {**environment(tmp_path), "ACP_AGENT": scripted_agent(tmp_path, script)}
    first = await BridgeProcess(tmp_path, env, "first").start()
    processes.append(first)
    async with httpx.AsyncClient(timeout=60) as client:
        reply = await rpc(
            client,
            first.rpc_url,
            "SendMessage",
            {"message": user_message("go"), "configuration": {"returnImmediately": True}},
        )
        task_id = reply["result"]["task"]["id"]
        # The chunk is written with the next batch (WRITE_BEHIND_S), not per chunk and not
        # only at the end: it is in the database while the turn still runs.
        with anyio.fail_after(BATCH_WRITTEN_S):
            # Polled: another process's database.
            while "before the kill" not in stored_answer(tmp_path / "state", task_id):  # noqa: ASYNC110
                await anyio.sleep(0.05)
        assert await first.stop(signal.SIGKILL) == -signal.SIGKILL
        first.end_leftover_adapters()
        second = await BridgeProcess(tmp_path, env, "second").start()
        processes.append(second)
        got = (await rpc(client, second.rpc_url, "GetTask", {"id": task_id}))["result"]
    assert got["status"]["state"] == "TASK_STATE_FAILED"
    assert answer_text(got) == "streamed before the kill\n"


def stored_answer(state_dir: Path, task_id: str) -> str:
    with sqlite3.connect(state_dir / "state.db") as db:
        row = db.execute("select body from tasks where id = ?", (task_id,)).fetchone()
    if row is None:
        return ""
    task = Task()
    task.ParseFromString(row[0])
    return "".join(p.text for a in task.artifacts if a.artifact_id == "answer" for p in a.parts)


@pytest.mark.parametrize("replacement", ["a new directory", "a symlink"])
async def test_a_sandbox_replaced_while_the_bridge_was_down_is_not_trusted_after_the_restart(
    tmp_path: Path, processes: list[BridgeProcess], replacement: str
) -> None:
    env = environment(tmp_path)
    first = await BridgeProcess(tmp_path, env, "first").start()
    processes.append(first)
    async with httpx.AsyncClient(timeout=60) as client:
        task = await send(client, first.rpc_url, "write mine.txt: the conversation's own")
        context_id = task["contextId"]
        assert await first.stop(signal.SIGTERM) == 0
        (old_root,) = {Path(cwd) for cwd in sandbox_of(first, context_id)}
        # While the bridge is down, someone puts another directory under the same name.
        planted = tmp_path / "planted"
        planted.mkdir()
        (planted / "mine.txt").write_text("planted\n")
        shutil.rmtree(old_root)
        if replacement == "a symlink":
            old_root.symlink_to(planted)
        else:
            old_root.mkdir()
            (old_root / "mine.txt").write_text("planted\n")
        second = await BridgeProcess(tmp_path, env, "second").start()
        processes.append(second)
        reply = await send(client, second.rpc_url, "read mine.txt\nrecall", context_id=context_id)
    (new_root,) = {Path(cwd) for cwd in sandbox_of(second, context_id)}
    assert new_root != old_root
    assert new_root.parent == old_root.parent
    text = answer_text(reply)
    assert "planted" not in text
    assert "I remember no earlier message" in text
    notes = [
        "".join(part.get("text", "") for part in message.get("parts", []))
        for message in reply.get("history", [])
        if message.get("role") == "ROLE_AGENT"
    ]
    assert any("working directory was deleted or replaced" in note for note in notes), notes
    assert (planted / "mine.txt").read_text() == "planted\n"


async def test_a_task_the_caller_saw_complete_is_complete_after_an_immediate_kill(
    tmp_path: Path, processes: list[BridgeProcess]
) -> None:
    env = environment(tmp_path)
    first = await BridgeProcess(tmp_path, env, "first").start()
    processes.append(first)
    async with httpx.AsyncClient(timeout=60) as client:
        task = await send(client, first.rpc_url, "write last.txt: the last word")
        # The terminal state is on disk before the caller hears of it: killed at once.
        assert await first.stop(signal.SIGKILL) == -signal.SIGKILL
        second = await BridgeProcess(tmp_path, env, "second").start()
        processes.append(second)
        got = (await rpc(client, second.rpc_url, "GetTask", {"id": task["id"]}))["result"]
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    assert json.dumps(got, sort_keys=True) == json.dumps(task, sort_keys=True)
