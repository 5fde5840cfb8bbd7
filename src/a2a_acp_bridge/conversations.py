"""The conversation book: which sandbox and which ACP session each conversation has,
kept in the state database so a restart finds them again.

A `ConversationRecord` is what the bridge knows of one A2A context: its working directory
with the identity (st_dev, st_ino, inode generation) it had when the bridge made it
(boundary.py trusts a sandbox only while it is that very directory), whether the bridge
owns it, which agent (the preset, or the command line) made its ACP session and that
session's id, the principal that owns it, and when it was last used. A record's
`context_id` is the bridge's key of the conversation, (principal, contextId) as one string
(principals.conversation_key: the caller's contextId alone for `default`, so records
written before principals existed are `default`'s): the same contextId of two principals
is two records. The book keeps every record in memory and writes through the state
writer: a new record, or a new session or sandbox, is written before the turn goes on
(`remember`); the time of last use goes with the next batch (`touch`).

With a shared database (docs/scaling.md) the records in memory are only this replica's
view: every replica loads every record at start, and another replica may use a
conversation (or sweep it) since. What to sweep is then decided from the database
(`unused_since`, `forget_unused`): never a conversation another live replica holds, and a
row goes only while its time of last use in the database is still before the cutoff.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from sqlalchemy import delete, select
from sqlalchemy.exc import SQLAlchemyError

from a2a_acp_bridge.boundary import Identity
from a2a_acp_bridge.errors import StateWriteError
from a2a_acp_bridge.schema import DEFAULT_PRINCIPAL, conversations
from a2a_acp_bridge.state import StateDatabase
from a2a_acp_bridge.state_writer import Delete, Upsert

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ConversationRecord:
    context_id: str
    root: Path
    identity: Identity | None
    owned: bool
    agent: str
    session_id: str | None
    principal: str = DEFAULT_PRINCIPAL
    created_ns: int = 0
    last_used_ns: int = 0

    def same_place(self, other: ConversationRecord) -> bool:
        """Nothing worth writing at once changed (only the time of last use may have)."""
        return replace(other, created_ns=self.created_ns, last_used_ns=self.last_used_ns) == self


def _identity_text(identity: Identity | None) -> str | None:
    return None if identity is None else ":".join(str(part) for part in identity)


def _identity_of(value: object) -> Identity | None:
    """ "st_dev:st_ino:generation" back to an identity; anything else is none (never trusted)."""
    if not isinstance(value, str):
        return None
    parts = value.split(":")
    try:
        device, inode, generation = (int(part) for part in parts)
    except ValueError:
        return None
    return (device, inode, generation)


def _record_of(row: Any) -> ConversationRecord:
    return ConversationRecord(
        context_id=row["context_id"],
        root=Path(row["root"]),
        identity=_identity_of(row["identity"]),
        owned=bool(row["owned"]),
        agent=row["agent"],
        session_id=row["session_id"],
        principal=row["principal"],
        created_ns=row["created_ns"],
        last_used_ns=row["last_used_ns"],
    )


class ConversationBook:
    """The records, in memory and in the state database."""

    def __init__(self, database: StateDatabase) -> None:
        self._database = database
        self._records: dict[str, ConversationRecord] = {}
        # With a shared database: the other live replica holding a conversation's lease,
        # else None (cluster/leases.py `Leases.holder`); set when the replica joins.
        self.holder: Callable[[str], Awaitable[str | None]] | None = None

    async def load(self) -> list[ConversationRecord]:
        async with self._database.connect() as conn:
            rows = (await conn.execute(select(conversations))).mappings().all()
        for row in rows:
            record = _record_of(row)
            self._records[record.context_id] = record
        return list(self._records.values())

    async def fetch(self, context_id: str) -> ConversationRecord | None:
        """The record as the database holds it now (a shared database: another replica may
        have used the conversation since, or swept it: a record no longer there is dropped
        from memory too); None when the database has none. When the database cannot be
        read, the record in memory (if any)."""
        try:
            async with self._database.connect() as conn:
                row = (
                    (
                        await conn.execute(
                            select(conversations).where(conversations.c.context_id == context_id)
                        )
                    )
                    .mappings()
                    .first()
                )
        except (SQLAlchemyError, OSError):
            logger.warning(
                "the conversation could not be read from the database",
                extra={"context_id": context_id},
            )
            return self._records.get(context_id)
        if row is None:
            self._records.pop(context_id, None)
            return None
        record = _record_of(row)
        self._records[context_id] = record
        return record

    def get(self, context_id: str) -> ConversationRecord | None:
        return self._records.get(context_id)

    async def remember(self, record: ConversationRecord) -> None:
        """Keep `record`; written before this returns when more than its time of last use
        changed. A write the database refuses is logged (and retried by the writer): the
        conversation goes on, and a restart before the retry would lose only the link."""
        now = time.time_ns()
        known = self._records.get(record.context_id)
        record = replace(
            record,
            created_ns=known.created_ns if known is not None else now,
            last_used_ns=now,
        )
        self._records[record.context_id] = record
        op = Upsert(conversations, lambda: self._row(record.context_id))
        key = ("conversation", record.context_id)
        if known is not None and known.same_place(record):
            self._database.writer.submit(key, op)
            return
        try:
            await self._database.writer.write(key, op)
        except StateWriteError as exc:
            logger.warning(
                "the conversation could not be recorded yet",
                extra={"context_id": record.context_id, "problem": exc.problem},
            )

    def touch(self, context_id: str) -> None:
        known = self._records.get(context_id)
        if known is None:
            return
        self._records[context_id] = replace(known, last_used_ns=time.time_ns())
        self._database.writer.submit(
            ("conversation", context_id), Upsert(conversations, lambda: self._row(context_id))
        )

    def forget(self, context_id: str) -> None:
        if self._records.pop(context_id, None) is None:
            return
        self._database.writer.submit(
            ("conversation", context_id),
            Delete(conversations, {"context_id": context_id}),
            soon=True,
        )

    async def unused_since(self, cutoff_ns: int) -> list[ConversationRecord]:
        """The records last used before `cutoff_ns` (wall clock), oldest first. With a
        shared database: as the database holds them, leaving out those this replica used
        since (its touch may still be on its way) and those another live replica holds."""
        if not self._database.shared:
            stale = [r for r in self._records.values() if r.last_used_ns < cutoff_ns]
            return sorted(stale, key=lambda r: r.last_used_ns)
        async with self._database.connect() as conn:
            rows = (
                (
                    await conn.execute(
                        select(conversations)
                        .where(conversations.c.last_used_ns < cutoff_ns)
                        .order_by(conversations.c.last_used_ns)
                    )
                )
                .mappings()
                .all()
            )
        stale = []
        for row in rows:
            record = _record_of(row)
            known = self._records.get(record.context_id)
            if known is not None and known.last_used_ns >= cutoff_ns:
                continue
            if self.holder is not None and await self.holder(record.context_id) is not None:
                continue
            stale.append(record)
        return stale

    async def forget_unused(self, context_id: str, cutoff_ns: int) -> bool:
        """Forget the conversation if it is still unused since `cutoff_ns`; True when its
        record went (only then may its sandbox go). With a shared database the row is
        deleted at once, and only while the database's time of last use is still before
        the cutoff: another replica may have used the conversation since it was read."""
        if not self._database.shared:
            self.forget(context_id)
            return True
        async with self._database.begin() as conn:
            deleted = await conn.execute(
                delete(conversations).where(
                    conversations.c.context_id == context_id,
                    conversations.c.last_used_ns < cutoff_ns,
                )
            )
        if deleted.rowcount == 0:
            return False
        self._records.pop(context_id, None)
        return True

    def _row(self, context_id: str) -> dict[str, Any]:
        record = self._records[context_id]
        return {
            "context_id": record.context_id,
            "principal": record.principal,
            "root": str(record.root),
            "identity": _identity_text(record.identity),
            "owned": record.owned,
            "agent": record.agent,
            "session_id": record.session_id,
            "created_ns": record.created_ns,
            "last_used_ns": record.last_used_ns,
        }
