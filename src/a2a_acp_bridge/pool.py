"""Warm adapters, and the cap on live adapters.

A few adapters (ACP_POOL_SIZE) are started ahead of need, each in a fresh sandbox of its
own, and handed to the next brand-new conversation, so its first answer does not wait for
an adapter to boot. The cap (ACP_MAX_SESSIONS) counts every adapter alive or starting:
warm ones, those being started for the pool, and those that conversations hold or are
starting (`held_by_conversations`). The pool refills whenever it is below its size and the
cap has room, whatever emptied it; a warm adapter that dies stops counting at once.

A warm start that fails (no adapter, a sandbox that cannot be made: a full disk, a bad
ACP_SANDBOX_DIR) is logged once per failure and retried with a doubling pause
(FIRST_RETRY_S up to MAX_RETRY_S): the bridge keeps serving meanwhile, and the pool fills
again by itself once the cause is gone.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

import anyio

from a2a_acp_bridge.acp.session import AgentSession
from a2a_acp_bridge.errors import AdapterError, BridgeError
from a2a_acp_bridge.logs import log_ids

logger = logging.getLogger(__name__)

# After a failed warm start, the pause before the pool tries again, doubling up to the
# most: a cause an operator must fix (a full disk) is retried often enough to recover
# within a minute of the fix, rarely enough not to flood the log.
FIRST_RETRY_S = 1.0
MAX_RETRY_S = 60.0

Starter = Callable[[], Awaitable[AgentSession]]
Spawner = Callable[[Callable[[], Coroutine[Any, Any, Any]]], None]


class WarmPool:
    """Adapters started ahead of need, and the count of every live adapter."""

    def __init__(
        self,
        *,
        size: int,
        max_sessions: int,
        start: Starter,
        spawn: Spawner,
        held_by_conversations: Callable[[], int],
    ) -> None:
        self.size = size
        self.max_sessions = max_sessions
        self._start = start
        self._spawn = spawn
        self._held_by_conversations = held_by_conversations
        self._warm: deque[AgentSession] = deque()
        self._filling = 0
        self._retry_s = 0.0  # the pause before the next attempt; 0 after a success
        self._retry_pending = False
        self.closing = False
        # Told of every failed warm start (for the metrics).
        self.on_failure: Callable[[], None] | None = None

    def __len__(self) -> int:
        return len(self._warm)

    def held(self) -> int:
        """Adapters alive or being started, counted against ACP_MAX_SESSIONS."""
        return len(self._warm) + self._filling + self._held_by_conversations()

    @property
    def has_room(self) -> bool:
        return self.held() < self.max_sessions

    def fill(self) -> None:
        """Start warm adapters until the pool is full or the cap is reached (after a failed
        start, not before its retry pause is over)."""
        if self.closing or self._retry_pending:
            return
        missing = self.size - len(self._warm) - self._filling
        missing = min(missing, self.max_sessions - self.held())
        for _ in range(max(0, missing)):
            self._filling += 1
            self._spawn(self._start_one)

    async def _start_one(self) -> None:
        # Started from whichever task took a warm adapter: its ids are not this adapter's.
        with log_ids(task_id=None, context_id=None, session_id=None):
            try:
                session = await self._start()
            except Exception as exc:
                self._failed(exc)
                return
            finally:
                self._filling -= 1
        self._retry_s = 0.0
        if self.closing:
            await session.close()
            return
        self._warm.append(session)

    def _failed(self, exc: Exception) -> None:
        if self.on_failure is not None:
            self.on_failure()
        self._retry_s = min(MAX_RETRY_S, self._retry_s * 2 or FIRST_RETRY_S)
        if isinstance(exc, AdapterError):
            pass  # the starter logged it
        elif isinstance(exc, (BridgeError, OSError)):
            logger.error("warm adapter could not be started", extra={"error": str(exc)})
        else:
            logger.error("warm adapter start failed unexpectedly", exc_info=exc)
        if not self._retry_pending:
            self._retry_pending = True
            logger.info("warm pool retries later", extra={"retry_s": self._retry_s})
            self._spawn(self._retry_later)

    async def _retry_later(self) -> None:
        try:
            await anyio.sleep(self._retry_s)
        finally:
            self._retry_pending = False
        self.fill()

    def take(self) -> AgentSession | None:
        """A live warm adapter for a new conversation (dead ones are stopped on the way).
        The caller refills once the adapter is counted as its conversation's."""
        while self._warm:
            session = self._warm.popleft()
            if session.alive:
                return session
            self._spawn(session.close)
        return None

    def discard(self, session: AgentSession) -> bool:
        """Forget a warm adapter that died (the caller stops what is left of it)."""
        try:
            self._warm.remove(session)
        except ValueError:
            return False
        return True

    def give_way(self) -> AgentSession | None:
        """A warm adapter to stop so that a conversation's adapter can start at the cap."""
        return self._warm.pop() if self._warm else None

    def empty(self) -> list[AgentSession]:
        """Stop refilling and hand over every warm adapter (the bridge is shutting down)."""
        self.closing = True
        sessions = list(self._warm)
        self._warm.clear()
        return sessions
