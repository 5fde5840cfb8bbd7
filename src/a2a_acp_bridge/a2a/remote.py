"""CancelTask for a task another replica runs: handed to that replica, which cancels it.

The SDK's own answer for a task it does not run here is to write CANCELED into the store;
the replica running the task would never know, and its agent would go on. Instead, the
receiving replica notifies the owner (cluster/signals.py, `CANCEL_CHANNEL`, naming the
replica the task's row names); the owner cancels it as if the request were its own (the
bridge's cancel: `session/cancel` to the agent, at once, even while the agent is silent),
writes the ended task, and notifies back (`ENDED_CHANNEL`). The receiver answers with the
task as the database then holds it. A lost notification is repeated every
`CANCEL_RESEND_S`; after `CANCEL_REACHED_S` the receiver answers with the task as it is.
A task whose replica is gone, or that nobody runs, is left to the SDK's own cancel.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

import anyio
from a2a.server.context import ServerCallContext
from a2a.types.a2a_pb2 import Task
from a2a.utils.errors import A2AError
from sqlalchemy import select

from a2a_acp_bridge.a2a.durable_store import DurableTaskStore
from a2a_acp_bridge.a2a.ownership import owned_by, owner_context, owner_name
from a2a_acp_bridge.a2a.shared_tasks import parsed
from a2a_acp_bridge.cluster.membership import Membership, database_now_ns
from a2a_acp_bridge.cluster.signals import Signals
from a2a_acp_bridge.schema import tasks
from a2a_acp_bridge.state import StateDatabase

logger = logging.getLogger(__name__)

CANCEL_CHANNEL = "a2a_bridge_cancel"
ENDED_CHANNEL = "a2a_bridge_ended"
# How long a cancel waits for the replica running the task, repeating itself this often.
CANCEL_REACHED_S = 10.0
CANCEL_RESEND_S = 1.0

CancelHere = Callable[[str, ServerCallContext], Awaitable[Any]]
Spawn = Callable[[Callable[[], Coroutine[Any, Any, None]]], None]


class RemoteCancel:
    def __init__(
        self,
        database: StateDatabase,
        membership: Membership,
        signals: Signals,
        store: DurableTaskStore,
        spawn: Spawn,
    ) -> None:
        self.database = database
        self.membership = membership
        self.signals = signals
        self.store = store
        self.spawn = spawn
        # The handler's own cancel, for the tasks this replica runs (set by the app).
        self.cancel_here: CancelHere | None = None
        self._ended: dict[str, anyio.Event] = {}
        signals.on(CANCEL_CHANNEL, self._asked)
        signals.on(ENDED_CHANNEL, self._told)

    async def _stored(self, task_id: str, owner: str) -> tuple[Task, str | None, bool] | None:
        async with self.database.connect() as conn:
            row = (
                await conn.execute(
                    select(tasks.c.body, tasks.c.replica, tasks.c.finished_ns).where(
                        tasks.c.id == task_id, owned_by(tasks.c.owner, owner)
                    )
                )
            ).first()
        if row is None:
            return None
        task = parsed(row[0])
        return None if task is None else (task, row[1], row[2] is not None)

    async def _running_elsewhere(self, replica: str | None) -> bool:
        if replica is None or replica == self.membership.id:
            return False
        async with self.database.connect() as conn:
            now = await database_now_ns(conn)
            alive = await self.membership.alive(conn, now)
        return any(entry[0] == replica for entry in alive)

    async def cancel(self, task_id: str, context: ServerCallContext) -> Task | None:
        """The task after its owner cancelled it; None: not another replica's to cancel."""
        if self.store.runs_here(task_id):
            return None
        owner = owner_name(context)
        found = await self._stored(task_id, owner)
        if found is None:
            return None
        task, replica, finished = found
        if finished or not await self._running_elsewhere(replica):
            return None
        ended = self._ended.setdefault(task_id, anyio.Event())
        logger.info("cancel handed to the replica running the task", extra={"task_id": task_id})
        with anyio.move_on_after(CANCEL_REACHED_S):
            while True:
                await self.signals.send(CANCEL_CHANNEL, {"task": task_id, "replica": replica})
                with anyio.move_on_after(CANCEL_RESEND_S):
                    await ended.wait()
                found = await self._stored(task_id, owner)
                if found is None or found[2]:
                    break
        if self._ended.get(task_id) is ended:
            del self._ended[task_id]
        return found[0] if found is not None else task

    async def _asked(self, message: dict[str, Any]) -> None:
        task_id = message.get("task")
        if message.get("replica") != self.membership.id or not isinstance(task_id, str):
            return
        owner = self.store.owner_of(task_id)

        async def cancel() -> None:
            if owner is not None and self.cancel_here is not None:
                try:
                    await self.cancel_here(task_id, owner_context(owner))
                except A2AError as exc:
                    # Finished meanwhile (not cancelable): the asker reads its end.
                    logger.info(
                        "a cancel from another replica found the task ended",
                        extra={"task_id": task_id, "error": type(exc).__name__},
                    )
            await self.signals.send(ENDED_CHANNEL, {"task": task_id})

        self.spawn(cancel)

    async def _told(self, message: dict[str, Any]) -> None:
        task_id = message.get("task")
        if isinstance(task_id, str) and (event := self._ended.get(task_id)) is not None:
            event.set()
