"""Push-notification configs, kept in memory for delivery and in the state database,
encrypted, for the next start.

Why not a2a-sdk's `DatabasePushNotificationConfigStore`: push delivery (push.py) looks up a
task's configs for every event, and that store reads them from the database (and decrypts
them) on each call; it also creates its table without a schema version. Here every read is
from memory; a config is written, encrypted whole (Fernet, push_key.py: its URL, token and
credentials), before the caller is told it was stored, and deleted before the caller is
told it was deleted; a write the database refuses is an error for the caller, naming the
cause, and changes nothing. A task's configs go when the task is deleted.

Each config belongs to the principal that set it (ownership.py); its secrets (token,
credentials) are write-only: what a caller is given back, on setting it as on reading it,
has each one replaced by `REDACTED`. Only delivery (`get_info_for_dispatch`) reads them.
A config set again with a secret reading `REDACTED` keeps the one stored.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence

from a2a.server.context import ServerCallContext
from a2a.server.tasks import PushNotificationConfigStore
from a2a.server.tasks.push_notification_config_store import normalize_push_notification_config
from a2a.types.a2a_pb2 import TaskPushNotificationConfig
from a2a.utils.errors import InternalError
from cryptography.fernet import InvalidToken, MultiFernet
from google.protobuf.message import DecodeError
from sqlalchemy import RowMapping, select
from sqlalchemy.exc import SQLAlchemyError

from a2a_acp_bridge.a2a.ownership import REDACTED, owner_name, redacted
from a2a_acp_bridge.a2a.push import V03, VERSION_STATE
from a2a_acp_bridge.errors import StateWriteError
from a2a_acp_bridge.schema import DEFAULT_PRINCIPAL, push_configs
from a2a_acp_bridge.state import StateDatabase
from a2a_acp_bridge.state_writer import Delete, Upsert

logger = logging.getLogger(__name__)

# With a shared database: a delivery reads the task's configs again at most this often.
SHARED_REFRESH_S = 1.0


def kept_secrets(
    config: TaskPushNotificationConfig,
    known: tuple[str, TaskPushNotificationConfig] | None,
    owner: str,
) -> None:
    """A config set again as it was read back (its secrets `REDACTED`) keeps the secrets
    its owner stored before, so a client may edit a config it can no longer read whole."""
    if known is None or known[0] != owner:
        return
    previous = known[1]
    if config.token == REDACTED:
        config.token = previous.token
    if config.HasField("authentication") and config.authentication.credentials == REDACTED:
        config.authentication.credentials = previous.authentication.credentials


class DurablePushConfigStore(PushNotificationConfigStore):
    """Configs by task, then config id: (owner, config)."""

    def __init__(self) -> None:
        self._configs: dict[str, dict[str, tuple[str, TaskPushNotificationConfig]]] = {}
        self._database: StateDatabase | None = None
        self._cipher: MultiFernet | None = None
        # Registrations made over A2A 0.3 (their webhooks get 0.3 payloads), stored with them.
        self._v03: set[tuple[str, str]] = set()
        # --- replicas (issue 16): with a shared database another replica may have changed
        # a task's configs: they are read again before each API call, and before a
        # delivery at most every SHARED_REFRESH_S.
        self.shared = False
        self._read_at: dict[str, float] = {}

    async def restore(self, database: StateDatabase, cipher: MultiFernet) -> int:
        """Load the stored configs; one that cannot be decrypted (another key) is left out."""
        self._database = database
        self._cipher = cipher
        async with database.connect() as conn:
            rows = (await conn.execute(select(push_configs))).mappings().all()
        configs, v03 = self._decode(rows)
        self._configs.update(configs)
        self._v03 |= v03
        return len(rows)

    async def _reload(self, task_id: str, *, at_most_every_s: float = 0.0) -> None:
        if not self.shared or self._database is None or self._cipher is None:
            return
        now = time.monotonic()
        if at_most_every_s and now - self._read_at.get(task_id, -at_most_every_s) < at_most_every_s:
            return
        self._read_at[task_id] = now
        try:
            async with self._database.connect() as conn:
                rows = (
                    (
                        await conn.execute(
                            select(push_configs).where(push_configs.c.task_id == task_id)
                        )
                    )
                    .mappings()
                    .all()
                )
        except (SQLAlchemyError, OSError):
            logger.warning("a task's push configs could not be read", extra={"task_id": task_id})
            return
        configs, v03 = self._decode(rows)
        # As the database has them now: a config re-registered over 1.0 elsewhere is 1.0.
        self._v03 = {key for key in self._v03 if key[0] != task_id} | v03
        if task_id in configs:
            self._configs[task_id] = configs[task_id]
        else:
            self._configs.pop(task_id, None)

    def _decode(
        self, rows: Sequence[RowMapping]
    ) -> tuple[dict[str, dict[str, tuple[str, TaskPushNotificationConfig]]], set[tuple[str, str]]]:
        """Stored rows as configs by task, then config id, and the (task, config) pairs
        registered over A2A 0.3; a row that cannot be decrypted (another key) is logged and
        left out."""
        assert self._cipher is not None
        configs: dict[str, dict[str, tuple[str, TaskPushNotificationConfig]]] = {}
        v03: set[tuple[str, str]] = set()
        for row in rows:
            config = TaskPushNotificationConfig()
            try:
                config.ParseFromString(self._cipher.decrypt(row["body"]))
            except (InvalidToken, DecodeError):
                logger.error(
                    "a stored push config cannot be decrypted (was A2A_PUSH_KEY changed?); "
                    "it is not used",
                    extra={"task_id": row["task_id"], "config_id": row["config_id"]},
                )
                continue
            # Written before principals existed: the one caller there was, `default`.
            owner = row["owner"] or DEFAULT_PRINCIPAL
            configs.setdefault(row["task_id"], {})[row["config_id"]] = (owner, config)
            if row["protocol"] == V03:
                v03.add((row["task_id"], row["config_id"]))
        return configs, v03

    async def set_info(
        self,
        task_id: str,
        notification_config: TaskPushNotificationConfig,
        context: ServerCallContext,
    ) -> TaskPushNotificationConfig:
        stored = normalize_push_notification_config(task_id, notification_config)
        owner = owner_name(context)
        # The secrets kept are the stored ones: another replica may have set them since.
        await self._reload(task_id)
        kept_secrets(stored, self._configs.get(task_id, {}).get(stored.id), owner)
        over_v03 = context.state.get(VERSION_STATE) == V03
        if self._database is not None and self._cipher is not None:
            body = self._cipher.encrypt(stored.SerializeToString(deterministic=True))
            row = {
                "task_id": task_id,
                "config_id": stored.id,
                "owner": owner,
                "body": body,
                "protocol": V03 if over_v03 else "1.0",
            }
            await self._write(("push", task_id, stored.id), Upsert(push_configs, lambda: row))
        self._configs.setdefault(task_id, {})[stored.id] = (owner, stored)
        if over_v03:
            self._v03.add((task_id, stored.id))
        else:
            self._v03.discard((task_id, stored.id))
        return redacted(stored)

    async def get_info(
        self, task_id: str, context: ServerCallContext
    ) -> list[TaskPushNotificationConfig]:
        await self._reload(task_id)
        owner = owner_name(context)
        return [redacted(c) for o, c in self._configs.get(task_id, {}).values() if o == owner]

    async def get_info_for_dispatch(self, task_id: str) -> list[TaskPushNotificationConfig]:
        await self._reload(task_id, at_most_every_s=SHARED_REFRESH_S)
        return [config for _owner, config in self._configs.get(task_id, {}).values()]

    async def delete_info(
        self,
        task_id: str,
        context: ServerCallContext,
        config_id: str | None = None,
    ) -> None:
        await self._reload(task_id)
        owner = owner_name(context)
        known = self._configs.get(task_id, {})
        doomed = [
            cid
            for cid, (o, _config) in known.items()
            if o == owner and (config_id is None or cid == config_id)
        ]
        for cid in doomed:
            where = {"task_id": task_id, "config_id": cid}
            await self._write(("push", task_id, cid), Delete(push_configs, where))
            del known[cid]
        if not known:
            self._configs.pop(task_id, None)

    def registered_v03(self, task_id: str, config: TaskPushNotificationConfig) -> bool:
        return (task_id, config.id) in self._v03

    def forget_task(self, task_id: str) -> None:
        """The task was deleted: its configs go too (also any left unreadable)."""
        known = self._configs.pop(task_id, None) or {}
        if self._database is None:
            return
        writer = self._database.writer
        for cid in known:
            where = {"task_id": task_id, "config_id": cid}
            writer.submit(("push", task_id, cid), Delete(push_configs, where))
        writer.submit(("push", task_id, "*"), Delete(push_configs, {"task_id": task_id}))

    async def _write(self, key: tuple[str, str, str], op: Upsert | Delete) -> None:
        if self._database is None:
            return
        try:
            await self._database.writer.write(key, op)
        except StateWriteError as exc:
            # The caller is told nothing changed: the writer must not retry it later.
            self._database.writer.withdraw(key, op)
            raise InternalError(
                message=f"The push-notification config was not changed: {exc}; try again later."
            ) from None
