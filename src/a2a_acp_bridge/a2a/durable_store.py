"""The durable task store: the in-memory store (store.py) with every task also kept in the
state database, written at its state changes and in batches between them.

Why not a2a-sdk's `DatabaseTaskStore`: the SDK calls `save` for every event, and that store
writes the whole task (as JSON) on every call, so a streamed answer would be rewritten once
per chunk; it keeps no retention and no age limit, and it creates its tables without a
schema version. This store serves every read from memory, exactly as before (the same
folding of answer chunks, the same ListTasks order and pages), and writes through the
state writer (state_writer.py):

- a change into a terminal or interrupted state (INPUT_REQUIRED) is written before `save`
  returns (the caller is told of it only once it is on disk);
- a new task, and any other state change, is written at once without waiting (waiting
  would hold up the task's first events by a commit; measured in docs/performance.md);
  chunks and WORKING messages go with the next batch, at most `WRITE_BEHIND_S` later.

A task is stored as its protobuf bytes (deterministic serialization) with its context,
owner, state and the time it finished. At start, `restore` ends every task that was
SUBMITTED, WORKING or INPUT_REQUIRED when the bridge stopped (FAILED, `RESTART_MESSAGE`,
in one transaction before anything is served) and loads every task into memory, oldest
finished first, so retention goes on where it was. Finished tasks beyond
A2A_TASK_RETENTION are deleted as they are forgotten; `sweep` deletes those older than
A2A_TASK_TTL.

When the database refuses a write (state_writer.py), the task stays served from memory and
its row pending; `ensure_recorded` lets the bridge fail a new turn, with the cause, before
anything reaches the agent, while the database takes no writes.
"""

from __future__ import annotations

import builtins
import functools
import logging
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from a2a.server.context import ServerCallContext
from a2a.server.tasks import InMemoryTaskStore
from a2a.types.a2a_pb2 import (
    ListTasksRequest,
    ListTasksResponse,
    Message,
    Part,
    Role,
    Task,
    TaskState,
    TaskStatus,
    TaskStatusUpdateEvent,
)
from google.protobuf.message import DecodeError
from sqlalchemy import select

from a2a_acp_bridge.a2a.ownership import owner_context
from a2a_acp_bridge.a2a.states import INTERRUPTED, TERMINAL
from a2a_acp_bridge.a2a.store import TaskStore
from a2a_acp_bridge.config import DEFAULT_TASK_RETENTION
from a2a_acp_bridge.errors import StateWriteError
from a2a_acp_bridge.schema import DEFAULT_PRINCIPAL, tasks
from a2a_acp_bridge.state import StateDatabase
from a2a_acp_bridge.state_writer import Delete, Upsert

if TYPE_CHECKING:
    from a2a_acp_bridge.a2a.shared_tasks import SharedReads

logger = logging.getLogger(__name__)

# How many deleted task ids a shared store remembers (a2a/shared_tasks.py skips them).
GONE_KEPT = 10000
RESTART_MESSAGE = "The bridge restarted while this task was running."
STOPPED_MESSAGE = "The bridge stopped while this task was running."


def end_task(task: Task, text: str) -> TaskStatusUpdateEvent:
    """Put `task` in FAILED with `text` the way the SDK applies a status event (the
    previous status message goes to the history); the event, for its webhooks."""
    status = TaskStatus(state=TaskState.TASK_STATE_FAILED)
    status.timestamp.GetCurrentTime()
    status.message.CopyFrom(
        Message(
            message_id=uuid.uuid4().hex,
            context_id=task.context_id,
            task_id=task.id,
            role=Role.ROLE_AGENT,
            parts=[Part(text=text)],
        )
    )
    if task.status.HasField("message"):
        task.history.append(task.status.message)
    task.status.CopyFrom(status)
    return TaskStatusUpdateEvent(task_id=task.id, context_id=task.context_id, status=status)


def _status_ns(task: Task) -> int:
    if task.status.HasField("timestamp"):
        return int(task.status.timestamp.ToNanoseconds())
    return time.time_ns()


class DurableTaskStore(TaskStore):
    """store.TaskStore, kept in the state database once `restore` attached it."""

    def __init__(self, retention: int = DEFAULT_TASK_RETENTION, ttl_s: float | None = None) -> None:
        super().__init__(retention)
        self.ttl_s = ttl_s
        self._database: StateDatabase | None = None
        # The last state seen per task; a task seen for the first time is new.
        self._states: dict[str, int] = {}
        # Tasks not yet terminal, with their owner: ended at shutdown if still there.
        self._live: dict[str, tuple[Task, str]] = {}
        self._finished_ns: dict[str, int] = {}
        # Told of each task deleted (its push configs go with it).
        self.on_delete: list[Callable[[str], Any]] = []
        # With a shared database: this replica's id, on the rows of the tasks it runs
        # (a2a/shared_tasks.py serves the other replicas' tasks).
        self.replica: str | None = None
        self.shared: SharedReads | None = None
        # Tasks this replica deleted (their row's delete may not be committed yet): never
        # read back from the database. The latest GONE_KEPT only.
        self._gone: OrderedDict[str, None] = OrderedDict()

    # --- start and stop ----------------------------------------------------------------

    async def restore(self, database: StateDatabase) -> list[TaskStatusUpdateEvent]:
        """Load every stored task; end those that were not finished. Returns the FAILED
        events of the tasks it ended (for their webhooks)."""
        self._database = database
        ended: list[TaskStatusUpdateEvent] = []
        loaded: list[tuple[Task, str, int]] = []
        now = time.time_ns()
        async with database.begin() as conn:
            rows = (
                await conn.execute(
                    select(tasks.c.id, tasks.c.owner, tasks.c.finished_ns, tasks.c.body)
                )
            ).all()
            for task_id, stored_owner, finished_ns, body in rows:
                # Written before principals existed: the one caller there was, `default`.
                owner = stored_owner or DEFAULT_PRINCIPAL
                task = Task()
                try:
                    task.ParseFromString(body)
                except DecodeError:
                    logger.error(
                        "a stored task cannot be read; left out", extra={"task_id": task_id}
                    )
                    continue
                if task.status.state not in TERMINAL and database.shared:
                    # Another replica may run it: a2a/orphans.py ends it if none does.
                    continue
                if task.status.state not in TERMINAL:
                    ended.append(end_task(task, RESTART_MESSAGE))
                    finished_ns = now
                    await conn.execute(
                        tasks.update()
                        .where(tasks.c.id == task_id)
                        .values(**self._row(task, owner, finished_ns))
                    )
                loaded.append((task, owner, finished_ns or _status_ns(task)))
        loaded.sort(key=lambda item: item[2])
        for task, owner, finished_ns in loaded:
            await self._keep(task, owner, finished_ns)
        while len(self._finished) > self._retention:
            oldest, context = self._finished.popitem(last=False)
            await self._evict(oldest, context)
        logger.info("tasks restored", extra={"tasks": len(loaded), "ended": len(ended)})
        return ended

    async def _keep(self, task: Task, owner: str, finished_ns: int) -> None:
        """A restored (finished) task, in memory as it was stored: not folded again."""
        context = owner_context(owner)
        self._owners[task.id] = owner
        await InMemoryTaskStore.save(self, task, context)
        self._finished[task.id] = context
        self._finished_ns[task.id] = finished_ns
        self._states[task.id] = task.status.state

    def runs_here(self, task_id: str) -> bool:
        """The task is not finished and this replica (process) runs it."""
        return task_id in self._live

    async def adopt(self, task: Task, owner: str, finished_ns: int | None) -> None:
        """A task another replica wrote, read from the shared database: served from memory
        as it was stored (ListTasks); a finished one counts for the retention."""
        if task.id in self._live or task.id in self._gone:
            return
        if finished_ns is None or task.id in self._finished:
            self._owners[task.id] = owner
            await InMemoryTaskStore.save(self, task, owner_context(owner))
            self._states[task.id] = task.status.state
            return
        await self._keep(task, owner, finished_ns)
        while len(self._finished) > self._retention:
            # The oldest finished first, whichever replica ran it (not the order read).
            oldest = min(self._finished, key=lambda t: self._finished_ns.get(t, 0))
            await self._evict(oldest, self._finished.pop(oldest))

    async def end_unfinished(self, text: str = STOPPED_MESSAGE) -> list[TaskStatusUpdateEvent]:
        """At shutdown, after the running turns ended: end (FAILED) whatever is still not
        terminal (a task that asked for input without a turn, one whose end was lost)."""
        ended = []
        for task, owner in list(self._live.values()):
            ended.append(end_task(task, text))
            await self.save(task, owner_context(owner))
        return ended

    # --- the TaskStore interface -------------------------------------------------------

    async def save(self, task: Task, context: ServerCallContext) -> None:
        previous = self._states.get(task.id)
        await super().save(task, context)
        state = task.status.state
        self._states[task.id] = state
        database = self._database
        if database is None:
            return
        owner = self.owner_of(task.id) or DEFAULT_PRINCIPAL
        if state in TERMINAL:
            self._live.pop(task.id, None)
            self._finished_ns.setdefault(task.id, _status_ns(task))
        else:
            self._live[task.id] = (task, owner)
        key = ("task", task.id)
        op = Upsert(tasks, functools.partial(self._current_row, task, owner))
        if state != previous and (state in TERMINAL or state in INTERRUPTED):
            await self._write_now(task.id, key, op)
        elif previous is None and database.shared:
            # Other replicas answer for it as soon as the caller has its id (a round-robin
            # balancer sends the next GetTask anywhere): written before it is told.
            await self._write_now(task.id, key, op)
        else:
            database.writer.submit(key, op, soon=state != previous)

    async def get(self, task_id: str, context: ServerCallContext) -> Task | None:
        if self.shared is not None and task_id not in self._live:
            # Maybe run (or ended) by another replica: the database has its latest state.
            return await self.shared.get(self, task_id, context)
        return await super().get(task_id, context)

    async def list(self, params: ListTasksRequest, context: ServerCallContext) -> ListTasksResponse:
        if self.shared is not None:
            await self.shared.refresh(self)
        return await super().list(params, context)

    async def delete(self, task_id: str, context: ServerCallContext) -> None:
        await super().delete(task_id, context)
        self._forget(task_id)

    async def _evict(self, task_id: str, context: ServerCallContext) -> None:
        await super()._evict(task_id, context)
        self._forget(task_id)

    # --- for the bridge and the sweep --------------------------------------------------

    async def ensure_recorded(self, task_id: str) -> None:
        """Raise StateWriteError while the database takes no writes: the task's turn does
        not start, and the task ends FAILED with the cause (a2a/failures.py)."""
        database = self._database
        if database is not None and database.health.problem is not None:
            raise StateWriteError(database.health.problem)

    async def sweep(self, now_ns: int) -> builtins.list[str]:
        """Delete the finished tasks older than A2A_TASK_TTL; their ids."""
        if self.ttl_s is None:
            return []
        cutoff = now_ns - int(self.ttl_s * 1e9)
        expired = [
            task_id
            for task_id, finished_ns in self._finished_ns.items()
            if finished_ns < cutoff and task_id in self._finished
        ]
        for task_id in expired:
            await self.delete(task_id, self._finished[task_id])
        return expired

    # --- rows ----------------------------------------------------------------------------

    async def _write_now(self, task_id: str, key: tuple[str, str], op: Upsert) -> None:
        assert self._database is not None
        try:
            await self._database.writer.write(key, op)
        except StateWriteError as exc:
            # Kept pending: the writer retries it, and the task is served from memory.
            logger.warning(
                "the task could not be recorded yet",
                extra={"task_id": task_id, "problem": exc.problem},
            )

    def _forget(self, task_id: str) -> None:
        if self.shared is not None:
            self._gone[task_id] = None
            while len(self._gone) > GONE_KEPT:
                self._gone.popitem(last=False)
        self._states.pop(task_id, None)
        self._live.pop(task_id, None)
        self._finished_ns.pop(task_id, None)
        if self._database is not None:
            self._database.writer.submit(
                ("task", task_id), Delete(tasks, {"id": task_id}), soon=True
            )
        for listener in self.on_delete:
            listener(task_id)

    def _current_row(self, task: Task, owner: str) -> dict[str, Any]:
        return {
            **self._row(task, owner, self._finished_ns.get(task.id)),
            "replica": self.replica,
        }

    @staticmethod
    def _row(task: Task, owner: str, finished_ns: int | None) -> dict[str, Any]:
        return {
            "id": task.id,
            "context_id": task.context_id,
            "owner": owner,
            "state": TaskState.Name(task.status.state),
            "updated_ns": time.time_ns(),
            "finished_ns": finished_ns,
            "body": task.SerializeToString(deterministic=True),
        }
