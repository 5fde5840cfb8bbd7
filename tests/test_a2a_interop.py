"""The official a2a-sdk client, A2A 1.0 and 0.3, on both bindings, over real HTTP."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import httpx
import pytest
from a2a.client import A2ACardResolver, Client, ClientConfig, create_client
from a2a.types.a2a_pb2 import (
    AgentCard,
    CancelTaskRequest,
    GetTaskPushNotificationConfigRequest,
    GetTaskRequest,
    ListTasksRequest,
    Message,
    Part,
    Role,
    SendMessageConfiguration,
    SendMessageRequest,
    StreamResponse,
    SubscribeToTaskRequest,
    Task,
    TaskPushNotificationConfig,
    TaskState,
)
from a2a.utils.errors import TaskNotFoundError

from tests.support.agents import scripted_agent
from tests.support.server import RunningBridge, make_settings, serve_bridge
from tests.support.webhook import serve_webhook

pytestmark = pytest.mark.anyio

SCRIPT = {
    "by_prompt": {
        "long": [{"op": "say", "text": "started\n"}, {"op": "wait_cancel"}],
        "ask": [
            {"op": "say", "text": "let me ask\n"},
            {"op": "ask", "message": "Which colour?"},
            {"op": "say", "text": "thanks\n"},
        ],
        "slow": [{"op": "say", "text": "begun\n"}, {"op": "sleep", "seconds": 0.5}],
    },
    "turns": [[{"op": "say", "text": "hello from the agent"}]],
}
BINDINGS = ["JSONRPC", "HTTP+JSON"]
TERMINAL = {
    TaskState.TASK_STATE_COMPLETED,
    TaskState.TASK_STATE_CANCELED,
    TaskState.TASK_STATE_FAILED,
    TaskState.TASK_STATE_REJECTED,
}


def _message(text: str, task_id: str | None = None) -> Message:
    message = Message(message_id=uuid.uuid4().hex, role=Role.ROLE_USER, parts=[Part(text=text)])
    if task_id:
        message.task_id = task_id
    return message


def _answer(task: Task) -> str:
    return "".join(
        part.text
        for artifact in task.artifacts
        if artifact.artifact_id == "answer"
        for part in artifact.parts
        if part.WhichOneof("content") == "text"
    )


async def _client(
    http: httpx.AsyncClient, card: AgentCard, binding: str, *, streaming: bool
) -> Client:
    config = ClientConfig(
        streaming=streaming, httpx_client=http, supported_protocol_bindings=[binding]
    )
    return await create_client(card, config)


async def _card(bridge: RunningBridge, http: httpx.AsyncClient, version: str) -> AgentCard:
    card = await A2ACardResolver(http, bridge.url).get_agent_card()
    kept = [i for i in card.supported_interfaces if i.protocol_version == version]
    del card.supported_interfaces[:]
    card.supported_interfaces.extend(kept)
    return card


async def _final_task(events: AsyncIterator[StreamResponse]) -> tuple[Task, list[str]]:
    kinds: list[str] = []
    task = Task()
    async for event in events:
        kind = event.WhichOneof("payload")
        kinds.append(kind or "")
        if kind == "task":
            task.CopyFrom(event.task)
    return task, kinds


@pytest.fixture
async def bridge(tmp_path: Path) -> AsyncIterator[RunningBridge]:
    settings = make_settings(
        tmp_path, {"ACP_AGENT": scripted_agent(tmp_path, SCRIPT), "A2A_PUSH_ALLOW_PRIVATE": "true"}
    )
    async with serve_bridge(settings) as running:
        yield running


@pytest.mark.parametrize("binding", BINDINGS)
@pytest.mark.parametrize("version", ["1.0", "0.3"])
async def test_a_blocking_send_returns_the_completed_task_with_the_answer(
    bridge: RunningBridge, binding: str, version: str
) -> None:
    async with httpx.AsyncClient(timeout=30) as http:
        card = await _card(bridge, http, version)
        client = await _client(http, card, binding, streaming=False)
        async with client:
            task, kinds = await _final_task(
                client.send_message(SendMessageRequest(message=_message("hi")))
            )
            fetched = await client.get_task(GetTaskRequest(id=task.id))
    assert kinds == ["task"]
    assert task.status.state == TaskState.TASK_STATE_COMPLETED
    assert _answer(task) == "hello from the agent"
    assert task.history[0].parts[0].text == "hi"
    assert fetched.id == task.id
    assert fetched.status.state == TaskState.TASK_STATE_COMPLETED


@pytest.mark.parametrize("binding", BINDINGS)
@pytest.mark.parametrize("version", ["1.0", "0.3"])
async def test_a_streamed_send_begins_with_the_task_and_ends_completed(
    bridge: RunningBridge, binding: str, version: str
) -> None:
    async with httpx.AsyncClient(timeout=30) as http:
        card = await _card(bridge, http, version)
        client = await _client(http, card, binding, streaming=True)
        states: list[int] = []
        kinds: list[str] = []
        async with client:
            async for event in client.send_message(SendMessageRequest(message=_message("hi"))):
                kind = event.WhichOneof("payload")
                kinds.append(kind or "")
                if kind == "status_update":
                    states.append(event.status_update.status.state)
    assert kinds[0] == "task"
    assert "artifact_update" in kinds
    assert states[-1] == TaskState.TASK_STATE_COMPLETED
    assert all(state not in TERMINAL for state in states[:-1])


@pytest.mark.parametrize("binding", BINDINGS)
@pytest.mark.parametrize("version", ["1.0", "0.3"])
async def test_a_running_task_can_be_resubscribed_and_cancelled(
    bridge: RunningBridge, binding: str, version: str
) -> None:
    async with httpx.AsyncClient(timeout=30) as http:
        card = await _card(bridge, http, version)
        client = await _client(http, card, binding, streaming=True)
        async with client:
            request = SendMessageRequest(
                message=_message("long"),
                configuration=SendMessageConfiguration(return_immediately=True),
            )
            task_id = ""
            async for event in client.send_message(request):
                if event.WhichOneof("payload") == "task":
                    task_id = event.task.id
                    break
            assert task_id
            seen: list[StreamResponse] = []
            subscribed = anyio.Event()

            async def watch() -> None:
                async for event in client.subscribe(SubscribeToTaskRequest(id=task_id)):
                    seen.append(event)
                    subscribed.set()

            async with anyio.create_task_group() as group:
                group.start_soon(watch)
                with anyio.fail_after(10):
                    await subscribed.wait()
                cancelled = await client.cancel_task(CancelTaskRequest(id=task_id))
            final = await client.get_task(GetTaskRequest(id=task_id))
    assert seen[0].WhichOneof("payload") == "task"
    assert seen[0].task.id == task_id
    assert cancelled.status.state == TaskState.TASK_STATE_CANCELED
    assert final.status.state == TaskState.TASK_STATE_CANCELED
    last = seen[-1]
    assert last.WhichOneof("payload") == "status_update"
    assert last.status_update.status.state == TaskState.TASK_STATE_CANCELED


@pytest.mark.parametrize("binding", BINDINGS)
async def test_list_tasks_finds_the_context_s_tasks_with_the_1_0_client(
    bridge: RunningBridge, binding: str
) -> None:
    async with httpx.AsyncClient(timeout=30) as http:
        card = await _card(bridge, http, "1.0")
        client = await _client(http, card, binding, streaming=False)
        async with client:
            first, _ = await _final_task(
                client.send_message(SendMessageRequest(message=_message("one")))
            )
            follow = _message("two")
            follow.context_id = first.context_id
            second, _ = await _final_task(client.send_message(SendMessageRequest(message=follow)))
            listed = await client.list_tasks(
                ListTasksRequest(context_id=first.context_id, include_artifacts=True)
            )
    assert second.context_id == first.context_id
    assert {task.id for task in listed.tasks} == {first.id, second.id}
    assert all(_answer(task) for task in listed.tasks)


@pytest.mark.parametrize("binding", BINDINGS)
@pytest.mark.parametrize("version", ["1.0", "0.3"])
async def test_an_unknown_task_is_task_not_found_for_the_client(
    bridge: RunningBridge, binding: str, version: str
) -> None:
    async with httpx.AsyncClient(timeout=30) as http:
        card = await _card(bridge, http, version)
        client = await _client(http, card, binding, streaming=False)
        async with client:
            with pytest.raises(TaskNotFoundError):
                await client.get_task(GetTaskRequest(id="no-such-task"))


@pytest.mark.parametrize("binding", BINDINGS)
@pytest.mark.parametrize("version", ["1.0", "0.3"])
async def test_a_question_is_answered_by_a_streamed_reply_and_the_webhook_sees_it_end(
    bridge: RunningBridge, binding: str, version: str
) -> None:
    async with serve_webhook() as hook, httpx.AsyncClient(timeout=30) as http:
        card = await _card(bridge, http, version)
        blocking = await _client(http, card, binding, streaming=False)
        streaming = await _client(http, card, binding, streaming=True)
        async with blocking, streaming:
            asked, _ = await _final_task(
                blocking.send_message(SendMessageRequest(message=_message("ask")))
            )
            config = TaskPushNotificationConfig(
                task_id=asked.id, id="hook-1", url=hook.url, token="tok-13"
            )
            await blocking.create_task_push_notification_config(config)
            fetched = await blocking.get_task_push_notification_config(
                GetTaskPushNotificationConfigRequest(task_id=asked.id, id="hook-1")
            )
            events = [
                event
                async for event in streaming.send_message(
                    SendMessageRequest(message=_message("blue", task_id=asked.id))
                )
            ]
        final = "TASK_STATE_COMPLETED" if version == "1.0" else "completed"
        deliveries = await hook.wait_for_state(final)
    assert asked.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    assert fetched.url == hook.url
    assert events[0].WhichOneof("payload") == "task"
    assert events[0].task.id == asked.id
    assert events[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED
    closing = [e.artifact_update for e in events if e.artifact_update.last_chunk]
    whole = "".join(p.text for p in closing[-1].artifact.parts)
    assert whole.startswith("let me ask\n")
    assert whole.endswith("thanks\n")
    # The webhook gets the payloads of the version the config was created with.
    assert all(("kind" in d.body) is (version == "0.3") for d in deliveries)
