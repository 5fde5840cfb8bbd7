"""The cap on live adapters is exact and the warm pool refills whatever emptied it: a
model-based property test that drives takes, refills, releases, crashes and failed starts in
random order and checks the count after every step (fake adapters; no process)."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

import anyio
from hypothesis import settings, strategies
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from a2a_acp_bridge.errors import SandboxError
from a2a_acp_bridge.pool import WarmPool


class FakeAdapter:
    def __init__(self) -> None:
        self.alive = True
        self.closed = False

    async def close(self) -> None:
        self.closed = True


class PoolMachine(RuleBasedStateMachine):
    @initialize(size=strategies.integers(0, 3), max_sessions=strategies.integers(1, 4))
    def start(self, size: int, max_sessions: int) -> None:
        self.max_sessions = max_sessions
        self.size = min(size, max_sessions)
        self.held_by_conversations: list[FakeAdapter] = []
        self.jobs: list[Callable[[], Coroutine[Any, Any, Any]]] = []
        self.retries: list[Callable[[], Coroutine[Any, Any, Any]]] = []
        self.fail_next = False
        self.pool = WarmPool(
            size=self.size,
            max_sessions=max_sessions,
            start=self._start,  # type: ignore[arg-type]
            spawn=self._spawn,
            held_by_conversations=lambda: len(self.held_by_conversations),
        )
        self.pool.fill()

    async def _start(self) -> FakeAdapter:
        if self.fail_next:
            self.fail_next = False
            raise SandboxError("no room", problem="No space left on device")
        return FakeAdapter()

    def _spawn(self, func: Callable[[], Coroutine[Any, Any, Any]]) -> None:
        name = getattr(func, "__name__", "")
        (self.retries if name == "_retry_later" else self.jobs).append(func)

    def _run(self, func: Callable[[], Coroutine[Any, Any, Any]]) -> None:
        anyio.run(func)

    @rule()
    def a_start_finishes(self) -> None:
        if self.jobs:
            self._run(self.jobs.pop(0))

    @rule()
    def the_retry_pause_ends(self) -> None:
        if self.retries:
            # The pause itself is not waited for here: only what follows it.
            self.retries.pop(0)
            self.pool._retry_pending = False
            self.pool.fill()

    @rule()
    def a_new_conversation_takes_a_warm_adapter(self) -> None:
        taken = self.pool.take()
        if taken is not None:
            self.held_by_conversations.append(taken)  # type: ignore[arg-type]
            self.pool.fill()

    @rule()
    def a_conversation_starts_its_own_adapter_if_there_is_room(self) -> None:
        if self.pool.has_room:
            self.held_by_conversations.append(FakeAdapter())
        else:
            warm = self.pool.give_way()
            if warm is not None:
                self.held_by_conversations.append(FakeAdapter())

    @rule()
    def a_conversation_releases_its_adapter(self) -> None:
        if self.held_by_conversations:
            self.held_by_conversations.pop(0)
            self.pool.fill()

    @rule()
    def a_warm_adapter_dies(self) -> None:
        warm: list[Any] = list(self.pool._warm)
        if warm:
            warm[0].alive = False
            assert self.pool.discard(warm[0])
            self.pool.fill()

    @rule()
    def the_next_start_fails(self) -> None:
        self.fail_next = True

    @invariant()
    def never_more_live_adapters_than_the_cap(self) -> None:
        assert self.pool.held() <= self.max_sessions

    @invariant()
    def the_pool_is_refilling_whenever_below_its_size_and_the_cap_has_room(self) -> None:
        if self.pool._retry_pending:
            return
        target = min(self.size, self.max_sessions - len(self.held_by_conversations))
        assert len(self.pool) + self.pool._filling >= target


PoolMachine.TestCase.settings = settings(max_examples=200, stateful_step_count=40, deadline=None)
test_the_pool_keeps_the_cap_and_refills = PoolMachine.TestCase
