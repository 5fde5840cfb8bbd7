"""Leases: a conversation lives on one replica at a time, the one running its adapter.

Before a replica runs a turn of a conversation it claims the conversation's lease (one row
of `leases`): it gets it when nobody holds it, when it holds it already, when the lease ran
out (its holder stopped renewing: cluster/membership.py renews every lease of a replica
with its heartbeat), or when its holder is no longer among the replicas (a clean stop
removes its leases at once). The claim is one statement, so two replicas claiming at once
cannot both win. A message for a conversation another replica holds is handed to it
(a2a/handover.py).
"""

from __future__ import annotations

from sqlalchemy import select, text

from a2a_acp_bridge.cluster.membership import Membership, database_now_ns
from a2a_acp_bridge.schema import leases
from a2a_acp_bridge.state import StateDatabase

_CLAIM = text(
    "INSERT INTO leases (context_id, replica, expires_ns) VALUES (:context, :me, :until) "
    "ON CONFLICT (context_id) DO UPDATE SET replica = :me, expires_ns = :until "
    "WHERE leases.replica = :me OR leases.expires_ns < :now "
    "OR leases.replica NOT IN (SELECT id FROM replicas) "
    "RETURNING replica"
)


class Leases:
    def __init__(self, database: StateDatabase, membership: Membership) -> None:
        self.database = database
        self.membership = membership

    async def claim(self, context_id: str) -> str | None:
        """Take the lease; None when taken, else the replica that holds it."""
        async with self.database.begin() as conn:
            now = await database_now_ns(conn)
            won = await conn.scalar(
                _CLAIM,
                {
                    "context": context_id,
                    "me": self.membership.id,
                    "until": now + self.membership.ttl_ns,
                    "now": now,
                },
            )
            if won is not None:
                return None
            holder = await conn.scalar(
                select(leases.c.replica).where(leases.c.context_id == context_id)
            )
        return str(holder) if holder is not None else None

    async def holder(self, context_id: str) -> str | None:
        """Another replica holding the conversation now, else None."""
        async with self.database.connect() as conn:
            now = await database_now_ns(conn)
            row = (
                await conn.execute(
                    select(leases.c.replica).where(
                        leases.c.context_id == context_id, leases.c.expires_ns >= now
                    )
                )
            ).first()
            if row is None or row[0] == self.membership.id:
                return None
            alive = await self.membership.alive(conn, now)
        return str(row[0]) if any(entry[0] == row[0] for entry in alive) else None
