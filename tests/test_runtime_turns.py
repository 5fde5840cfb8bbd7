"""Turns through the running bridge: one adapter per context, one turn at a time, cancel
that always ends CANCELED, and deadlines that reset with every update."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from tests.support.agents import CLAUDE_INFO, CLAUDE_MODES, logged_agent
from tests.support.procs import events, living, read_log, wait_for_event
from tests.support.server import make_settings, serve_bridge
from tests.support.tasks import cancel_task, start_stream
from tests.support.wire import answer_text, send, status_text

pytestmark = pytest.mark.anyio

FAST = {"ACP_CANCEL_GRACE_MS": "3000"}


def prompts(log: Path) -> list[str]:
    return [
        "".join(block.get("text", "") for block in entry["params"]["prompt"])
        for entry in events(log, "session/prompt")
    ]


async def test_concurrent_first_messages_of_a_context_share_one_adapter_and_take_turns(
    tmp_path: Path,
) -> None:
    script = {"delay": {"initialize": 0.5}, "turns": [[{"op": "sleep", "seconds": 0.2}]]}
    agent, log = logged_agent(tmp_path, script)
    settings = make_settings(tmp_path, {"ACP_AGENT": agent})
    context_id = str(uuid.uuid4())
    results: dict[int, dict[str, Any]] = {}
    async with serve_bridge(settings) as bridge, httpx.AsyncClient(timeout=30) as client:

        async def one(index: int) -> None:
            results[index] = await send(
                client, bridge.rpc_url, f"message {index}", context_id=context_id
            )

        async with anyio.create_task_group() as group:
            for index in range(4):
                group.start_soon(one, index)
    assert [results[i]["status"]["state"] for i in range(4)] == ["TASK_STATE_COMPLETED"] * 4
    assert {results[i]["contextId"] for i in range(4)} == {context_id}
    assert len(events(log, "start")) == 1
    assert sorted(prompts(log)) == [f"message {i}" for i in range(4)]
    # One turn at a time: every prompt ended before the next began.
    turn_events = [
        entry["event"]
        for entry in read_log(log)
        if entry["event"] in ("session/prompt", "prompt_done")
    ]
    assert turn_events == ["session/prompt", "prompt_done"] * 4
    assert living(log) == []


async def test_a_second_message_waits_as_its_own_task_and_cancelling_it_leaves_the_first_alone(
    tmp_path: Path,
) -> None:
    go = tmp_path / "go"
    script = {
        "by_prompt": {
            "first": [{"op": "say", "text": "first started"}, {"op": "wait_file", "path": str(go)}],
        },
        "turns": [[{"op": "say", "text": "later"}]],
    }
    agent, log = logged_agent(tmp_path, script)
    settings = make_settings(tmp_path, {"ACP_AGENT": agent})
    async with (
        serve_bridge(settings) as bridge,
        httpx.AsyncClient(timeout=30) as client,
        anyio.create_task_group() as group,
    ):
        first = start_stream(group, client, bridge.rpc_url, "first")
        await first.wait_for(lambda t: any("answer" in str(e) for e in t.events[2:]))
        assert first.context_id is not None
        second = start_stream(group, client, bridge.rpc_url, "second", context_id=first.context_id)
        await second.wait_for(lambda t: any("Queued" in m for m in t.status_messages()))
        assert second.task_id is not None
        assert second.task_id != first.task_id
        reply = await cancel_task(client, bridge.rpc_url, second.task_id)
        assert reply["result"]["status"]["state"] == "TASK_STATE_CANCELED"
        await second.wait_end()
        assert "TASK_STATE_CANCELED" in second.states
        assert first.final_state is None  # still running
        go.touch()
        await first.wait_end()
        third = await send(client, bridge.rpc_url, "third", context_id=first.context_id)
    assert first.final_state == "TASK_STATE_COMPLETED"
    assert second.final_state == "TASK_STATE_CANCELED"
    assert third["status"]["state"] == "TASK_STATE_COMPLETED"
    assert prompts(log) == ["first", "third"]  # the cancelled task never reached the agent
    assert len(events(log, "session/cancel")) == 0  # nor was the running turn touched


async def test_cancelling_a_running_task_sends_session_cancel_and_ends_it_canceled(
    tmp_path: Path,
) -> None:
    script = {"turns": [[{"op": "say", "text": "on it"}, {"op": "wait_cancel"}]]}
    agent, log = logged_agent(tmp_path, script)
    settings = make_settings(tmp_path, {"ACP_AGENT": agent, **FAST})
    async with (
        serve_bridge(settings) as bridge,
        httpx.AsyncClient(timeout=30) as client,
        anyio.create_task_group() as group,
    ):
        task = start_stream(group, client, bridge.rpc_url, "go")
        await task.wait_for(lambda t: "on it" in str(t.events))
        assert task.task_id is not None
        reply = await cancel_task(client, bridge.rpc_url, task.task_id)
        await task.wait_end()
    assert reply["result"]["status"]["state"] == "TASK_STATE_CANCELED"
    assert task.final_state == "TASK_STATE_CANCELED"
    assert task.final_text == "Cancelled at the caller's request."
    assert len(events(log, "session/cancel")) == 1
    assert [e["stopReason"] for e in events(log, "prompt_done")] == ["cancelled"]


async def test_a_cancelled_task_ends_canceled_even_when_the_agent_reports_end_turn(
    tmp_path: Path,
) -> None:
    # github/copilot-cli #4561: session/cancel answered with end_turn.
    script = {
        "turns": [[{"op": "say", "text": "on it"}, {"op": "wait_cancel", "reason": "end_turn"}]]
    }
    agent, log = logged_agent(tmp_path, script)
    settings = make_settings(tmp_path, {"ACP_AGENT": agent, **FAST})
    async with (
        serve_bridge(settings) as bridge,
        httpx.AsyncClient(timeout=30) as client,
        anyio.create_task_group() as group,
    ):
        task = start_stream(group, client, bridge.rpc_url, "go")
        await task.wait_for(lambda t: "on it" in str(t.events))
        assert task.task_id is not None
        await cancel_task(client, bridge.rpc_url, task.task_id)
        await task.wait_end()
    assert [e["stopReason"] for e in events(log, "prompt_done")] == ["end_turn"]
    assert task.final_state == "TASK_STATE_CANCELED"
    assert "had already finished" in task.final_text


async def test_permission_requests_that_arrive_after_a_cancel_are_answered_cancelled(
    tmp_path: Path,
) -> None:
    permission = {
        "op": "permission",
        "tool_call": {"toolCallId": "late", "title": "Read notes", "kind": "read"},
        "options": [["allow-once", "Allow", "allow_once"], ["reject", "Reject", "reject_once"]],
    }
    script = {
        "turns": [
            [
                {"op": "say", "text": "on it"},
                {"op": "wait_cancel", "then_continue": True},
                permission,
                {"op": "stop", "reason": "cancelled"},
            ]
        ]
    }
    agent, _log = logged_agent(tmp_path, script)
    settings = make_settings(tmp_path, {"ACP_AGENT": agent, **FAST})
    async with (
        serve_bridge(settings) as bridge,
        httpx.AsyncClient(timeout=30) as client,
        anyio.create_task_group() as group,
    ):
        task = start_stream(group, client, bridge.rpc_url, "go")
        await task.wait_for(lambda t: "on it" in str(t.events))
        assert task.task_id is not None
        await cancel_task(client, bridge.rpc_url, task.task_id)
        await task.wait_end()
    assert task.final_state == "TASK_STATE_CANCELED"
    assert "permission late: cancelled" in str(task.events)


async def test_an_agent_slow_to_stop_after_a_cancel_is_stopped_and_the_task_ends_canceled(
    tmp_path: Path,
) -> None:
    script = {
        "turns": [[{"op": "say", "text": "on it"}, {"op": "wait_cancel", "delay": 60}]],
        "by_prompt": {"again": [{"op": "say", "text": "a new adapter answers"}]},
    }
    agent, log = logged_agent(tmp_path, script)
    settings = make_settings(tmp_path, {"ACP_AGENT": agent, "ACP_CANCEL_GRACE_MS": "300"})
    async with (
        serve_bridge(settings) as bridge,
        httpx.AsyncClient(timeout=30) as client,
        anyio.create_task_group() as group,
    ):
        task = start_stream(group, client, bridge.rpc_url, "go")
        await task.wait_for(lambda t: "on it" in str(t.events))
        assert task.task_id is not None
        await cancel_task(client, bridge.rpc_url, task.task_id)
        await task.wait_end()
        first_agent = events(log, "start")[0]
        assert not any(p.pid == first_agent["pid"] for p in living(log))
        again = await send(client, bridge.rpc_url, "again", context_id=task.context_id)
    assert task.final_state == "TASK_STATE_CANCELED"
    assert again["status"]["state"] == "TASK_STATE_COMPLETED"
    assert len(events(log, "start")) == 2
    assert living(log) == []


async def test_an_agent_that_stops_within_the_grace_keeps_serving_the_conversation(
    tmp_path: Path,
) -> None:
    script = {
        "turns": [
            [{"op": "say", "text": "on it"}, {"op": "wait_cancel", "delay": 0.3}],
            [{"op": "say", "text": "second answer"}],
        ]
    }
    agent, log = logged_agent(tmp_path, script)
    settings = make_settings(tmp_path, {"ACP_AGENT": agent, **FAST})
    async with (
        serve_bridge(settings) as bridge,
        httpx.AsyncClient(timeout=30) as client,
        anyio.create_task_group() as group,
    ):
        task = start_stream(group, client, bridge.rpc_url, "go")
        await task.wait_for(lambda t: "on it" in str(t.events))
        assert task.task_id is not None
        await cancel_task(client, bridge.rpc_url, task.task_id)
        await task.wait_end()
        again = await send(client, bridge.rpc_url, "again", context_id=task.context_id)
    assert task.final_state == "TASK_STATE_CANCELED"
    assert "second answer" in answer_text(again)
    assert len(events(log, "start")) == 1


async def test_a_stale_stop_reason_from_a_cancelled_turn_does_not_end_the_next_task(
    tmp_path: Path,
) -> None:
    # claude-agent-acp #551: the cancelled turn's stop reason surfaces on the next prompt.
    script = {
        "turns": [
            [{"op": "say", "text": "on it"}, {"op": "stale_cancel"}, {"op": "wait_cancel"}],
            [{"op": "say", "text": "the real answer"}],
        ]
    }
    agent, log = logged_agent(tmp_path, script)
    settings = make_settings(tmp_path, {"ACP_AGENT": agent, **FAST})
    async with (
        serve_bridge(settings) as bridge,
        httpx.AsyncClient(timeout=30) as client,
        anyio.create_task_group() as group,
    ):
        task = start_stream(group, client, bridge.rpc_url, "go")
        await task.wait_for(lambda t: "on it" in str(t.events))
        assert task.task_id is not None
        await cancel_task(client, bridge.rpc_url, task.task_id)
        await task.wait_end()
        again = await send(client, bridge.rpc_url, "again", context_id=task.context_id)
    assert task.final_state == "TASK_STATE_CANCELED"
    assert again["status"]["state"] == "TASK_STATE_COMPLETED"
    assert "the real answer" in answer_text(again)
    assert [e["stopReason"] for e in events(log, "prompt_done")] == [
        "cancelled",
        "cancelled",
        "end_turn",
    ]


async def test_a_cancel_before_the_adapter_has_started_is_honoured_without_a_prompt(
    tmp_path: Path,
) -> None:
    script = {"delay": {"initialize": 1.0}, "turns": [[{"op": "say", "text": "hello"}]]}
    agent, log = logged_agent(tmp_path, script)
    settings = make_settings(tmp_path, {"ACP_AGENT": agent})
    async with (
        serve_bridge(settings) as bridge,
        httpx.AsyncClient(timeout=30) as client,
        anyio.create_task_group() as group,
    ):
        task = start_stream(group, client, bridge.rpc_url, "never sent")
        await task.wait_state("TASK_STATE_WORKING")
        assert task.task_id is not None
        assert events(log, "session/new") == []
        reply = await cancel_task(client, bridge.rpc_url, task.task_id)
        await task.wait_end()
        again = await send(client, bridge.rpc_url, "hello", context_id=task.context_id)
    assert reply["result"]["status"]["state"] == "TASK_STATE_CANCELED"
    assert task.final_state == "TASK_STATE_CANCELED"
    assert again["status"]["state"] == "TASK_STATE_COMPLETED"
    assert prompts(log) == ["hello"]
    assert len(events(log, "start")) == 1  # the adapter started once, for the conversation


async def test_updates_reset_the_silence_deadline_so_a_long_busy_turn_completes(
    tmp_path: Path,
) -> None:
    steps: list[dict[str, Any]] = []
    for index in range(8):
        steps += [{"op": "think", "text": f"step {index}"}, {"op": "sleep", "seconds": 0.25}]
    script = {"turns": [[*steps, {"op": "say", "text": "done"}]]}
    agent, _log = logged_agent(tmp_path, script)
    settings = make_settings(tmp_path, {"ACP_AGENT": agent, "ACP_SILENCE_TIMEOUT_MS": "1500"})
    async with serve_bridge(settings) as bridge, httpx.AsyncClient(timeout=30) as client:
        task = await send(client, bridge.rpc_url, "go")
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    assert "done" in answer_text(task)


async def test_a_silent_turn_fails_naming_the_silence_after_session_cancel(
    tmp_path: Path,
) -> None:
    script = {
        "turns": [
            [{"op": "say", "text": "on it"}, {"op": "sleep", "seconds": 60}],
            [{"op": "say", "text": "second answer"}],
        ]
    }
    agent, log = logged_agent(tmp_path, script)
    settings = make_settings(tmp_path, {"ACP_AGENT": agent, "ACP_SILENCE_TIMEOUT_MS": "300"})
    async with serve_bridge(settings) as bridge, httpx.AsyncClient(timeout=30) as client:
        task = await send(client, bridge.rpc_url, "go")
        again = await send(client, bridge.rpc_url, "again", context_id=task["contextId"])
    assert task["status"]["state"] == "TASK_STATE_FAILED"
    message = status_text(task["status"])
    assert "sent no update for" in message
    assert "the limit is 300 ms, ACP_SILENCE_TIMEOUT_MS" in message
    assert len(events(log, "session/cancel")) >= 1
    # The agent stopped its turn on the cancel, so it keeps serving the conversation.
    assert "stopped the agent" not in message
    assert len(events(log, "start")) == 1
    assert "second answer" in answer_text(again)


async def test_the_optional_hard_cap_ends_a_turn_that_keeps_talking(tmp_path: Path) -> None:
    steps: list[dict[str, Any]] = []
    for index in range(100):
        steps += [{"op": "think", "text": f"step {index}"}, {"op": "sleep", "seconds": 0.05}]
    script = {"turns": [steps]}
    agent, log = logged_agent(tmp_path, script)
    settings = make_settings(tmp_path, {"ACP_AGENT": agent, "ACP_TURN_TIMEOUT_MS": "800"})
    async with serve_bridge(settings) as bridge, httpx.AsyncClient(timeout=30) as client:
        task = await send(client, bridge.rpc_url, "go")
    assert task["status"]["state"] == "TASK_STATE_FAILED"
    message = status_text(task["status"])
    assert "did not finish its turn within 800 ms (ACP_TURN_TIMEOUT_MS)" in message
    assert len(events(log, "session/cancel")) == 1


async def test_a_cancel_while_the_session_is_put_back_in_its_mode_is_honoured_without_a_prompt(
    tmp_path: Path,
) -> None:
    # Between turns the agent switches itself to `auto`; before the next prompt the bridge
    # switches it back (slowly here), and the task is cancelled meanwhile.
    script = {
        "agent_info": CLAUDE_INFO,
        "modes": CLAUDE_MODES,
        "config_mode": True,
        "delay_after_prompt": {"session/set_config_option": 2.0},
        "by_prompt": {
            "first": [
                {"op": "say", "text": "one"},
                {"op": "after", "delay": 0.05, "steps": [{"op": "mode", "id": "auto"}]},
            ],
        },
    }
    agent, log = logged_agent(tmp_path, script)
    settings = make_settings(tmp_path, {"ACP_AGENT": agent})
    async with (
        serve_bridge(settings) as bridge,
        httpx.AsyncClient(timeout=30) as client,
        anyio.create_task_group() as group,
    ):
        first = await send(client, bridge.rpc_url, "first")
        session = bridge.bridge._conversations[first["contextId"]].session
        assert session is not None
        with anyio.fail_after(10):
            while session.unsupervised_mode() is None:  # noqa: ASYNC110 - another process
                await anyio.sleep(0.02)
        second = start_stream(
            group, client, bridge.rpc_url, "second", context_id=first["contextId"]
        )
        await wait_for_event(log, "session/set_config_option", count=2)
        assert second.task_id is not None
        await cancel_task(client, bridge.rpc_url, second.task_id)
        await second.wait_end()
    assert second.final_state == "TASK_STATE_CANCELED"
    assert prompts(log) == ["first"]
