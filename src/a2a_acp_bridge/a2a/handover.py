"""A message for a conversation another replica runs: handed to it through the database.

The receiving replica writes the request into `handovers`, naming the replica that holds
the conversation's lease (cluster/leases.py), and notifies it (`HANDOVER_CHANNEL`). The
holder runs the message as its own (the handler's SendMessage, returning at once with the
task), writes the task's id (or the A2A error it met) into the row and notifies back
(`TAKEN_CHANNEL`). The receiver then streams the task's events to its caller from the
event log (a2a/event_log.py) until the task ends or asks for input, or, for a blocking
SendMessage, answers with the task as it then is. A lost notification is repeated every
`RESEND_S`; after `TAKEN_S` without an answer the caller gets an error saying so.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import AsyncGenerator, Awaitable, Callable, Coroutine
from typing import Any

import anyio
from a2a.server.cluster import TaskVersion
from a2a.server.context import ServerCallContext
from a2a.server.events import Event
from a2a.types.a2a_pb2 import Message, SendMessageRequest, Task, TaskStatusUpdateEvent
from a2a.utils import errors as a2a_errors
from a2a.utils.errors import A2AError, InternalError
from sqlalchemy import delete, select

from a2a_acp_bridge.a2a.durable_store import DurableTaskStore
from a2a_acp_bridge.a2a.event_log import EventLog
from a2a_acp_bridge.a2a.ownership import owner_context, principal_of
from a2a_acp_bridge.a2a.push import VERSION_STATE
from a2a_acp_bridge.a2a.states import INTERRUPTED, TERMINAL
from a2a_acp_bridge.cluster.leases import Leases
from a2a_acp_bridge.cluster.membership import Membership, database_now_ns
from a2a_acp_bridge.cluster.signals import Signals
from a2a_acp_bridge.principals import conversation_key
from a2a_acp_bridge.schema import handovers
from a2a_acp_bridge.state import StateDatabase

logger = logging.getLogger(__name__)

HANDOVER_CHANNEL = "a2a_bridge_handover"
TAKEN_CHANNEL = "a2a_bridge_taken"
# How long the receiver waits for the holder to take the message, repeating itself.
TAKEN_S = 10.0
RESEND_S = 1.0
# Marks the call context of a message that was handed over (never passed on again).
HANDED_STATE = "handed_over"

SendHere = Callable[[SendMessageRequest, ServerCallContext], Awaitable[Message | Task]]
Spawn = Callable[[Callable[[], Coroutine[Any, Any, None]]], None]


def ends_stream(event: Event) -> bool:
    if isinstance(event, Message):
        return True
    if isinstance(event, TaskStatusUpdateEvent | Task):
        return event.status.state in TERMINAL or event.status.state in INTERRUPTED
    return False


def error_of(text: str) -> A2AError:
    """The A2A error the holder met, as its class ("Name: message")."""
    name, _, message = text.partition(": ")
    kind = getattr(a2a_errors, name, None)
    if isinstance(kind, type) and issubclass(kind, A2AError):
        return kind(message=message)
    return InternalError(message=message)


class Handover:
    def __init__(
        self,
        database: StateDatabase,
        membership: Membership,
        signals: Signals,
        events: EventLog,
        store: DurableTaskStore,
        leases: Leases,
        spawn: Spawn,
    ) -> None:
        self.leases = leases
        self.database = database
        self.membership = membership
        self.signals = signals
        self.events = events
        self.store = store
        self.spawn = spawn
        self.send_here: SendHere | None = None
        # Whether this replica could run the conversation now (its adapter runs here, or
        # there is room for one): set by the app from the bridge.
        self.room_here: Callable[[str], bool] | None = None
        self._taken: dict[str, anyio.Event] = {}
        signals.on(HANDOVER_CHANNEL, self._asked)
        signals.on(TAKEN_CHANNEL, self._told)

    # --- the receiving replica -----------------------------------------------------------

    async def destination(
        self, params: SendMessageRequest, context: ServerCallContext
    ) -> str | None:
        """The other replica the message goes to; None: it runs here.

        The replica running its conversation, if another one does; else, when this one has
        no room for a new adapter (`ACP_MAX_SESSIONS`), the least loaded replica with room
        (their heartbeats say how many of their adapters are busy: an idle one gives way).
        With room nowhere it runs here, and waits for a slot or is REJECTED as on one
        machine. A message handed over is never passed on."""
        if context.state.get(HANDED_STATE):
            return None
        # Leases and sandboxes are the bridge's conversation key: (principal, contextId).
        key = conversation_key(principal_of(context), params.message.context_id)
        if params.message.context_id:
            holder = await self.leases.holder(key)
            if holder is not None:
                return holder
        if self.room_here is None or self.room_here(key):
            return None
        async with self.database.connect() as conn:
            now = await database_now_ns(conn)
            alive = await self.membership.alive(conn, now)
        # Room: fewer busy adapters than ACP_MAX_SESSIONS (an idle one gives way).
        with_room = sorted(
            (busy / capacity, replica)
            for replica, busy, capacity in alive
            if replica != self.membership.id and capacity > 0 and busy < capacity
        )
        if not with_room:
            return None
        logger.info(
            "this replica is full: the new conversation goes to one with room",
            extra={"replica": with_room[0][1]},
        )
        return with_room[0][1]

    async def _hand(
        self, params: SendMessageRequest, context: ServerCallContext, holder: str
    ) -> tuple[str, int]:
        """Hand the message over; the task's id and the event it starts after."""
        handover_id = uuid.uuid4().hex
        async with self.database.begin() as conn:
            await conn.execute(
                handovers.insert().values(
                    id=handover_id,
                    replica=holder,
                    owner=principal_of(context),
                    protocol=context.state.get(VERSION_STATE),
                    request=params.SerializeToString(),
                    created_ns=time.time_ns(),
                )
            )
        taken = self._taken[handover_id] = anyio.Event()
        logger.info(
            "message handed to the replica running the conversation",
            extra={"context_id": params.message.context_id, "replica": holder},
        )
        try:
            with anyio.move_on_after(TAKEN_S):
                while True:
                    await self.signals.send(
                        HANDOVER_CHANNEL, {"id": handover_id, "replica": holder}
                    )
                    with anyio.move_on_after(RESEND_S):
                        await taken.wait()
                    async with self.database.connect() as conn:
                        row = (
                            await conn.execute(
                                select(
                                    handovers.c.task_id, handovers.c.error, handovers.c.after_n
                                ).where(handovers.c.id == handover_id)
                            )
                        ).first()
                    if row is not None and row[1] is not None:
                        raise error_of(str(row[1]))
                    if row is not None and row[0] is not None:
                        return str(row[0]), int(row[2] or 0)
        finally:
            self._taken.pop(handover_id, None)
            async with self.database.begin() as conn:
                await conn.execute(delete(handovers).where(handovers.c.id == handover_id))
        raise InternalError(
            message="The replica running this conversation did not take the message; try again."
        )

    async def stream(
        self, params: SendMessageRequest, context: ServerCallContext, holder: str
    ) -> AsyncGenerator[Event, None]:
        task_id, after = await self._hand(params, context, holder)
        async for versioned in self.events.subscribe(task_id, after=TaskVersion(after)):
            yield versioned.event
            if ends_stream(versioned.event):
                return

    async def send(
        self, params: SendMessageRequest, context: ServerCallContext, holder: str
    ) -> Task:
        task_id, after = await self._hand(params, context, holder)
        if not params.configuration.return_immediately:
            async for versioned in self.events.subscribe(task_id, after=TaskVersion(after)):
                if ends_stream(versioned.event):
                    break
        task = await self.store.get(task_id, context)
        if task is None:
            raise InternalError(message="The task the message became cannot be read.")
        return task

    # --- the replica holding the conversation ---------------------------------------------

    async def _asked(self, message: dict[str, Any]) -> None:
        handover_id = message.get("id")
        if message.get("replica") != self.membership.id or not isinstance(handover_id, str):
            return
        self.spawn(lambda: self._take(handover_id))

    async def _take(self, handover_id: str) -> None:
        async with self.database.begin() as conn:
            # Locked: a repeated notification does not run the message twice.
            row = (
                await conn.execute(
                    select(handovers.c.owner, handovers.c.request, handovers.c.protocol)
                    .where(
                        handovers.c.id == handover_id,
                        handovers.c.replica == self.membership.id,
                        handovers.c.task_id.is_(None),
                        handovers.c.error.is_(None),
                    )
                    .with_for_update(skip_locked=True)
                )
            ).first()
            if row is None or self.send_here is None:
                return
            params = SendMessageRequest()
            params.ParseFromString(row[1])
            params.configuration.return_immediately = True
            task_id: str | None = None
            error: str | None = None
            # Counted before the message runs: its events are the ones after this.
            after = await self.events.count(params.message.task_id) if params.message.task_id else 0
            try:
                context = owner_context(str(row[0]))
                context.state[HANDED_STATE] = True
                if row[2] is not None:
                    context.state[VERSION_STATE] = str(row[2])
                result = await self.send_here(params, context)
                if isinstance(result, Task):
                    task_id = result.id
                else:
                    error = "InternalError: The agent answered with a message, not a task."
            except A2AError as exc:
                error = f"{type(exc).__name__}: {getattr(exc, 'message', '') or exc}"
            await conn.execute(
                handovers.update()
                .where(handovers.c.id == handover_id)
                .values(task_id=task_id, error=error, after_n=after)
            )
        await self.signals.send(TAKEN_CHANNEL, {"id": handover_id})

    async def _told(self, message: dict[str, Any]) -> None:
        handover_id = message.get("id")
        if isinstance(handover_id, str) and (event := self._taken.get(handover_id)) is not None:
            event.set()
