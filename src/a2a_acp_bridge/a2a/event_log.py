"""The tasks' events in the shared database, so SubscribeToTask works on any replica.

a2a-sdk's request handler takes a `TaskEventStream` (its cluster mode): the replica running
a task publishes every event it applies, and a replica asked to resubscribe to a task it
does not run answers with the stored task, then follows the stream until the task ends or
asks for input. The SDK's own `DatabaseTaskEventStream` wants its versioned task store
(which writes the whole task on every event) and polls every half second; this one keeps
the bridge's store and writer:

- `publish` appends the event to `task_events` under the task's next number `n` (from 1;
  the first event of a task this replica has not numbered yet reads the last number from
  the database, so a task continued on another replica goes on counting), through the
  state writer (`soon`: within about 50 ms, in batches);
- a trigger (schema step 5) notifies `EVENTS_CHANNEL` when the batch commits, which wakes
  the subscribers on every replica (cluster/signals.py); they also look every `POLL_S`, in
  case a notification was lost;
- `subscribe` yields every event of the task from its start, in order (the SDK's stored
  task is sent first; the log then replays from the first event: nothing is missed);
- a task's events go `EVENTS_KEPT_S` after it finished (`sweep`, once a minute).

A task whose end never reached the log (its replica died: a2a/orphans.py appends the
FAILED event itself) still ends a subscription: with no new event and the task finished,
the stored task is yielded, and the SDK ends the stream on its terminal state.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncGenerator
from typing import Any

import anyio
from a2a.server.cluster import TaskEventStream, TaskVersion, VersionedEvent
from a2a.server.events import Event
from a2a.types.a2a_pb2 import StreamResponse, Task, TaskStatusUpdateEvent
from a2a.utils.proto_utils import to_stream_response
from google.protobuf.message import DecodeError
from sqlalchemy import and_, delete, func, select
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncConnection

from a2a_acp_bridge.a2a.shared_tasks import parsed
from a2a_acp_bridge.a2a.states import TERMINAL
from a2a_acp_bridge.cluster.signals import Signals
from a2a_acp_bridge.schema import task_events, tasks
from a2a_acp_bridge.state import StateDatabase
from a2a_acp_bridge.state_writer import Upsert, describe_failure

logger = logging.getLogger(__name__)

EVENTS_CHANNEL = "a2a_bridge_events"
# A subscriber looks for new events at least this often, notified or not.
POLL_S = 1.0
# A finished task's events are kept this long for the subscribers still reading them.
EVENTS_KEPT_S = 60.0
SWEEP_EVERY_S = 60.0


def event_of(response: StreamResponse) -> Event | None:
    which = response.WhichOneof("payload")
    if which == "task":
        return response.task
    if which == "message":
        return response.message
    if which == "status_update":
        return response.status_update
    if which == "artifact_update":
        return response.artifact_update
    return None


def event_row(task_id: str, n: int, event: Event) -> dict[str, Any]:
    return {
        "task_id": task_id,
        "n": n,
        "body": to_stream_response(event).SerializeToString(deterministic=True),
        "created_ns": time.time_ns(),
    }


async def last_number(conn: AsyncConnection, task_id: str) -> int:
    value = await conn.scalar(
        select(func.max(task_events.c.n)).where(task_events.c.task_id == task_id)
    )
    return int(value or 0)


async def append_end(conn: AsyncConnection, event: TaskStatusUpdateEvent) -> None:
    """The event that ended a task, appended in the caller's transaction (a2a/orphans.py)."""
    n = await last_number(conn, event.task_id) + 1
    await conn.execute(task_events.insert().values(**event_row(event.task_id, n, event)))


class EventLog(TaskEventStream):
    def __init__(self, database: StateDatabase, signals: Signals) -> None:
        self.database = database
        self._numbers: dict[str, int] = {}
        self._waiting: dict[str, set[anyio.Event]] = {}
        signals.on(EVENTS_CHANNEL, self._woken)

    async def count(self, task_id: str) -> int:
        """How many events the task has had, as this replica numbers them: its own count
        while it runs the task (written or not yet), else what the database holds."""
        n = self._numbers.get(task_id)
        if n is None:
            try:
                async with self.database.connect() as conn:
                    n = await last_number(conn, task_id)
            except (SQLAlchemyError, OSError) as exc:
                # Numbered from where this replica knows; a clash replaces an older event.
                logger.warning(
                    "a task's event count could not be read",
                    extra={"task_id": task_id, "problem": describe_failure(exc, "postgresql")},
                )
                n = 0
        return n

    async def publish(self, task_id: str, event: VersionedEvent) -> None:
        n = await self.count(task_id) + 1
        self._numbers[task_id] = n
        row = event_row(task_id, n, event.event)
        self.database.writer.submit(
            ("event", task_id, n), Upsert(task_events, lambda: row), soon=True
        )
        status = getattr(event.event, "status", None)
        if status is not None and status.state in TERMINAL:
            self._numbers.pop(task_id, None)

    async def subscribe(
        self, task_id: str, *, after: TaskVersion
    ) -> AsyncGenerator[VersionedEvent, None]:
        # From the SDK, `after` is the version of the stored task, which the bridge's
        # store does not count (MISSING): the log is replayed from the task's first event.
        # A hand-over (a2a/handover.py) gives the event number a follow-up starts after.
        start = getattr(after, "_value", 0)
        cursor = start if isinstance(start, int) else 0
        while True:
            woken = anyio.Event()
            self._waiting.setdefault(task_id, set()).add(woken)
            try:
                rows, finished = await self._after(task_id, cursor)
                for n, body in rows:
                    cursor = n
                    response = StreamResponse()
                    try:
                        response.ParseFromString(body)
                    except DecodeError:
                        logger.error("a stored event cannot be read", extra={"task_id": task_id})
                        continue
                    event = event_of(response)
                    if event is not None:
                        yield VersionedEvent(event=event, version=TaskVersion(n))
                if not rows and finished is not None:
                    yield VersionedEvent(event=finished, version=TaskVersion(cursor + 1))
                    return
                if not rows:
                    with anyio.move_on_after(POLL_S):
                        await woken.wait()
            finally:
                waiting = self._waiting.get(task_id)
                if waiting is not None:
                    waiting.discard(woken)
                    if not waiting:
                        del self._waiting[task_id]

    async def _after(
        self, task_id: str, cursor: int
    ) -> tuple[list[tuple[int, bytes]], Task | None]:
        """The events after `cursor`; with none, the task if it is finished."""
        try:
            async with self.database.connect() as conn:
                rows = (
                    await conn.execute(
                        select(task_events.c.n, task_events.c.body)
                        .where(task_events.c.task_id == task_id, task_events.c.n > cursor)
                        .order_by(task_events.c.n)
                    )
                ).all()
                if rows:
                    return [(int(n), bytes(body)) for n, body in rows], None
                stored = (
                    await conn.execute(
                        select(tasks.c.body).where(
                            tasks.c.id == task_id, tasks.c.finished_ns.is_not(None)
                        )
                    )
                ).first()
        except (SQLAlchemyError, OSError) as exc:
            logger.warning(
                "a task's events could not be read; trying again",
                extra={"task_id": task_id, "problem": describe_failure(exc, "postgresql")},
            )
            return [], None
        return [], parsed(stored[0]) if stored is not None else None

    async def destroy(self, task_id: str) -> None:
        self._numbers.pop(task_id, None)

    async def _woken(self, message: dict[str, Any]) -> None:
        task_id = message.get("task")
        if isinstance(task_id, str):
            for event in self._waiting.get(task_id, ()):
                event.set()

    async def sweep(self) -> int:
        """Delete the events of tasks finished (or gone) more than EVENTS_KEPT_S ago."""
        cutoff = time.time_ns() - int(EVENTS_KEPT_S * 1e9)
        unfinished = select(tasks.c.id).where(tasks.c.finished_ns.is_(None))
        async with self.database.begin() as conn:
            result = await conn.execute(
                delete(task_events).where(
                    and_(
                        task_events.c.created_ns < cutoff,
                        task_events.c.task_id.not_in(unfinished),
                    )
                )
            )
        return int(result.rowcount or 0)

    async def run(self) -> None:
        while True:
            await anyio.sleep(SWEEP_EVERY_S)
            try:
                removed = await self.sweep()
            except (SQLAlchemyError, OSError) as exc:
                logger.warning(
                    "the finished tasks' events could not be removed",
                    extra={"problem": describe_failure(exc, "postgresql")},
                )
                continue
            if removed:
                logger.info("task events removed", extra={"events": removed})
