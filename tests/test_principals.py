"""Callers are kept apart (issue 13), over real HTTP: every A2A operation on another
principal's task is answered exactly as for an id that never existed, on JSON-RPC and
HTTP+JSON, A2A 1.0 and 0.3; ListTasks lists one's own; the same contextId is two
conversations; push secrets are never given back; an operator sees and cancels all; the
per-principal cap; ownership survives a restart."""

from __future__ import annotations

import contextlib
import json
import re
import sqlite3
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from a2a.types.a2a_pb2 import Task, TaskState
from sqlalchemy import create_engine

from a2a_acp_bridge.a2a.ownership import REDACTED
from a2a_acp_bridge.principals import conversation_key, hash_scrypt, hash_sha256
from a2a_acp_bridge.schema import migrate
from a2a_acp_bridge.turn import Phase
from tests.support import idp
from tests.support.bridge_process import BridgeProcess
from tests.support.server import RunningBridge, make_settings, serve_bridge
from tests.support.wire import REST_HEADERS, user_message

pytestmark = pytest.mark.anyio

ALICE_TOKEN = "alice-token-" + "a" * 24
BOB_TOKEN = "bob-token-" + "b" * 24
OPS_TOKEN = "ops-token-" + "c" * 24
SECRET_TOKEN = "webhook-secret-token-7f3a9c"
SECRET_CREDENTIALS = "webhook-credentials-91be22"
HOOK = "hook"
# Bounds on a test's waits.
TASK_WAIT_S = 30.0
CLIENT_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class Caller:
    name: str
    authorization: str

    def headers(self, base: dict[str, str]) -> dict[str, str]:
        return {**base, "Authorization": self.authorization}


RPC_10 = {"A2A-Version": "1.0", "Content-Type": "application/json"}
RPC_03 = {"Content-Type": "application/json"}
REST_03 = {"Content-Type": "application/json"}


def token_file(tmp_path: Path) -> Path:
    """The three forms: a token in clear, its sha256, its scrypt."""
    path = tmp_path / "tokens"
    path.write_text(
        "# principals\n"
        f"alice {ALICE_TOKEN}\n"
        f"bob {hash_sha256(BOB_TOKEN)}\n"
        f"ops {hash_scrypt(OPS_TOKEN, n=2**10)}\n"
    )
    return path


@dataclass
class Setup:
    bridge: RunningBridge
    alice: Caller
    bob: Caller
    ops: Caller


@contextlib.asynccontextmanager
async def principals(tmp_path: Path, mode: str, **env: str) -> AsyncIterator[Setup]:
    """A bridge with the principals alice, bob and the operator ops, named by a token file
    or by JWTs of a test identity provider (a JWKS file)."""
    values = {"A2A_ADMIN_PRINCIPALS": "ops", **env}
    if mode == "token_file":
        values["A2A_TOKEN_FILE"] = str(token_file(tmp_path))
        callers = {
            name: Caller(name, f"Bearer {token}")
            for name, token in (("alice", ALICE_TOKEN), ("bob", BOB_TOKEN), ("ops", OPS_TOKEN))
        }
    else:
        key = idp.rsa_key("k1")
        jwks_path = tmp_path / "jwks.json"
        jwks_path.write_text(json.dumps(idp.jwks(key)))
        values.update(
            {
                "A2A_JWT_ISSUER": idp.ISSUER,
                "A2A_JWT_AUDIENCE": idp.AUDIENCE,
                "A2A_JWT_JWKS_FILE": str(jwks_path),
            }
        )
        callers = {
            name: Caller(name, f"Bearer {idp.token(key, name)}") for name in ("alice", "bob", "ops")
        }
    async with serve_bridge(make_settings(tmp_path, values)) as bridge:
        yield Setup(bridge, callers["alice"], callers["bob"], callers["ops"])


async def rpc_call(
    client: httpx.AsyncClient,
    url: str,
    caller: Caller,
    method: str,
    params: dict[str, Any],
    headers: dict[str, str] = RPC_10,
) -> dict[str, Any]:
    body = {"jsonrpc": "2.0", "id": "r", "method": method, "params": params}
    response = await client.post(url, json=body, headers=caller.headers(headers))
    assert response.status_code == 200, response.text
    reply: dict[str, Any] = response.json()
    return reply


async def own_task(client: httpx.AsyncClient, setup: Setup, caller: Caller, **fields: Any) -> str:
    """A completed task of `caller`, with a push config holding secrets."""
    reply = await rpc_call(
        client,
        setup.bridge.rpc_url,
        caller,
        "SendMessage",
        {"message": user_message("hello", **fields)},
    )
    task = reply["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_COMPLETED", task
    created = await rpc_call(
        client, setup.bridge.rpc_url, caller, "CreateTaskPushNotificationConfig", hook(task["id"])
    )
    assert "result" in created, created
    return str(task["id"])


def hook(task_id: str) -> dict[str, Any]:
    return {
        "taskId": task_id,
        "id": HOOK,
        "url": "https://example.com/hook",
        "token": SECRET_TOKEN,
        "authentication": {"scheme": "Bearer", "credentials": SECRET_CREDENTIALS},
    }


# --- every operation that names a task ----------------------------------------------------


def v03_message(task_id: str) -> dict[str, Any]:
    return {
        "kind": "message",
        "messageId": "m-03",
        "role": "user",
        "parts": [{"kind": "text", "text": "again"}],
        "taskId": task_id,
    }


def v10_message(task_id: str) -> dict[str, Any]:
    return {"messageId": "m-10", "role": "ROLE_USER", "parts": [{"text": "x"}], "taskId": task_id}


@dataclass(frozen=True)
class Op:
    """One operation on task T: JSON-RPC (`path` None) or HTTP+JSON."""

    name: str
    headers: dict[str, str]
    method: str
    path: str | None
    body: Callable[[str], dict[str, Any] | None]


OPS = [
    # JSON-RPC, A2A 1.0
    Op("rpc1.0 GetTask", RPC_10, "GetTask", None, lambda t: {"id": t}),
    Op("rpc1.0 CancelTask", RPC_10, "CancelTask", None, lambda t: {"id": t}),
    Op("rpc1.0 SubscribeToTask", RPC_10, "SubscribeToTask", None, lambda t: {"id": t}),
    Op("rpc1.0 SendMessage", RPC_10, "SendMessage", None, lambda t: {"message": v10_message(t)}),
    Op(
        "rpc1.0 SendStreamingMessage",
        RPC_10,
        "SendStreamingMessage",
        None,
        lambda t: {"message": v10_message(t)},
    ),
    Op(
        "rpc1.0 GetPushConfig",
        RPC_10,
        "GetTaskPushNotificationConfig",
        None,
        lambda t: {"taskId": t, "id": HOOK},
    ),
    Op(
        "rpc1.0 ListPushConfigs",
        RPC_10,
        "ListTaskPushNotificationConfigs",
        None,
        lambda t: {"taskId": t},
    ),
    Op(
        "rpc1.0 DeletePushConfig",
        RPC_10,
        "DeleteTaskPushNotificationConfig",
        None,
        lambda t: {"taskId": t, "id": HOOK},
    ),
    Op(
        "rpc1.0 CreatePushConfig",
        RPC_10,
        "CreateTaskPushNotificationConfig",
        None,
        lambda t: {"taskId": t, "id": HOOK, "url": "https://example.com/other"},
    ),
    # JSON-RPC, A2A 0.3
    Op("rpc0.3 tasks/get", RPC_03, "tasks/get", None, lambda t: {"id": t}),
    Op("rpc0.3 tasks/cancel", RPC_03, "tasks/cancel", None, lambda t: {"id": t}),
    Op("rpc0.3 tasks/resubscribe", RPC_03, "tasks/resubscribe", None, lambda t: {"id": t}),
    Op("rpc0.3 message/send", RPC_03, "message/send", None, lambda t: {"message": v03_message(t)}),
    Op(
        "rpc0.3 message/stream",
        RPC_03,
        "message/stream",
        None,
        lambda t: {"message": v03_message(t)},
    ),
    Op(
        "rpc0.3 push get",
        RPC_03,
        "tasks/pushNotificationConfig/get",
        None,
        lambda t: {"id": t, "pushNotificationConfigId": HOOK},
    ),
    Op("rpc0.3 push list", RPC_03, "tasks/pushNotificationConfig/list", None, lambda t: {"id": t}),
    Op(
        "rpc0.3 push delete",
        RPC_03,
        "tasks/pushNotificationConfig/delete",
        None,
        lambda t: {"id": t, "pushNotificationConfigId": HOOK},
    ),
    Op(
        "rpc0.3 push set",
        RPC_03,
        "tasks/pushNotificationConfig/set",
        None,
        lambda t: {
            "taskId": t,
            "pushNotificationConfig": {"id": HOOK, "url": "https://example.com/other"},
        },
    ),
    # HTTP+JSON, A2A 1.0
    Op("rest1.0 get", REST_HEADERS, "GET", "/rest/tasks/{T}", lambda t: None),
    Op("rest1.0 cancel", REST_HEADERS, "POST", "/rest/tasks/{T}:cancel", lambda t: {}),
    Op("rest1.0 subscribe", REST_HEADERS, "POST", "/rest/tasks/{T}:subscribe", lambda t: {}),
    Op(
        "rest1.0 send",
        REST_HEADERS,
        "POST",
        "/rest/message:send",
        lambda t: {"message": v10_message(t)},
    ),
    Op(
        "rest1.0 stream",
        REST_HEADERS,
        "POST",
        "/rest/message:stream",
        lambda t: {"message": v10_message(t)},
    ),
    Op(
        "rest1.0 push get",
        REST_HEADERS,
        "GET",
        "/rest/tasks/{T}/pushNotificationConfigs/" + HOOK,
        lambda t: None,
    ),
    Op(
        "rest1.0 push list",
        REST_HEADERS,
        "GET",
        "/rest/tasks/{T}/pushNotificationConfigs",
        lambda t: None,
    ),
    Op(
        "rest1.0 push delete",
        REST_HEADERS,
        "DELETE",
        "/rest/tasks/{T}/pushNotificationConfigs/" + HOOK,
        lambda t: None,
    ),
    Op(
        "rest1.0 push create",
        REST_HEADERS,
        "POST",
        "/rest/tasks/{T}/pushNotificationConfigs",
        lambda t: {"id": HOOK, "url": "https://example.com/other"},
    ),
    # HTTP+JSON, A2A 0.3
    Op("rest0.3 get", REST_03, "GET", "/rest/v1/tasks/{T}", lambda t: None),
    Op("rest0.3 cancel", REST_03, "POST", "/rest/v1/tasks/{T}:cancel", lambda t: {}),
    Op("rest0.3 subscribe", REST_03, "POST", "/rest/v1/tasks/{T}:subscribe", lambda t: {}),
    Op(
        "rest0.3 send",
        REST_03,
        "POST",
        "/rest/v1/message:send",
        lambda t: {
            "message": {
                "messageId": "m-r03",
                "role": "ROLE_USER",
                "content": [{"text": "x"}],
                "taskId": t,
            }
        },
    ),
    Op(
        "rest0.3 push get",
        REST_03,
        "GET",
        "/rest/v1/tasks/{T}/pushNotificationConfigs/" + HOOK,
        lambda t: None,
    ),
    Op(
        "rest0.3 push list",
        REST_03,
        "GET",
        "/rest/v1/tasks/{T}/pushNotificationConfigs",
        lambda t: None,
    ),
    Op(
        "rest0.3 push set",
        REST_03,
        "POST",
        "/rest/v1/tasks/{T}/pushNotificationConfigs",
        lambda t: {"pushNotificationConfig": {"id": HOOK, "url": "https://example.com/other"}},
    ),
]


async def perform(
    client: httpx.AsyncClient, base: str, caller: Caller, op: Op, task_id: str
) -> tuple[int, str]:
    """The answer to `op` on `task_id`: its status and its body with the id written `T`."""
    body = op.body(task_id)
    if op.path is None:
        envelope = {"jsonrpc": "2.0", "id": "r", "method": op.method, "params": body}
        response = await client.post(f"{base}/", json=envelope, headers=caller.headers(op.headers))
    else:
        response = await client.request(
            op.method,
            base + op.path.replace("{T}", task_id),
            json=body,
            headers=caller.headers(op.headers),
        )
    return response.status_code, response.text.replace(task_id, "T")


def _mentions_secret(text: str) -> bool:
    return SECRET_TOKEN in text or SECRET_CREDENTIALS in text


@pytest.mark.parametrize("mode", ["token_file", "jwt"])
async def test_every_operation_on_another_principals_task_is_answered_as_for_no_task(
    tmp_path: Path, mode: str
) -> None:
    async with (
        principals(tmp_path, mode) as setup,
        httpx.AsyncClient(timeout=CLIENT_TIMEOUT_S) as client,
    ):
        base = setup.bridge.url
        task_id = await own_task(client, setup, setup.alice)
        for op in OPS:
            missing = await perform(client, base, setup.bob, op, uuid.uuid4().hex)
            others = await perform(client, base, setup.bob, op, task_id)
            own = await perform(client, base, setup.alice, op, task_id)
            # Exactly the answer an id that never existed gets...
            assert others == missing, op.name
            # ...which the owner does not get: the operation would have told.
            assert own != missing, op.name
            assert not _mentions_secret(own[1] + others[1]), op.name
            if "elete" in op.name or "reate" in op.name or "set" in op.name:
                # The owner's own delete (or overwrite) took the hook: it is set again.
                again = await rpc_call(
                    client,
                    setup.bridge.rpc_url,
                    setup.alice,
                    "CreateTaskPushNotificationConfig",
                    hook(task_id),
                )
                assert "result" in again, again
        # The owner's task and its config are still there, untouched by bob.
        got = await rpc_call(
            client,
            setup.bridge.rpc_url,
            setup.alice,
            "GetTaskPushNotificationConfig",
            {"taskId": task_id, "id": HOOK},
        )
    assert got["result"]["url"] == "https://example.com/hook"


@pytest.mark.parametrize("mode", ["token_file", "jwt"])
async def test_list_tasks_lists_ones_own_and_the_operator_sees_all(
    tmp_path: Path, mode: str
) -> None:
    async with (
        principals(tmp_path, mode) as setup,
        httpx.AsyncClient(timeout=CLIENT_TIMEOUT_S) as client,
    ):
        url = setup.bridge.rpc_url
        alice = {await own_task(client, setup, setup.alice) for _ in range(2)}
        bob = {await own_task(client, setup, setup.bob)}
        listed = {}
        for caller in (setup.alice, setup.bob, setup.ops):
            reply = await rpc_call(client, url, caller, "ListTasks", {})
            listed[caller.name] = {task["id"] for task in reply["result"]["tasks"]}
            rest = await client.get(
                setup.bridge.url + "/rest/tasks", headers=caller.headers(REST_HEADERS)
            )
            assert {t["id"] for t in rest.json()["tasks"]} == listed[caller.name]
        seen = await rpc_call(client, url, setup.ops, "GetTask", {"id": next(iter(bob))})
        seen03 = await rpc_call(
            client, url, setup.ops, "tasks/get", {"id": next(iter(alice))}, headers=RPC_03
        )
        # The operator sees the task, not its push secrets, and does not own it.
        configs = await rpc_call(
            client, url, setup.ops, "ListTaskPushNotificationConfigs", {"taskId": next(iter(bob))}
        )
    assert listed["alice"] == alice
    assert listed["bob"] == bob
    assert listed["ops"] == alice | bob
    assert seen["result"]["id"] in bob
    assert seen03["result"]["id"] in alice
    assert configs["error"]["code"] == -32001  # TaskNotFound: the operator's view is read-only


async def test_push_secrets_are_write_only_on_both_versions_and_bindings(tmp_path: Path) -> None:
    async with (
        principals(tmp_path, "token_file") as setup,
        httpx.AsyncClient(timeout=CLIENT_TIMEOUT_S) as client,
    ):
        url, base, alice = setup.bridge.rpc_url, setup.bridge.url, setup.alice
        task_id = await own_task(client, setup, alice)
        created = await rpc_call(
            client, url, alice, "CreateTaskPushNotificationConfig", {**hook(task_id), "id": "h2"}
        )
        answers = [
            json.dumps(created),
            json.dumps(
                await rpc_call(
                    client,
                    url,
                    alice,
                    "GetTaskPushNotificationConfig",
                    {"taskId": task_id, "id": HOOK},
                )
            ),
            json.dumps(
                await rpc_call(
                    client, url, alice, "ListTaskPushNotificationConfigs", {"taskId": task_id}
                )
            ),
            json.dumps(
                await rpc_call(
                    client,
                    url,
                    alice,
                    "tasks/pushNotificationConfig/list",
                    {"id": task_id},
                    headers=RPC_03,
                )
            ),
        ]
        for path, headers in (
            (f"/rest/tasks/{task_id}/pushNotificationConfigs", REST_HEADERS),
            (f"/rest/v1/tasks/{task_id}/pushNotificationConfigs", REST_03),
            (f"/rest/tasks/{task_id}/pushNotificationConfigs/{HOOK}", REST_HEADERS),
            (f"/rest/v1/tasks/{task_id}/pushNotificationConfigs/{HOOK}", REST_03),
        ):
            response = await client.get(base + path, headers=alice.headers(headers))
            assert response.status_code == 200, response.text
            answers.append(response.text)
        # Set again as read back (secrets redacted): the stored secrets stay; bob's
        # config of the same id on his own task does not take alice's.
        resent = created["result"]
        again = await rpc_call(client, url, alice, "CreateTaskPushNotificationConfig", resent)
        store = setup.bridge.app.state.push.config_store
        kept = await store.get_info_for_dispatch(task_id)
        bob_task = await own_task(client, setup, setup.bob)
        await rpc_call(
            client,
            url,
            setup.bob,
            "CreateTaskPushNotificationConfig",
            {**hook(bob_task), "token": REDACTED, "id": "h2"},
        )
        bobs = await store.get_info_for_dispatch(bob_task)
    assert "error" not in again, again
    assert {(c.id, c.token, c.authentication.credentials) for c in kept} == {
        (HOOK, SECRET_TOKEN, SECRET_CREDENTIALS),
        ("h2", SECRET_TOKEN, SECRET_CREDENTIALS),
    }
    assert {c.id: c.token for c in bobs} == {HOOK: SECRET_TOKEN, "h2": REDACTED}
    answers.append(json.dumps(again))
    for answer in answers:
        assert not _mentions_secret(answer), answer
        assert REDACTED in answer, answer  # that one is set is shown
    assert created["result"]["token"] == REDACTED
    assert created["result"]["authentication"] == {"scheme": "Bearer", "credentials": REDACTED}


async def test_the_same_context_id_from_two_principals_is_two_conversations(
    tmp_path: Path,
) -> None:
    async with (
        principals(tmp_path, "token_file") as setup,
        httpx.AsyncClient(timeout=CLIENT_TIMEOUT_S) as client,
    ):
        url = setup.bridge.rpc_url
        shared = "shared-context"
        wrote = await rpc_call(
            client,
            url,
            setup.alice,
            "SendMessage",
            {"message": user_message("write alice.txt: mine", context_id=shared)},
        )
        listed = await rpc_call(
            client,
            url,
            setup.bob,
            "SendMessage",
            {"message": user_message("list", context_id=shared)},
        )
        bridge = setup.bridge.bridge
        alice_root = bridge.root_of(conversation_key("alice", shared))
        bob_root = bridge.root_of(conversation_key("bob", shared))
        bob_tasks = await rpc_call(client, url, setup.bob, "ListTasks", {"contextId": shared})
    # Both see their own contextId.
    assert wrote["result"]["task"]["contextId"] == shared
    assert listed["result"]["task"]["contextId"] == shared
    assert alice_root is not None
    assert bob_root is not None
    assert alice_root != bob_root
    assert (alice_root / "alice.txt").read_text().strip() == "mine"
    assert not (bob_root / "alice.txt").exists()
    assert "alice.txt" not in json.dumps(listed)
    assert [t["id"] for t in bob_tasks["result"]["tasks"]] == [listed["result"]["task"]["id"]]


async def _running(setup: Setup, client: httpx.AsyncClient, caller: Caller, context: str) -> str:
    """A task of `caller` whose turn runs on the agent (a long sleep) by the time this returns."""
    reply = await rpc_call(
        client,
        setup.bridge.rpc_url,
        caller,
        "SendMessage",
        {
            "message": user_message("sleep 600", context_id=context),
            "configuration": {"returnImmediately": True},
        },
    )
    task_id = str(reply["result"]["task"]["id"])
    bridge = setup.bridge.bridge
    with anyio.fail_after(TASK_WAIT_S):
        # Polled (bounded): the turn's phase has no event of its own.
        while (turn := bridge.turn(task_id)) is None or turn.phase is not Phase.RUNNING:  # noqa: ASYNC110
            await anyio.sleep(0.02)
    return task_id


async def _ended(setup: Setup, client: httpx.AsyncClient, caller: Caller, task_id: str) -> str:
    with anyio.fail_after(TASK_WAIT_S):
        while True:
            reply = await rpc_call(client, setup.bridge.rpc_url, caller, "GetTask", {"id": task_id})
            state = str(reply["result"]["status"]["state"])
            if state in ("TASK_STATE_CANCELED", "TASK_STATE_COMPLETED", "TASK_STATE_FAILED"):
                return state
            await anyio.sleep(0.05)


async def test_the_per_principal_cap_refuses_one_caller_not_the_others_and_the_operator_cancels(
    tmp_path: Path,
) -> None:
    env = {"ACP_MAX_SESSIONS": "4", "ACP_MAX_SESSIONS_PER_PRINCIPAL": "1"}
    async with (
        principals(tmp_path, "token_file", **env) as setup,
        httpx.AsyncClient(timeout=CLIENT_TIMEOUT_S) as client,
    ):
        url = setup.bridge.rpc_url
        sleeping = await _running(setup, client, setup.alice, "first")
        refused = await rpc_call(
            client,
            url,
            setup.alice,
            "SendMessage",
            {"message": user_message("hello", context_id="second")},
        )
        served = await rpc_call(
            client,
            url,
            setup.bob,
            "SendMessage",
            {"message": user_message("hello", context_id="first")},
        )
        # bob cannot cancel it (not found); the operator can.
        bob_cancel = await rpc_call(client, url, setup.bob, "CancelTask", {"id": sleeping})
        ops_cancel = await rpc_call(client, url, setup.ops, "CancelTask", {"id": sleeping})
        state = await _ended(setup, client, setup.alice, sleeping)
        # Still alice's after the operator's cancel: her list has it, the operator's view too.
        alice_list = await rpc_call(client, url, setup.alice, "ListTasks", {})
    task = refused["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_REJECTED"
    text = json.dumps(task["status"])
    assert "ACP_MAX_SESSIONS_PER_PRINCIPAL" in text
    assert "(1," in text
    assert served["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert bob_cancel["error"]["code"] == -32001
    assert "error" not in ops_cancel, ops_cancel
    assert state == "TASK_STATE_CANCELED"
    assert sleeping in {t["id"] for t in alice_list["result"]["tasks"]}


async def test_metrics_need_a_token_unless_public_and_logs_name_the_principal(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("INFO")
    async with (
        principals(tmp_path, "token_file") as setup,
        httpx.AsyncClient(timeout=CLIENT_TIMEOUT_S) as client,
    ):
        await own_task(client, setup, setup.bob)
        bare = await client.get(setup.bridge.url + "/metrics")
        with_token = await client.get(
            setup.bridge.url + "/metrics", headers={"Authorization": setup.bob.authorization}
        )
    assert bare.status_code == 401
    assert with_token.status_code == 200
    # A token file's names are bounded: a label (docs/operations.md, Metrics).
    assert 'a2a_acp_bridge_tasks_accepted_total{principal="bob"} 1.0' in with_token.text
    started = [r for r in caplog.records if r.getMessage() == "task started"]
    assert started
    assert all(getattr(r, "principal", None) == "bob" for r in started)
    logged = "\n".join(f"{r.getMessage()} {r.__dict__}" for r in caplog.records)
    assert BOB_TOKEN not in logged
    assert ALICE_TOKEN not in logged
    assert SECRET_TOKEN not in logged
    assert SECRET_CREDENTIALS not in logged

    async with (
        serve_bridge(
            make_settings(
                tmp_path / "public",
                {"A2A_TOKEN_FILE": str(token_file(tmp_path)), "A2A_METRICS_PUBLIC": "true"},
            )
        ) as public,
        httpx.AsyncClient(timeout=CLIENT_TIMEOUT_S) as client,
    ):
        open_metrics = await client.get(public.url + "/metrics")
        still_closed = await client.post(public.rpc_url, json={}, headers=RPC_10)
    assert open_metrics.status_code == 200
    assert still_closed.status_code == 401


async def test_ownership_survives_a_restart(tmp_path: Path) -> None:
    tokens = token_file(tmp_path)
    env = {"A2A_TOKEN_FILE": str(tokens), "ACP_POOL_SIZE": "0"}
    alice = Caller("alice", f"Bearer {ALICE_TOKEN}")
    bob = Caller("bob", f"Bearer {BOB_TOKEN}")
    async with httpx.AsyncClient(timeout=CLIENT_TIMEOUT_S) as client:
        first = await BridgeProcess(tmp_path, env, "first").start()
        try:
            reply = await rpc_call(
                client,
                first.rpc_url,
                alice,
                "SendMessage",
                {"message": user_message("hello", context_id="kept")},
            )
            task_id = reply["result"]["task"]["id"]
        finally:
            await first.stop()
            first.close()
        second = await BridgeProcess(tmp_path, env, "second").start()
        try:
            own = await rpc_call(client, second.rpc_url, alice, "GetTask", {"id": task_id})
            other = await rpc_call(client, second.rpc_url, bob, "GetTask", {"id": task_id})
            missing = await rpc_call(client, second.rpc_url, bob, "GetTask", {"id": "nope"})
            listed = await rpc_call(client, second.rpc_url, bob, "ListTasks", {})
        finally:
            await second.stop()
            second.close()
    assert own["result"]["id"] == task_id
    assert other["error"]["code"] == missing["error"]["code"] == -32001
    assert re.sub(r"\S*nope\S*|\S*" + task_id + r"\S*", "ID", other["error"]["message"]) == (
        re.sub(r"\S*nope\S*|\S*" + task_id + r"\S*", "ID", missing["error"]["message"])
    )
    assert listed["result"]["tasks"] == []


async def test_tasks_stored_before_principals_belong_to_the_default_principal(
    tmp_path: Path,
) -> None:
    """A state directory written before principals (owner empty) is `default`'s: the caller
    of A2A_TOKEN still finds its tasks after the upgrade; a named principal does not."""
    state = tmp_path / ".a2a-acp-bridge"
    state.mkdir(mode=0o700)
    engine = create_engine(f"sqlite:///{state / 'state.db'}")
    with engine.begin() as conn:
        migrate(conn, target=1)
    engine.dispose()
    task = Task(id="old-task", context_id="old-context")
    task.status.state = TaskState.TASK_STATE_COMPLETED
    with sqlite3.connect(state / "state.db") as db:
        db.execute(
            "insert into tasks values (?, ?, '', 'TASK_STATE_COMPLETED', ?, ?, ?)",
            (task.id, task.context_id, time.time_ns(), time.time_ns(), task.SerializeToString()),
        )
    default = Caller("default", f"Bearer {ALICE_TOKEN}")
    process = await BridgeProcess(tmp_path, {"A2A_TOKEN": ALICE_TOKEN}).start()
    try:
        async with httpx.AsyncClient(timeout=CLIENT_TIMEOUT_S) as client:
            got = await rpc_call(client, process.rpc_url, default, "GetTask", {"id": task.id})
    finally:
        await process.stop()
        process.close()
    assert got["result"]["id"] == task.id
    with sqlite3.connect(state / "state.db") as db:
        owners = db.execute("select owner from tasks").fetchall()
    assert owners in ([("",)], [("default",)])
