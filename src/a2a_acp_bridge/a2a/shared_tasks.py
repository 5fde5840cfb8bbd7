"""Reads of a task store shared by several replicas (A2A_DATABASE_URL): any replica
answers GetTask and ListTasks for a task whichever replica runs it.

The durable store (durable_store.py) serves the tasks this replica runs from memory, as
ever; any other task is read from the database: `get` reads its row (the state the
replica running it last wrote: at most `WRITE_BEHIND_S` behind for a streamed answer, and
exact for a state change, which is written before it is told), and `refresh`, before each
ListTasks, takes every row changed since the last one into memory, so the SDK's own
listing (its filters, order and pages) runs over every replica's tasks. When the database
cannot be read, what memory holds is served.
"""

from __future__ import annotations

import logging

from a2a.server.context import ServerCallContext
from a2a.server.tasks import InMemoryTaskStore
from a2a.types.a2a_pb2 import Task
from google.protobuf.message import DecodeError
from sqlalchemy import select
from sqlalchemy.exc import SQLAlchemyError

from a2a_acp_bridge.a2a.durable_store import DurableTaskStore
from a2a_acp_bridge.a2a.ownership import owned_by, owner_name
from a2a_acp_bridge.schema import tasks
from a2a_acp_bridge.state import StateDatabase
from a2a_acp_bridge.state_writer import describe_failure

logger = logging.getLogger(__name__)

# A row is stamped by the clock of the replica that built it, up to a batch before its
# commit: each refresh reads again what changed this long before the newest row it saw.
REFRESH_OVERLAP_NS = 30 * 10**9


def parsed(body: bytes) -> Task | None:
    task = Task()
    try:
        task.ParseFromString(body)
    except DecodeError:
        return None
    return task


class SharedReads:
    def __init__(self, database: StateDatabase) -> None:
        self.database = database
        self._newest_ns = 0

    async def get(
        self, store: DurableTaskStore, task_id: str, context: ServerCallContext
    ) -> Task | None:
        owner = owner_name(context)
        read_failed = False
        try:
            async with self.database.connect() as conn:
                body = await conn.scalar(
                    select(tasks.c.body).where(
                        tasks.c.id == task_id, owned_by(tasks.c.owner, owner)
                    )
                )
        except (SQLAlchemyError, OSError) as exc:
            logger.warning(
                "a task could not be read from the database; served from memory",
                extra={"task_id": task_id, "problem": describe_failure(exc, "postgresql")},
            )
            body = None
            read_failed = True
        task = parsed(body) if body is not None else None
        if task is None and self.database.health.ok and not read_failed:
            # Every task is written before its caller hears of it (durable_store.py): not
            # in the database, it was deleted (maybe by another replica's retention).
            return None
        if task is None:
            # The database is in trouble: what this replica holds, if anything.
            return await InMemoryTaskStore.get(store, task_id, context)
        return task

    async def refresh(self, store: DurableTaskStore) -> None:
        since = self._newest_ns - REFRESH_OVERLAP_NS
        try:
            async with self.database.connect() as conn:
                rows = (
                    await conn.execute(
                        select(
                            tasks.c.id,
                            tasks.c.owner,
                            tasks.c.finished_ns,
                            tasks.c.updated_ns,
                            tasks.c.body,
                        ).where(tasks.c.updated_ns > since)
                    )
                ).all()
        except (SQLAlchemyError, OSError) as exc:
            logger.warning(
                "the other replicas' tasks could not be read; listing this one's",
                extra={"problem": describe_failure(exc, "postgresql")},
            )
            return
        for task_id, owner, finished_ns, updated_ns, body in rows:
            self._newest_ns = max(self._newest_ns, int(updated_ns))
            if store.runs_here(task_id):
                continue
            task = parsed(body)
            if task is None:
                logger.error("a stored task cannot be read; left out", extra={"task_id": task_id})
                continue
            await store.adopt(task, owner, finished_ns)
