"""The request handler: the SDK's default handler, with the caller's input checked first.

A message is turned into prompt parts before any task exists (a2a/input.py), so a part
over its budget, or a file the agent cannot accept, is an error the caller gets at once
(InvalidParams -32602, ContentTypeNotSupported -32005) and no half-made task is left in
the store. A follow-up that names only its taskId is given that task's contextId before
the SDK sees it (a2a-sdk 1.3.0 would invent a fresh one and store the message under it); a
message to a terminal task is refused here (-32004), before the SDK builds a task runner it
would then leak.
Every lookup is the caller's principal's (ownership.py): another principal's task is not
found, exactly as an id that never existed. An operator (A2A_ADMIN_PRINCIPALS) sees every
task in GetTask, ListTasks, CancelTask and SubscribeToTask only.
Any exception the SDK did not turn into an A2A error is mapped at the one boundary,
a2a/failures.py: logged with its traceback and answered with a plain internal error, so
the caller never sees a traceback or a foreign exception's text.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import Any, TypeVar

from a2a.server.context import ServerCallContext
from a2a.server.events import Event
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.types.a2a_pb2 import (
    CancelTaskRequest,
    GetTaskRequest,
    ListTasksRequest,
    ListTasksResponse,
    Message,
    SendMessageRequest,
    SubscribeToTaskRequest,
    Task,
    TaskState,
)
from a2a.utils.errors import (
    A2AError,
    InvalidParamsError,
    UnsupportedOperationError,
)
from a2a.utils.task import apply_history_length

from a2a_acp_bridge.a2a.failures import request_error
from a2a_acp_bridge.a2a.handover import Handover
from a2a_acp_bridge.a2a.input import parsed_prompt
from a2a_acp_bridge.a2a.ownership import allow_admin_view
from a2a_acp_bridge.a2a.states import BUSY, TERMINAL
from a2a_acp_bridge.bridge import Bridge
from a2a_acp_bridge.prompt import check_acceptable

logger = logging.getLogger(__name__)

T = TypeVar("T")


class BridgeRequestHandler(DefaultRequestHandler):
    """DefaultRequestHandler with input checks up front and no leaked exceptions."""

    def __init__(self, *, bridge: Bridge, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.bridge = bridge
        # With a shared database: a task another replica runs is cancelled there
        # (a2a/remote.py); None when it is this replica's (or nobody's) to cancel.
        self.remote_cancel: Callable[[str, ServerCallContext], Awaitable[Task | None]] | None = None
        # A message for a conversation another replica runs is handed to it (a2a/handover.py).
        self.handover: Handover | None = None

    def check_input(self, params: SendMessageRequest, context: ServerCallContext) -> None:
        """Raise the A2A error for a message the agent cannot be given as it is."""
        limit = self.bridge.settings.max_parts
        if len(params.message.parts) > limit:
            raise InvalidParamsError(
                message=f"the message has {len(params.message.parts)} parts; at most {limit} "
                "are accepted (A2A_MAX_PARTS)"
            )
        try:
            parts = parsed_prompt(context.state, params.message)
            caps = self.bridge.prompt_capabilities
            if caps is not None and parts:
                check_acceptable(parts, caps)
        except Exception as exc:
            raise request_error(exc, "SendMessage") from None

    async def _prepare(self, params: SendMessageRequest, context: ServerCallContext) -> bool:
        """Check the message; True when it continues an existing task."""
        self.check_input(params, context)
        message = params.message
        if not message.task_id:
            return False
        task = await self.task_store.get(message.task_id, context)
        if not isinstance(task, Task):
            return False  # the SDK answers TaskNotFoundError
        if task.status.state in TERMINAL:
            # Refused here: the SDK would first make (and leak) a task runner for it.
            state = TaskState.Name(task.status.state)
            raise UnsupportedOperationError(
                message=f"Task {task.id} is in terminal state: {state}; "
                "send a new message in its context instead"
            )
        if task.status.state in BUSY:
            # The SDK would queue it behind the running turn and drop it when the task ends.
            raise UnsupportedOperationError(
                message=f"Task {task.id} is still working: wait until it completes or asks "
                "for input, or send a new message in its context (it runs after this one)"
            )
        if not message.context_id:
            message.context_id = task.context_id
        return True

    async def _guarded(self, name: str, call: Callable[[], Awaitable[T]]) -> T:
        try:
            return await call()
        except A2AError:
            raise
        except Exception as exc:
            raise request_error(exc, name) from None

    async def on_message_send(
        self, params: SendMessageRequest, context: ServerCallContext
    ) -> Message | Task:
        await self._prepare(params, context)
        handover = self.handover
        if (
            handover is not None
            and (holder := await handover.destination(params, context)) is not None
        ):
            handed: Task = await self._guarded(
                "SendMessage", lambda: handover.send(params, context, holder)
            )
            return handed
        result: Message | Task = await self._guarded(
            "SendMessage",
            lambda: super(BridgeRequestHandler, self).on_message_send(params, context),
        )
        return result

    async def on_message_send_stream(
        self, params: SendMessageRequest, context: ServerCallContext
    ) -> AsyncGenerator[Event, None]:
        continues = await self._prepare(params, context)
        handover = self.handover
        events: AsyncGenerator[Event, None]
        if (
            handover is not None
            and (holder := await handover.destination(params, context)) is not None
        ):
            # Run by the replica holding the conversation, streamed back from the database.
            events = handover.stream(params, context, holder)
        else:
            events = super().on_message_send_stream(params, context)
        first = True
        async for event in self._guarded_stream("SendStreamingMessage", events):
            if first and continues and not isinstance(event, Task | Message):
                # A stream MUST begin with the Task (spec 1.0, 3.1.2); the SDK starts a
                # continued task's stream with its first update.
                current = await self._current_task(params, context)
                if current is not None:
                    yield current
            first = False
            yield event

    async def _current_task(
        self, params: SendMessageRequest, context: ServerCallContext
    ) -> Task | None:
        """The task as stored now (a copy, its history trimmed as the caller asked)."""
        stored = await self.task_store.get(params.message.task_id, context)
        if not isinstance(stored, Task):
            return None
        task = Task()
        task.CopyFrom(stored)
        trimmed: Task = apply_history_length(task, params.configuration)
        return trimmed

    async def on_subscribe_to_task(
        self, params: SubscribeToTaskRequest, context: ServerCallContext
    ) -> AsyncGenerator[Event, None]:
        allow_admin_view(context)
        async for event in self._guarded_stream(
            "SubscribeToTask", super().on_subscribe_to_task(params, context)
        ):
            yield event

    async def on_get_task(self, params: GetTaskRequest, context: ServerCallContext) -> Task | None:
        allow_admin_view(context)
        result: Task | None = await self._guarded(
            "GetTask", lambda: super(BridgeRequestHandler, self).on_get_task(params, context)
        )
        return result

    async def on_list_tasks(
        self, params: ListTasksRequest, context: ServerCallContext
    ) -> ListTasksResponse:
        allow_admin_view(context)
        result: ListTasksResponse = await self._guarded(
            "ListTasks", lambda: super(BridgeRequestHandler, self).on_list_tasks(params, context)
        )
        return result

    async def on_cancel_task(
        self, params: CancelTaskRequest, context: ServerCallContext
    ) -> Task | None:
        allow_admin_view(context)
        remote = self.remote_cancel
        if remote is not None:
            routed = await self._guarded("CancelTask", lambda: remote(params.id, context))
            if routed is not None:
                return routed
        result: Task | None = await self._guarded(
            "CancelTask", lambda: super(BridgeRequestHandler, self).on_cancel_task(params, context)
        )
        return result

    async def _guarded_stream(
        self, name: str, stream: AsyncGenerator[Event, None]
    ) -> AsyncGenerator[Event, None]:
        try:
            async for event in stream:
                yield event
        except A2AError:
            raise
        except Exception as exc:
            raise request_error(exc, name) from None
        finally:
            await stream.aclose()
