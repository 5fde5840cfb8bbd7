"""The state directory wired into the app: opened, restored, swept and closed in order.

`open` makes, locks, checks and migrates the database and reads the push key; the server
calls it before it binds its port (server.py), so a state directory the bridge refuses
stops the start with one line saying why. `running()` (the app's lifespan) then starts the
writer, restores the tasks (ending those that were running when the bridge stopped), the
push configs and the conversations, and hands the bridge its hooks; its end writes what
is still pending and closes the database, after the bridge and push delivery are done.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Sequence

from a2a.types.a2a_pb2 import CancelTaskRequest, TaskStatusUpdateEvent
from cryptography.fernet import MultiFernet

from a2a_acp_bridge.a2a.durable_store import DurableTaskStore
from a2a_acp_bridge.a2a.event_log import EventLog
from a2a_acp_bridge.a2a.handler import BridgeRequestHandler
from a2a_acp_bridge.a2a.handover import Handover
from a2a_acp_bridge.a2a.orphans import OrphanReaper
from a2a_acp_bridge.a2a.push import PushDelivery
from a2a_acp_bridge.a2a.push_configs import DurablePushConfigStore
from a2a_acp_bridge.a2a.remote import RemoteCancel
from a2a_acp_bridge.a2a.shared_tasks import SharedReads
from a2a_acp_bridge.bridge import Bridge
from a2a_acp_bridge.cluster.leases import Leases
from a2a_acp_bridge.cluster.membership import Membership
from a2a_acp_bridge.cluster.signals import Signals
from a2a_acp_bridge.config import Settings
from a2a_acp_bridge.conversations import ConversationBook, ConversationRecord
from a2a_acp_bridge.ledger import DecisionLedger
from a2a_acp_bridge.push_key import push_cipher
from a2a_acp_bridge.state import StateDatabase
from a2a_acp_bridge.sweep import Sweeper

logger = logging.getLogger(__name__)


class Persistence:
    def __init__(
        self,
        settings: Settings,
        bridge: Bridge,
        task_store: DurableTaskStore,
        push_configs: DurablePushConfigStore,
        push: PushDelivery,
    ) -> None:
        self.settings = settings
        self.bridge = bridge
        self.task_store = task_store
        self.push_configs = push_configs
        self.push = push
        self.database = StateDatabase(
            settings.state_dir, settings.database_url, wait_s=settings.database_wait_s
        )
        self.book = ConversationBook(self.database)
        # The decision ledger (ledger.py): the chain writes to it once the database runs.
        self.ledger = DecisionLedger(
            self.database, ttl_s=settings.decision_ttl_s, retention=settings.decision_retention
        )
        self.sweeper = Sweeper(
            task_store,
            bridge,
            on_failure=lambda: bridge.metrics.background_failed("sweep"),
            decisions=self.ledger,
        )
        self._cipher: MultiFernet | None = None
        # With A2A_DATABASE_URL: this replica among the others (docs/scaling.md).
        self.membership: Membership | None = None
        self.reaper: OrphanReaper | None = None
        # Replicas signal each other through the database; every event of a task is kept
        # there for the subscribers of other replicas (a2a/event_log.py).
        self.signals = Signals(self.database) if self.database.shared else None
        self.event_log = EventLog(self.database, self.signals) if self.signals is not None else None
        self.remote_cancel: RemoteCancel | None = None
        self._handler: BridgeRequestHandler | None = None

    async def open(self) -> None:
        """Raises StateError (with what to do) when the state directory cannot be used."""
        await self.database.open()
        if self._cipher is None:
            try:
                self._cipher = push_cipher(self.settings.push_keys, self.settings.state_dir)
            except BaseException:
                await self.database.close()
                raise

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[list[TaskStatusUpdateEvent]]:
        """The database open with its writer running; yields the tasks ended by the
        restart (their webhooks are told once push delivery runs)."""
        await self.open()
        assert self._cipher is not None
        async with self.database:
            # Configs first: a task the retention drops while loading takes its configs along.
            await self.push_configs.restore(self.database, self._cipher)
            self.task_store.on_delete.append(self.push_configs.forget_task)
            if self.database.shared:
                await self._join()
            ended = await self.task_store.restore(self.database)
            if self.reaper is not None:
                # Before serving: the tasks a replica (this one, before a kill) left running.
                ended += await self.reaper.reap()
            records = await self.book.load()
            self.bridge.restore(self.book, records)
            self.bridge.task_recorded = self.task_store.ensure_recorded
            self.bridge.decisions.ledger = self.ledger
            try:
                yield ended
            finally:
                self.bridge.decisions.ledger = None
                if self.membership is not None:
                    # The shutdown's last task states first, then gone from the replicas.
                    await self.database.writer.flush()
                    await self.membership.leave()

    async def _join(self) -> None:
        membership = Membership(
            self.database, self.settings.lease_ttl_s, self.settings.max_sessions
        )
        self.membership = membership
        self.reaper = OrphanReaper(self.database, membership)
        self.task_store.replica = membership.id
        self.task_store.shared = SharedReads(self.database)
        self.push_configs.shared = True
        await membership.join()
        leases = Leases(self.database, membership)
        # The sweep leaves alone what another replica runs (conversations.py).
        self.book.holder = leases.holder

        async def find_conversation(context_id: str) -> ConversationRecord | None:
            # This replica runs the conversation from now on (cluster/leases.py).
            holder = await leases.claim(context_id)
            if holder is not None:
                logger.warning(
                    "another replica took the conversation at the same moment; it runs here too",
                    extra={"context_id": context_id, "replica": holder},
                )
            return await self.book.fetch(context_id)

        self.bridge.find_conversation = find_conversation
        assert self.signals is not None
        remote = RemoteCancel(
            self.database,
            membership,
            self.signals,
            self.task_store,
            lambda func: self.bridge.run_in_background(func, "remote cancel"),
        )
        self.remote_cancel = remote
        handler = self._handler
        if handler is not None:
            remote.cancel_here = lambda task_id, context: handler.on_cancel_task(
                CancelTaskRequest(id=task_id), context
            )
            handler.remote_cancel = remote.cancel
            assert self.event_log is not None
            handover = Handover(
                self.database,
                membership,
                self.signals,
                self.event_log,
                self.task_store,
                leases,
                lambda func: self.bridge.run_in_background(func, "handover"),
            )
            handover.send_here = handler.on_message_send
            handover.room_here = lambda context_id: (
                self.bridge.root_of(context_id) is not None or self.bridge.can_start_adapter()
            )
            handler.handover = handover

    def serve_for(self, handler: BridgeRequestHandler) -> None:
        """The request handler other replicas' requests reach here through (a2a/remote.py)."""
        self._handler = handler

    def start_sweeping(self) -> None:
        self.bridge.run_in_background(self.sweeper.run, "sweep")
        membership, reaper = self.membership, self.reaper
        if membership is not None and reaper is not None:
            self.bridge.run_in_background(
                lambda: membership.run(self.bridge.adapter_load), "heartbeat"
            )
            self.bridge.run_in_background(lambda: reaper.run(self.notify), "orphans")
        if self.signals is not None:
            self.bridge.run_in_background(self.signals.run, "replica signals")
        if self.event_log is not None:
            self.bridge.run_in_background(self.event_log.run, "task events sweep")

    async def notify(self, events: Sequence[TaskStatusUpdateEvent]) -> None:
        """Tell each ended task's webhooks (push.py delivers in the background)."""
        for event in events:
            try:
                await self.push.send_notification(event.task_id, event)
            except Exception:
                logger.exception("a push notification could not be queued")
