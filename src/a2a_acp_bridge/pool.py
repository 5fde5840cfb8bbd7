"""Warm adapters, and the cap on live adapters.

A few adapters (ACP_POOL_SIZE) are started ahead of need, each in a fresh sandbox of its
own, and handed to the next brand-new conversation, so its first answer does not wait for
an adapter to boot. The cap (ACP_MAX_SESSIONS) counts every adapter alive or starting:
warm ones, those being started for the pool, and those that conversations hold or are
starting (`held_by_conversations`). The pool refills whenever it is below its size and the
cap has room.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from a2a_acp_bridge.acp.session import AgentSession
from a2a_acp_bridge.errors import AdapterError
from a2a_acp_bridge.logs import log_ids

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
        self.closing = False

    def __len__(self) -> int:
        return len(self._warm)

    def held(self) -> int:
        """Adapters alive or being started, counted against ACP_MAX_SESSIONS."""
        return len(self._warm) + self._filling + self._held_by_conversations()

    @property
    def has_room(self) -> bool:
        return self.held() < self.max_sessions

    def fill(self) -> None:
        """Start warm adapters until the pool is full or the cap is reached."""
        if self.closing:
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
            except AdapterError:
                return  # the starter logged it
            finally:
                self._filling -= 1
        if self.closing:
            await session.close()
            return
        self._warm.append(session)

    def take(self) -> AgentSession | None:
        """A live warm adapter for a new conversation (dead ones are stopped on the way).
        The caller refills once the adapter is counted as its conversation's."""
        while self._warm:
            session = self._warm.popleft()
            if session.alive:
                return session
            self._spawn(session.close)
        return None

    def give_way(self) -> AgentSession | None:
        """A warm adapter to stop so that a conversation's adapter can start at the cap."""
        return self._warm.pop() if self._warm else None

    def empty(self) -> list[AgentSession]:
        """Stop refilling and hand over every warm adapter (the bridge is shutting down)."""
        self.closing = True
        sessions = list(self._warm)
        self._warm.clear()
        return sessions
