"""Every A2A 1.0 operation over real HTTP: send (blocking, returnImmediately, historyLength),
stream, get, list, cancel, subscribe, and the multi-turn rules."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from tests.support.agents import scripted_agent
from tests.support.server import RunningBridge, make_settings, serve_bridge
from tests.support.wire import (
    TERMINAL,
    answer_text,
    error_code,
    rest,
    rpc,
    send,
    state_of,
    stream,
    user_message,
)

pytestmark = pytest.mark.anyio

SCRIPT = {
    "by_prompt": {
        "long": [{"op": "say", "text": "started\n"}, {"op": "wait_cancel"}],
        "slow": [
            {"op": "say", "text": "begun\n"},
            {"op": "sleep", "seconds": 1.0},
            {"op": "say", "text": "done\n"},
        ],
        "nothing": [],
        "quiet": [{"op": "wait_cancel"}],
    },
    "turns": [[{"op": "say", "text": "hello from the agent"}]],
}


@pytest.fixture
async def bridge(tmp_path: Path) -> AsyncIterator[RunningBridge]:
    settings = make_settings(tmp_path, {"ACP_AGENT": scripted_agent(tmp_path, SCRIPT)})
    async with serve_bridge(settings) as running:
        yield running


async def _wait_for_state(
    client: httpx.AsyncClient, url: str, task_id: str, states: set[str]
) -> dict[str, Any]:
    with anyio.fail_after(20):
        while True:
            reply = await rpc(client, url, "GetTask", {"id": task_id})
            task: dict[str, Any] = reply["result"]
            if task["status"]["state"] in states:
                return task
            await anyio.sleep(0.05)


# --- SendMessage ----------------------------------------------------------------------


async def test_send_blocks_by_default_until_the_task_is_terminal(bridge: RunningBridge) -> None:
    async with httpx.AsyncClient(timeout=30) as client:
        task = await send(client, bridge.rpc_url, "slow")
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    assert answer_text(task) == "begun\ndone\n"


async def test_return_immediately_answers_before_the_turn_ends(bridge: RunningBridge) -> None:
    async with httpx.AsyncClient(timeout=30) as client:
        reply = await rpc(
            client,
            bridge.rpc_url,
            "SendMessage",
            {"message": user_message("slow"), "configuration": {"returnImmediately": True}},
        )
        task = reply["result"]["task"]
        done = await _wait_for_state(client, bridge.rpc_url, task["id"], TERMINAL)
    assert task["status"]["state"] not in TERMINAL
    assert done["status"]["state"] == "TASK_STATE_COMPLETED"
    assert answer_text(done) == "begun\ndone\n"


async def test_history_length_limits_the_history_returned(bridge: RunningBridge) -> None:
    async with httpx.AsyncClient(timeout=30) as client:
        none = await rpc(
            client,
            bridge.rpc_url,
            "SendMessage",
            {"message": user_message("hi"), "configuration": {"historyLength": 0}},
        )
        task = none["result"]["task"]
        full = await rpc(client, bridge.rpc_url, "GetTask", {"id": task["id"]})
        one = await rpc(client, bridge.rpc_url, "GetTask", {"id": task["id"], "historyLength": 1})
    assert "history" not in task
    assert full["result"]["history"][0]["parts"][0]["text"] == "hi"
    assert len(one["result"]["history"]) == 1


async def test_a_message_with_nothing_usable_asks_for_text_and_keeps_the_message(
    bridge: RunningBridge,
) -> None:
    async with httpx.AsyncClient(timeout=30) as client:
        task = await send(client, bridge.rpc_url, "   ")
        follow = await send(client, bridge.rpc_url, "hi", task_id=task["id"])
    assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    words = "".join(p.get("text", "") for p in task["status"]["message"]["parts"])
    assert "send the task as text" in words
    assert task["history"][0]["parts"][0]["text"] == "   "
    assert follow["id"] == task["id"]
    assert follow["status"]["state"] == "TASK_STATE_COMPLETED"
    texts = [part.get("text") for message in follow["history"] for part in message["parts"]]
    assert "   " in texts
    assert "hi" in texts


# --- streaming and subscription ---------------------------------------------------------


async def test_subscribe_starts_with_the_current_task_then_follows_it_live(
    bridge: RunningBridge,
) -> None:
    async with httpx.AsyncClient(timeout=30) as client:
        reply = await rpc(
            client,
            bridge.rpc_url,
            "SendMessage",
            {"message": user_message("slow"), "configuration": {"returnImmediately": True}},
        )
        task_id = reply["result"]["task"]["id"]
        events = [
            event
            async for event in stream(
                client, bridge.rpc_url, {"id": task_id}, method="SubscribeToTask"
            )
        ]
    assert "task" in events[0]
    assert events[0]["task"]["id"] == task_id
    assert events[0]["task"]["status"]["state"] not in TERMINAL
    assert state_of(events[-1]) == "TASK_STATE_COMPLETED"
    chunks = [e["artifactUpdate"] for e in events if "artifactUpdate" in e]
    text = "".join(p.get("text", "") for c in chunks for p in c["artifact"]["parts"])
    assert "done\n" in text


async def test_subscribing_to_a_terminal_task_is_an_unsupported_operation(
    bridge: RunningBridge,
) -> None:
    async with httpx.AsyncClient(timeout=30) as client:
        task = await send(client, bridge.rpc_url, "hi")
        body = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "SubscribeToTask",
            "params": {"id": task["id"]},
        }
        response = await client.post(
            bridge.rpc_url,
            json=body,
            headers={"A2A-Version": "1.0", "Content-Type": "application/json"},
        )
        rest_response = await rest(client, bridge.url, "POST", f"/tasks/{task['id']}:subscribe")
    assert response.json()["error"]["code"] == -32004
    assert rest_response.status_code == 400
    assert rest_response.json()["error"]["details"][0]["reason"] == "UNSUPPORTED_OPERATION"


async def test_two_subscribers_see_the_same_events_in_the_same_order(
    bridge: RunningBridge,
) -> None:
    async with httpx.AsyncClient(timeout=30) as client:
        reply = await rpc(
            client,
            bridge.rpc_url,
            "SendMessage",
            {"message": user_message("slow"), "configuration": {"returnImmediately": True}},
        )
        task_id = reply["result"]["task"]["id"]
        seen: list[list[dict[str, Any]]] = [[], []]

        async def follow(index: int) -> None:
            async for event in stream(
                client, bridge.rpc_url, {"id": task_id}, method="SubscribeToTask"
            ):
                seen[index].append(event)

        async with anyio.create_task_group() as group:
            group.start_soon(follow, 0)
            group.start_soon(follow, 1)
    live = [[json.dumps(e, sort_keys=True) for e in events[1:]] for events in seen]
    assert state_of(seen[0][-1]) == "TASK_STATE_COMPLETED"
    # Each stream starts with its own snapshot; what follows is common to both.
    common = min(len(live[0]), len(live[1]))
    assert common > 0
    assert live[0][-common:] == live[1][-common:]


# --- GetTask, ListTasks -----------------------------------------------------------------


async def test_list_tasks_filters_by_context_and_state_and_pages(bridge: RunningBridge) -> None:
    async with httpx.AsyncClient(timeout=30) as client:
        first = await send(client, bridge.rpc_url, "hi")
        context_id = first["contextId"]
        for _ in range(2):
            await send(client, bridge.rpc_url, "hi", context_id=context_id)
        asking = await send(client, bridge.rpc_url, "", context_id=context_id)
        other = await send(client, bridge.rpc_url, "hi")
        page1 = await rpc(
            client, bridge.rpc_url, "ListTasks", {"contextId": context_id, "pageSize": 2}
        )
        token = page1["result"]["nextPageToken"]
        page2 = await rpc(
            client,
            bridge.rpc_url,
            "ListTasks",
            {"contextId": context_id, "pageSize": 2, "pageToken": token},
        )
        waiting = await rpc(
            client,
            bridge.rpc_url,
            "ListTasks",
            {"contextId": context_id, "status": "TASK_STATE_INPUT_REQUIRED"},
        )
        listed = await rest(client, bridge.url, "GET", f"/tasks?contextId={context_id}")
    ids = [t["id"] for t in page1["result"]["tasks"] + page2["result"]["tasks"]]
    assert page1["result"]["totalSize"] == 4
    assert len(page1["result"]["tasks"]) == 2
    assert token
    assert len(set(ids)) == 4
    assert other["id"] not in ids
    assert [t["id"] for t in waiting["result"]["tasks"]] == [asking["id"]]
    assert listed.status_code == 200
    assert {t["id"] for t in listed.json()["tasks"]} == set(ids)


async def test_listing_without_artifacts_leaves_the_stored_artifacts_alone(
    bridge: RunningBridge,
) -> None:
    async with httpx.AsyncClient(timeout=30) as client:
        task = await send(client, bridge.rpc_url, "hi")
        listed = await rpc(client, bridge.rpc_url, "ListTasks", {"contextId": task["contextId"]})
        again = await rpc(client, bridge.rpc_url, "GetTask", {"id": task["id"]})
    assert "artifacts" not in listed["result"]["tasks"][0]
    assert answer_text(again["result"]) == "hello from the agent"


# --- CancelTask -------------------------------------------------------------------------


async def test_cancelling_a_running_task_ends_it_canceled(bridge: RunningBridge) -> None:
    async with httpx.AsyncClient(timeout=30) as client:
        reply = await rpc(
            client,
            bridge.rpc_url,
            "SendMessage",
            {"message": user_message("long"), "configuration": {"returnImmediately": True}},
        )
        task_id = reply["result"]["task"]["id"]
        await _wait_for_state(client, bridge.rpc_url, task_id, {"TASK_STATE_WORKING"})
        cancelled = await rpc(client, bridge.rpc_url, "CancelTask", {"id": task_id})
        again = await rpc(client, bridge.rpc_url, "CancelTask", {"id": task_id})
    assert cancelled["result"]["status"]["state"] == "TASK_STATE_CANCELED"
    assert error_code(again) == -32002


async def test_a_quiet_blocking_send_is_visible_and_cancellable_from_the_start(
    bridge: RunningBridge,
) -> None:
    async with httpx.AsyncClient(timeout=30) as client, anyio.create_task_group() as group:
        await send(client, bridge.rpc_url, "nothing")  # the agent is known from now on
        blocked: dict[str, Any] = {}

        async def blocking_send() -> None:
            reply = await rpc(
                client, bridge.rpc_url, "SendMessage", {"message": user_message("quiet")}
            )
            blocked.update(reply["result"]["task"])

        group.start_soon(blocking_send)
        with anyio.fail_after(5):
            while True:  # the blocking call has not returned: the task must be listed
                listed = await rpc(
                    client, bridge.rpc_url, "ListTasks", {"status": "TASK_STATE_WORKING"}
                )
                if listed["result"]["tasks"]:
                    break
                await anyio.sleep(0.05)
        [working] = listed["result"]["tasks"]
        cancelled = await rpc(client, bridge.rpc_url, "CancelTask", {"id": working["id"]})
    assert cancelled["result"]["status"]["state"] == "TASK_STATE_CANCELED"
    assert blocked["id"] == working["id"]
    assert blocked["status"]["state"] == "TASK_STATE_CANCELED"


# --- multi-turn -------------------------------------------------------------------------


async def test_a_task_id_that_names_no_task_is_task_not_found(bridge: RunningBridge) -> None:
    async with httpx.AsyncClient(timeout=30) as client:
        reply = await rpc(
            client, bridge.rpc_url, "SendMessage", {"message": user_message("hi", task_id="nope")}
        )
    assert error_code(reply) == -32001


async def test_a_follow_up_naming_only_the_task_keeps_its_context(bridge: RunningBridge) -> None:
    async with httpx.AsyncClient(timeout=30) as client:
        first = await send(client, bridge.rpc_url, "")
        follow = await send(client, bridge.rpc_url, "hi", task_id=first["id"])
    assert first["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    assert follow["contextId"] == first["contextId"]
    assert all(m["contextId"] == first["contextId"] for m in follow["history"])
    assert follow["status"]["state"] == "TASK_STATE_COMPLETED"


async def test_a_task_and_context_that_do_not_match_are_rejected(bridge: RunningBridge) -> None:
    async with httpx.AsyncClient(timeout=30) as client:
        first = await send(client, bridge.rpc_url, "")
        reply = await rpc(
            client,
            bridge.rpc_url,
            "SendMessage",
            {"message": user_message("hi", task_id=first["id"], context_id="another")},
        )
        unchanged = await rpc(client, bridge.rpc_url, "GetTask", {"id": first["id"]})
    assert error_code(reply) == -32602
    assert unchanged["result"]["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"


async def test_a_message_to_a_terminal_task_is_an_unsupported_operation(
    bridge: RunningBridge,
) -> None:
    async with httpx.AsyncClient(timeout=30) as client:
        first = await send(client, bridge.rpc_url, "hi")
        reply = await rpc(
            client,
            bridge.rpc_url,
            "SendMessage",
            {"message": user_message("hi", task_id=first["id"])},
        )
    assert error_code(reply) == -32004


async def test_a_message_to_a_task_still_working_is_refused_not_lost(
    bridge: RunningBridge,
) -> None:
    async with httpx.AsyncClient(timeout=30) as client:
        reply = await rpc(
            client,
            bridge.rpc_url,
            "SendMessage",
            {"message": user_message("long"), "configuration": {"returnImmediately": True}},
        )
        task_id = reply["result"]["task"]["id"]
        await _wait_for_state(client, bridge.rpc_url, task_id, {"TASK_STATE_WORKING"})
        extra = user_message("and also this", task_id=task_id)
        refused = await rpc(client, bridge.rpc_url, "SendMessage", {"message": extra})
        await rpc(client, bridge.rpc_url, "CancelTask", {"id": task_id})
    assert error_code(refused) == -32004
    assert "still working" in refused["error"]["message"]


async def test_the_rest_binding_serves_the_same_operations(bridge: RunningBridge) -> None:
    async with httpx.AsyncClient(timeout=30) as client:
        sent = await rest(
            client, bridge.url, "POST", "/message:send", {"message": user_message("hi")}
        )
        task = sent.json()["task"]
        got = await rest(client, bridge.url, "GET", f"/tasks/{task['id']}?historyLength=0")
        missing = await rest(client, bridge.url, "GET", "/tasks/nope")
        not_cancelable = await rest(client, bridge.url, "POST", f"/tasks/{task['id']}:cancel")
    assert sent.status_code == 200
    assert sent.headers["content-type"].startswith("application/a2a+json")
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    assert got.status_code == 200
    assert "history" not in got.json()
    assert missing.status_code == 404
    assert missing.json()["error"]["details"][0]["reason"] == "TASK_NOT_FOUND"
    assert not_cancelable.status_code == 400
    assert not_cancelable.json()["error"]["details"][0]["reason"] == "TASK_NOT_CANCELABLE"
