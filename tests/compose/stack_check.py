"""compose.yaml brought up for real: PostgreSQL, three bridge replicas on one shared volume,
Caddy round-robin in front, checked from outside as a caller and an operator see them.

Not part of the plain pytest run (its name is not test_*.py): scripts/compose_check builds
the images, brings the stack up with deploy/compose/check.yaml beside compose.yaml (each
replica also on a loopback port of its own, two adapters per replica), runs this module,
and takes the stack down. It reads what it needs from the environment:

    COMPOSE_ENGINE   docker or podman (the containers are found by their compose labels)
    COMPOSE_PROJECT  the compose project's name
    COMPOSE_URL      the balancer, e.g. http://127.0.0.1:18080
    A2A_TOKEN        the token the replicas were given

The tests run in the order written; the last one kills a replica."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
import yaml

from a2a_acp_bridge.a2a.orphans import REPLICA_STOPPED
from tests.support.wire import TERMINAL, rpc, send, state_of, stream, submit, user_message

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[2]
ENGINE = os.environ.get("COMPOSE_ENGINE", "podman")
PROJECT = os.environ.get("COMPOSE_PROJECT", "")
BALANCER = os.environ.get("COMPOSE_URL", "")
TOKEN = os.environ.get("A2A_TOKEN", "")
# The port every replica serves on inside its container (the Dockerfile's PORT).
REPLICA_PORT = 41241
# A command of the engine (ps, exec, kill, port): seconds, even on a loaded machine.
ENGINE_S = 60.0
# How long a test waits for a state to reach a replica, or a heartbeat to be written.
STATE_SEEN_S = 30.0
# A cancel through another replica is answered once the owner has cancelled; the issue
# asks for the agent's session/cancel within a second.
CANCEL_S = 1.0
# The compose files as the stack was brought up with them.
BRIDGE_ENV = {
    **yaml.safe_load((ROOT / "compose.yaml").read_text())["services"]["bridge"]["environment"],
    **yaml.safe_load((ROOT / "deploy/compose/check.yaml").read_text())["services"]["bridge"][
        "environment"
    ],
}
LEASE_TTL_S = int(BRIDGE_ENV["A2A_LEASE_TTL_MS"]) / 1000
MAX_SESSIONS = int(BRIDGE_ENV["ACP_MAX_SESSIONS"])
REPLICAS = 3


def engine(*args: str) -> str:
    done = subprocess.run(
        [ENGINE, *args], check=True, capture_output=True, text=True, timeout=ENGINE_S
    )
    return done.stdout


def containers(service: str) -> list[str]:
    """The running containers of one compose service, by the labels compose gives them."""
    names = engine(
        "ps",
        "--filter",
        f"label=com.docker.compose.project={PROJECT}",
        "--filter",
        f"label=com.docker.compose.service={service}",
        "--format",
        "{{.Names}}",
    )
    return sorted(names.split())


def sql(query: str) -> list[list[str]]:
    """Rows of a query, run by psql in the database's own container."""
    [db] = containers("db")
    out = engine("exec", db, "psql", "-U", "bridge", "-d", "bridge", "-AtF", "\t", "-c", query)
    return [line.split("\t") for line in out.splitlines() if line]


@dataclass(frozen=True)
class Replica:
    container: str
    # Its row in `replicas` (cluster/membership.py: the container's hostname, pid, nonce).
    id: str
    # Its own loopback port (deploy/compose/check.yaml), besides the balancer.
    url: str

    def adapters(self) -> list[tuple[int, str]]:
        """(pid, working directory) of every adapter running in the container."""
        script = (
            "import os\n"
            "for pid in filter(str.isdigit, os.listdir('/proc')):\n"
            "    try: cwd = os.readlink(f'/proc/{pid}/cwd')\n"
            "    except OSError: continue\n"
            "    if cwd.startswith('/data/sandboxes/'): print(pid, cwd)\n"
        )
        out = engine("exec", self.container, "python", "-c", script)
        return [(int(pid), cwd) for pid, cwd in (line.split(" ", 1) for line in out.splitlines())]


def replicas() -> list[Replica]:
    """The bridge containers running and joined (a restarted one joins anew, in seconds)."""
    rows = [row[0] for row in sql("select id from replicas")]
    found = []
    for container in containers("bridge"):
        hostname = engine("inspect", "--format", "{{.Config.Hostname}}", container).strip()
        joined = [r for r in rows if r.startswith(hostname + "-")]
        if len(joined) == 1:
            address = engine("port", container, str(REPLICA_PORT)).split()[0]
            found.append(Replica(container, joined[0], f"http://{address}/"))
    return found


def runner_of(task_id: str) -> str:
    """The replica that ran (or runs) a task, as the database says."""
    [[replica]] = sql(f"select replica from tasks where id = '{task_id}'")
    return replica


@contextlib.asynccontextmanager
async def caller() -> AsyncIterator[httpx.AsyncClient]:
    headers = {"Authorization": f"Bearer {TOKEN}"}
    async with httpx.AsyncClient(timeout=30, headers=headers) as client:
        yield client


async def state_on(client: httpx.AsyncClient, url: str, task_id: str) -> str:
    reply = await rpc(client, url, "GetTask", {"id": task_id})
    return str(reply["result"]["status"]["state"])


async def wait_for_state(client: httpx.AsyncClient, url: str, task_id: str, state: str) -> None:
    """Unbounded here: each caller bounds it with its own deadline."""
    while await state_on(client, url, task_id) != state:  # noqa: ASYNC110 - another replica's
        await anyio.sleep(0.05)  # polled: a write to the database, seen through GetTask


async def start_sleeping(client: httpx.AsyncClient, url: str) -> dict[str, Any]:
    """A demo-agent task that runs until cancelled, once it is WORKING."""
    task = await submit(client, url, "sleep 600")
    with anyio.fail_after(STATE_SEEN_S):
        await wait_for_state(client, url, task["id"], "TASK_STATE_WORKING")
    return task


async def busy_reported_total(total: int) -> None:
    """Until the replicas' heartbeats report this many busy adapters in all."""
    while sum(int(row[0]) for row in sql("select busy from replicas")) != total:  # noqa: ASYNC110
        await anyio.sleep(0.2)  # polled: the heartbeats, written every TTL / 3


def test_the_stack_runs_three_replicas_on_one_database() -> None:
    for variable in ("COMPOSE_PROJECT", "COMPOSE_URL", "A2A_TOKEN"):
        assert os.environ.get(variable), f"{variable} is not set: run scripts/compose_check"
    running = replicas()
    assert len(running) == REPLICAS
    assert len({r.id for r in running}) == REPLICAS
    assert [row[0] for row in sql("select count(*) from replicas")] == [str(REPLICAS)]


async def test_the_balancer_spreads_new_conversations_over_every_replica() -> None:
    async with caller() as client:
        card = await client.get(BALANCER + "/.well-known/agent-card.json")
        assert card.status_code == 200
        tasks = [await send(client, BALANCER, f"think spread {i}") for i in range(3 * REPLICAS)]
    assert {t["status"]["state"] for t in tasks} == {"TASK_STATE_COMPLETED"}
    # A new conversation runs on the replica that received it: round-robin reached all.
    assert {runner_of(t["id"]) for t in tasks} == {r.id for r in replicas()}


async def test_every_replica_answers_for_a_task_another_runs_and_its_push_configs() -> None:
    owner, second, third = replicas()
    async with caller() as client:
        done = await send(client, owner.url, "think finished on its owner")
        running = await start_sleeping(client, owner.url)
        try:
            for replica in (second, third):
                got = await rpc(client, replica.url, "GetTask", {"id": done["id"]})
                assert got["result"] == done
                # The owner's state change reaches the database in its next urgent write.
                with anyio.fail_after(STATE_SEEN_S):
                    await wait_for_state(client, replica.url, running["id"], "TASK_STATE_WORKING")
                listed = await rpc(client, replica.url, "ListTasks", {})
                assert {done["id"], running["id"]} <= {t["id"] for t in listed["result"]["tasks"]}
            # A push config made on one replica, read on another, deleted on a third.
            config = {"taskId": running["id"], "id": "c1", "url": "https://example.com/hook"}
            made = await rpc(client, second.url, "CreateTaskPushNotificationConfig", config)
            assert "result" in made, made
            read = await rpc(
                client,
                third.url,
                "GetTaskPushNotificationConfig",
                {"taskId": running["id"], "id": "c1"},
            )
            assert read["result"]["url"] == "https://example.com/hook"
            deleted = await rpc(
                client,
                owner.url,
                "DeleteTaskPushNotificationConfig",
                {"taskId": running["id"], "id": "c1"},
            )
            assert "result" in deleted, deleted
            left = await rpc(
                client, second.url, "ListTaskPushNotificationConfigs", {"taskId": running["id"]}
            )
            assert left["result"].get("configs", []) == []
        finally:
            cancelled = await rpc(client, third.url, "CancelTask", {"id": running["id"]})
        assert cancelled["result"]["status"]["state"] == "TASK_STATE_CANCELED"
        missing = await rpc(client, second.url, "GetTask", {"id": "no-such-task"})
        assert missing["error"]["code"] == -32001


async def test_a_conversation_s_messages_through_the_balancer_run_on_its_one_adapter() -> None:
    async with caller() as client:
        first = await send(client, BALANCER, "write a.txt: from the first message")
        context = first["contextId"]
        owner = runner_of(first["id"])
        turns = [
            await send(client, BALANCER, f"think turn {i}", context_id=context) for i in range(4)
        ]
        # Streamed through a replica that does not hold it: every event, to the end.
        other = next(r for r in replicas() if r.id != owner)
        events = [
            event
            async for event in stream(
                client,
                other.url,
                {"message": user_message("read a.txt\nrecall", context_id=context)},
            )
        ]
    assert [t["status"]["state"] for t in turns] == ["TASK_STATE_COMPLETED"] * 4
    assert state_of(events[-1]) == "TASK_STATE_COMPLETED"
    every = [first["id"], *(t["id"] for t in turns), events[0]["task"]["id"]]
    assert {runner_of(task_id) for task_id in every} == {owner}
    assert sql(f"select replica from leases where context_id = '{context}'") == [[owner]]
    streamed = json.dumps(events)
    assert "from the first message" in streamed
    recalled = streamed[streamed.index("I remember") :]
    positions = [recalled.index(f"think turn {i}") for i in range(4)]
    assert positions == sorted(positions)
    # One adapter for it, on its owner, among every replica's processes.
    [[root]] = sql(f"select root from conversations where context_id = '{context}'")
    holders = [r.id for r in replicas() for _, cwd in r.adapters() if cwd == root]
    assert holders == [owner]


async def test_a_third_replica_s_subscriber_sees_every_event_and_another_s_cancel_ends_it() -> None:
    async with caller() as client:
        task = await submit(client, BALANCER, "think the very first thought\nsleep 600")
        owner = runner_of(task["id"])
        watcher, canceller = [r for r in replicas() if r.id != owner]
        with anyio.fail_after(STATE_SEEN_S):
            while "Thinking: the very first thought" not in str(  # noqa: ASYNC110 - a batch
                (await rpc(client, watcher.url, "GetTask", {"id": task["id"]}))["result"]
            ):
                await anyio.sleep(0.05)
        events: list[dict[str, Any]] = []

        async def follow() -> None:
            params = {"id": task["id"]}
            async for event in stream(client, watcher.url, params, method="SubscribeToTask"):
                events.append(event)

        with anyio.fail_after(STATE_SEEN_S):
            async with anyio.create_task_group() as group:
                group.start_soon(follow)
                while len(events) < 2:  # noqa: ASYNC110 - the stored task, then the replay
                    await anyio.sleep(0.02)
                started = time.monotonic()
                cancelled = await rpc(client, canceller.url, "CancelTask", {"id": task["id"]})
                took = time.monotonic() - started
        # The agent was told: the conversation's next turn runs at once, not after 600 s.
        again = await send(client, BALANCER, "think after the cancel", context_id=task["contextId"])
    assert cancelled["result"]["status"]["state"] == "TASK_STATE_CANCELED"
    assert took <= CANCEL_S, f"the cancel took {took:.2f} s"
    assert again["status"]["state"] == "TASK_STATE_COMPLETED"
    assert runner_of(again["id"]) == owner
    assert events[0]["task"]["id"] == task["id"]
    assert events[1]["task"]["status"]["state"] == "TASK_STATE_SUBMITTED"  # from the start
    replayed = [json.dumps(e) for e in events[1:]]
    working = next(i for i, e in enumerate(replayed) if '"TASK_STATE_WORKING"' in e)
    thought = next(i for i, e in enumerate(replayed) if "Thinking: the very first thought" in e)
    assert working < thought
    assert state_of(events[-1]) == "TASK_STATE_CANCELED"
    print(f"cancel through a replica that does not run the task: {took * 1000:.0f} ms")


async def test_a_full_replica_places_new_conversations_elsewhere_until_all_are_full() -> None:
    receiver, *others = replicas()
    sleeping: list[dict[str, Any]] = []
    with anyio.fail_after(STATE_SEEN_S):
        await busy_reported_total(0)  # what the tests before cancelled has been reported
    async with caller() as client:
        try:
            # Every new conversation arrives at one replica; beyond its ACP_MAX_SESSIONS the
            # others take them (waiting for each heartbeat, as a placement reads them).
            for n in range(REPLICAS * MAX_SESSIONS):
                sleeping.append(await start_sleeping(client, receiver.url))
                with anyio.fail_after(STATE_SEEN_S):
                    await busy_reported_total(n + 1)
            placed = [runner_of(t["id"]) for t in sleeping]
            assert placed[:MAX_SESSIONS] == [receiver.id] * MAX_SESSIONS
            for replica in [receiver, *others]:
                assert placed.count(replica.id) == MAX_SESSIONS
            refused = await send(client, receiver.url, "think nowhere to go")
            assert refused["status"]["state"] == "TASK_STATE_REJECTED"
            for task in sleeping:
                assert await state_on(client, BALANCER, task["id"]) == "TASK_STATE_WORKING"
        finally:
            for task in sleeping:
                await rpc(client, BALANCER, "CancelTask", {"id": task["id"]})
        with anyio.fail_after(STATE_SEEN_S):
            await busy_reported_total(0)


async def test_a_replica_killed_mid_task_has_its_task_failed_and_its_conversation_goes_on() -> None:
    doomed, *survivors = replicas()
    async with caller() as client:
        first = await send(client, doomed.url, "write notes.txt: kept across replicas")
        context = first["contextId"]
        running = await submit(client, doomed.url, "sleep 600", context_id=context)
        with anyio.fail_after(STATE_SEEN_S):
            await wait_for_state(client, survivors[0].url, running["id"], "TASK_STATE_WORKING")
        killed_at = time.monotonic()
        engine("kill", "--signal", "KILL", doomed.container)
        # Within the lease TTL and a second (issue 16), another replica has ended it.
        with anyio.fail_after(LEASE_TTL_S + 1.0):
            await wait_for_state(client, survivors[0].url, running["id"], "TASK_STATE_FAILED")
        ended_after = time.monotonic() - killed_at
        failed = await rpc(client, survivors[1].url, "GetTask", {"id": running["id"]})
        assert failed["result"]["status"]["message"]["parts"][0]["text"] == REPLICA_STOPPED
        # Through the balancer, which drops the dead replica: the conversation goes on, in
        # its sandbox on the shared volume, its memory loaded.
        again = await send(client, BALANCER, "read notes.txt\nrecall", context_id=context)
    assert again["status"]["state"] == "TASK_STATE_COMPLETED"
    assert "kept across replicas" in str(again["artifacts"])
    assert "write notes.txt" in str(again["artifacts"])  # the demo agent recalls it
    runner = runner_of(again["id"])
    assert runner != doomed.id
    print(f"the killed replica's task ended FAILED after {ended_after:.1f} s")
    # Nothing is left non-terminal; the dead replica's row is gone.
    states = {row[0] for row in sql("select distinct state from tasks")}
    assert states <= TERMINAL, states
    alive = {row[0] for row in sql("select id from replicas")}
    assert doomed.id not in alive
    # No adapter runs for a conversation another replica holds, and the one that goes on
    # has one adapter, on the replica holding its lease (the killed one, if its container
    # was restarted by a restart policy, is a new replica: it is checked alike).
    holders = dict(sql("select context_id, replica from leases"))
    roots = dict(sql("select root, context_id from conversations"))
    [[root]] = sql(f"select root from conversations where context_id = '{context}'")
    found = []
    for replica in replicas():
        for _pid, cwd in replica.adapters():
            if cwd in roots and roots[cwd] in holders:
                assert holders[roots[cwd]] == replica.id, (cwd, replica.id)
            if cwd == root:
                found.append(replica.id)
    assert found == [runner]
