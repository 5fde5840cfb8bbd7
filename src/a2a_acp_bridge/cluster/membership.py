"""The replicas sharing one PostgreSQL state, each alive while it renews its heartbeat.

A replica joins at start with a row of its own in `replicas` (its id: host, pid and a
random suffix, never reused) and renews the row's heartbeat every `ttl / HEARTBEATS_PER_TTL`
with its load (adapters running, ACP_MAX_SESSIONS). A replica whose heartbeat is older
than A2A_LEASE_TTL_MS is dead for every other one: its running tasks are ended
(a2a/orphans.py) and its row removed. Every time is the database server's clock, so the
replicas' own clocks never have to agree. A clean stop removes the row at once.
"""

from __future__ import annotations

import logging
import os
import socket
import uuid
from collections.abc import Callable

import anyio
from sqlalchemy import Insert, delete, select, text, update
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncConnection

from a2a_acp_bridge.schema import leases, replicas
from a2a_acp_bridge.state import StateDatabase
from a2a_acp_bridge.state_writer import describe_failure

logger = logging.getLogger(__name__)

# A heartbeat this many times per TTL: two may be lost before the replica counts as dead.
HEARTBEATS_PER_TTL = 3
# After a failed heartbeat, the pause before the next try (the TTL still runs).
RETRY_S = 0.5
ID_LENGTH = 64


def replica_id() -> str:
    host = socket.gethostname().split(".")[0][:32] or "host"
    return f"{host}-{os.getpid()}-{uuid.uuid4().hex[:8]}"[:ID_LENGTH]


async def database_now_ns(conn: AsyncConnection) -> int:
    """The database server's clock, in nanoseconds since the epoch."""
    value = await conn.scalar(
        text("SELECT CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000000 AS BIGINT)")
    )
    return int(value) * 1000


class Membership:
    def __init__(self, database: StateDatabase, ttl_s: float, capacity: int) -> None:
        self.database = database
        self.ttl_s = ttl_s
        self.capacity = capacity
        self.id = replica_id()
        # Its adapters running, and those of them in a turn (the others, idle or warm, give
        # way to a new conversation: only the busy ones make a replica full).
        self.live = 0
        self.busy = 0

    @property
    def ttl_ns(self) -> int:
        return int(self.ttl_s * 1e9)

    def _joining(self, now_ns: int) -> Insert:
        """This replica's row as it joins (or joins again), at the database's `now_ns`."""
        return replicas.insert().values(
            id=self.id,
            started_ns=now_ns,
            heartbeat_ns=now_ns,
            live=self.live,
            busy=self.busy,
            capacity=self.capacity,
        )

    async def join(self) -> None:
        async with self.database.begin() as conn:
            now = await database_now_ns(conn)
            await conn.execute(self._joining(now))
        logger.info("replica joined", extra={"replica": self.id, "ttl_s": self.ttl_s})

    async def beat(self) -> None:
        async with self.database.begin() as conn:
            now = await database_now_ns(conn)
            renewed = await conn.execute(
                update(replicas)
                .where(replicas.c.id == self.id)
                .values(heartbeat_ns=now, live=self.live, busy=self.busy, capacity=self.capacity)
            )
            # The conversations whose adapter runs here stay here (cluster/leases.py).
            await conn.execute(
                update(leases)
                .where(leases.c.replica == self.id)
                .values(expires_ns=now + self.ttl_ns)
            )
            if renewed.rowcount == 0:
                # Taken for dead (a pause longer than the TTL): its tasks were ended by
                # another replica. It joins again; what it still runs writes over them.
                logger.error(
                    "this replica was taken for dead by another one; joining again",
                    extra={"replica": self.id},
                )
                await conn.execute(self._joining(now))

    async def run(self, load: Callable[[], tuple[int, int]]) -> None:
        """Renew the heartbeat until cancelled, reporting `load()` (live, busy); a failure
        is logged and retried soon."""
        while True:
            self.live, self.busy = load()
            try:
                await self.beat()
                pause = self.ttl_s / HEARTBEATS_PER_TTL
            except (SQLAlchemyError, OSError) as exc:
                logger.warning(
                    "the heartbeat could not be written",
                    extra={"replica": self.id, "problem": describe_failure(exc, "postgresql")},
                )
                pause = RETRY_S
            await anyio.sleep(pause)

    async def leave(self) -> None:
        """A clean stop: gone at once (its tasks were ended by the shutdown)."""
        try:
            async with self.database.begin() as conn:
                await conn.execute(delete(leases).where(leases.c.replica == self.id))
                await conn.execute(delete(replicas).where(replicas.c.id == self.id))
        except (SQLAlchemyError, OSError) as exc:
            logger.warning(
                "the replica's row could not be removed; it expires after the TTL",
                extra={"problem": describe_failure(exc, "postgresql")},
            )

    async def alive(self, conn: AsyncConnection, now_ns: int) -> list[tuple[str, int, int]]:
        """The replicas alive at `now_ns` (database clock): (id, busy, capacity)."""
        rows = await conn.execute(
            select(replicas.c.id, replicas.c.busy, replicas.c.capacity).where(
                replicas.c.heartbeat_ns >= now_ns - self.ttl_ns
            )
        )
        return [(row[0], int(row[1]), int(row[2])) for row in rows]
