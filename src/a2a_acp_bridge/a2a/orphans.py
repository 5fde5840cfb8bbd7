"""The tasks a dead replica left: ended FAILED by whichever replica notices first.

With the state in PostgreSQL, each task's row names the replica running it
(cluster/membership.py). Every `REAP_EVERY_S` (and at start, before serving) each replica
looks for unfinished tasks whose replica is no longer alive (its heartbeat older than
A2A_LEASE_TTL_MS, or its row gone) and ends them FAILED with `REPLICA_STOPPED`, in one
transaction that locks the rows it ends (`FOR UPDATE SKIP LOCKED`): two replicas noticing
the same death at once end each task once. The dead replicas' rows go in that transaction
too, with the leases nobody renews and the hand-overs a dead receiver left. A task is
never taken from a replica that is alive, however long its turn runs.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable

import anyio
from a2a.types.a2a_pb2 import Task, TaskState, TaskStatusUpdateEvent
from google.protobuf.message import DecodeError
from sqlalchemy import delete, or_, select
from sqlalchemy.exc import SQLAlchemyError

from a2a_acp_bridge.a2a.durable_store import end_task
from a2a_acp_bridge.a2a.event_log import append_end
from a2a_acp_bridge.a2a.states import TERMINAL
from a2a_acp_bridge.cluster.membership import Membership, database_now_ns
from a2a_acp_bridge.schema import handovers, leases, replicas, tasks
from a2a_acp_bridge.state import StateDatabase
from a2a_acp_bridge.state_writer import describe_failure

logger = logging.getLogger(__name__)

REPLICA_STOPPED = "The replica running this task stopped."
# How often each replica looks for a dead one's tasks: a task ends at most this long after
# its replica's lease ran out.
REAP_EVERY_S = 0.5
# A hand-over's row is its receiver's to remove, at most TAKEN_S after writing it; one left
# this long (by a receiver that died) goes with the dead replicas' rows. Generous: the
# receiver stamps it with its own clock, compared here with the database's.
HANDOVER_KEPT_NS = 600 * 10**9


class OrphanReaper:
    def __init__(self, database: StateDatabase, membership: Membership) -> None:
        self.database = database
        self.membership = membership

    async def reap(self) -> list[TaskStatusUpdateEvent]:
        """End the dead replicas' unfinished tasks; their FAILED events (for webhooks)."""
        ended: list[TaskStatusUpdateEvent] = []
        async with self.database.begin() as conn:
            now = await database_now_ns(conn)
            alive = [row[0] for row in await self.membership.alive(conn, now)]
            alive.append(self.membership.id)  # never its own, even with a late heartbeat
            rows = (
                await conn.execute(
                    select(tasks.c.id, tasks.c.body, tasks.c.replica)
                    .where(tasks.c.finished_ns.is_(None))
                    .where(or_(tasks.c.replica.is_(None), tasks.c.replica.not_in(alive)))
                    .with_for_update(skip_locked=True)
                )
            ).all()
            for task_id, body, replica in rows:
                task = Task()
                try:
                    task.ParseFromString(body)
                except DecodeError:
                    logger.error("a stored task cannot be read; left", extra={"task_id": task_id})
                    continue
                if task.status.state in TERMINAL:
                    continue
                event = end_task(task, REPLICA_STOPPED)
                ended.append(event)
                # Its subscribers on other replicas see it end (a2a/event_log.py).
                await append_end(conn, event)
                await conn.execute(
                    tasks.update()
                    .where(tasks.c.id == task_id)
                    .values(
                        state=TaskState.Name(task.status.state),
                        finished_ns=time.time_ns(),
                        updated_ns=time.time_ns(),
                        body=task.SerializeToString(deterministic=True),
                    )
                )
                logger.warning(
                    "a task of a stopped replica ended",
                    extra={"task_id": task_id, "replica": replica},
                )
            await conn.execute(
                delete(replicas).where(replicas.c.heartbeat_ns < now - self.membership.ttl_ns)
            )
            # Leases nobody renews any more (their replica stopped): gone too.
            await conn.execute(delete(leases).where(leases.c.expires_ns < now))
            # Hand-overs whose receiver died before removing them (each holds a request).
            await conn.execute(
                delete(handovers).where(handovers.c.created_ns < now - HANDOVER_KEPT_NS)
            )
        return ended

    async def run(self, on_ended: Callable[[list[TaskStatusUpdateEvent]], Awaitable[None]]) -> None:
        while True:
            try:
                ended = await self.reap()
            except (SQLAlchemyError, OSError) as exc:
                logger.warning(
                    "the stopped replicas' tasks could not be looked for",
                    extra={"problem": describe_failure(exc, "postgresql")},
                )
            else:
                if ended:
                    await on_ended(ended)
            await anyio.sleep(REAP_EVERY_S)
