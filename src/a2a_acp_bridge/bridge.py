"""The bridge: conversations, their adapters, and the turns that run on them.

One A2A context is one conversation: one sandbox (or the shared ACP_CWD), at most one
adapter process with one ACP session, and one turn at a time. A second message while a
turn runs is queued as its own task; cancelling a queued task never touches the running
one. Concurrent first messages of a new context share one adapter start.

Adapters are started in the bridge's own task group (owned by the server's lifespan), so a
caller that cancels while its adapter boots is answered at once and the adapter is kept
for the conversation's next message. A small pool keeps adapters already started in fresh
sandboxes, handed to the next new context. Idle adapters are stopped after
ACP_IDLE_TIMEOUT_MS; their sandbox stays, and the next message loads the old session when
the agent can.

Two caps keep a busy bridge from eating the machine, and neither queues silently: live
adapters (ACP_MAX_SESSIONS; a new one first displaces a warm or the least recently used
idle adapter, and when every one is busy the task is refused with `CapacityError`), and
tasks waiting in one conversation (ACP_MAX_QUEUED_TASKS, refused the same way).
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
from anyio.abc import TaskGroup

from a2a_acp_bridge.acp.process import adapter_environment
from a2a_acp_bridge.acp.prompt import PromptCapabilities
from a2a_acp_bridge.acp.session import (
    AgentInfo,
    AgentSession,
    StartPlan,
    TurnOutcome,
    notice_for_lost_memory,
)
from a2a_acp_bridge.boundary import Boundary, Sandboxes, handed_boundary
from a2a_acp_bridge.config import Settings
from a2a_acp_bridge.errors import (
    AdapterError,
    AdapterExitedError,
    AdapterStartError,
    CapacityError,
    SupervisionError,
    SupervisionLostError,
)
from a2a_acp_bridge.events import Notice, QuestionReply, TurnEnd, TurnEvent
from a2a_acp_bridge.homes import AdapterHomes, home_environment, seeds_for
from a2a_acp_bridge.isolation import Isolation
from a2a_acp_bridge.logs import log_ids
from a2a_acp_bridge.metrics import Metrics
from a2a_acp_bridge.permissions import Answerer, Decider, answer, decide
from a2a_acp_bridge.prompt import PromptPart

logger = logging.getLogger(__name__)

# How often the reaper looks for idle adapters, at most.
REAP_EVERY_S = 30.0
# On shutdown, how long running tasks get to end CANCELED before the adapters are stopped
# regardless (each turn is itself bounded by the cancel grace, then its adapter stopped).
SHUTDOWN_GRACE_S = 10.0
SHUTDOWN_REASON = "Cancelled: the bridge is shutting down."


class TurnCancelled(Exception):
    """The task was cancelled before its turn reached the agent."""


@dataclass
class TaskTicket:
    """One A2A task waiting for, or running, its turn in a conversation."""

    task_id: str
    context_id: str
    message_id: str | None = None
    cancel_requested: bool = False
    cancel_reason: str = "Cancelled at the caller's request."
    running: bool = False
    session_id: str | None = None
    done: anyio.Event = field(default_factory=anyio.Event)
    wake: anyio.Event = field(default_factory=anyio.Event)
    session: AgentSession | None = None

    def was_cancelled(self) -> bool:
        return self.cancel_requested


@dataclass
class Conversation:
    """One A2A context."""

    context_id: str
    boundary: Boundary
    session: AgentSession | None = None
    last_session_id: str | None = None
    queue: deque[TaskTicket] = field(default_factory=deque)
    starting: anyio.Event | None = None
    start_error: AdapterError | None = None
    last_used: float = field(default_factory=time.monotonic)
    lost_memory_pending: bool = False
    # Set while the conversation's previous adapter is being stopped: a new one waits for
    # it, so two adapters never hold the same session or sandbox at once.
    retiring: anyio.Event | None = None

    @property
    def busy(self) -> bool:
        return bool(self.queue) or self.starting is not None


EventsCallback = Callable[[list[TurnEvent]], Awaitable[Any]]


class Bridge:
    """Runs A2A tasks as ACP turns. Use as an async context manager (it owns a task group)."""

    def __init__(
        self,
        settings: Settings,
        *,
        environ: dict[str, str] | None = None,
        decider: Decider = decide,
        answerer: Answerer = answer,
        metrics: Metrics | None = None,
    ) -> None:
        self.settings = settings
        # The permission classifier, replaceable by an external channel (docs/permissions.md).
        self._decider = decider
        self._answerer = answerer
        source = environ if environ is not None else dict(os.environ)
        # Kernel confinement and per-conversation HOMEs (isolation.py, homes.py).
        self.isolation = Isolation(settings, source)
        self._env = self.isolation.environment(
            adapter_environment(source, settings.agent_env_names)
        )
        self.homes = AdapterHomes(
            settings.state_dir,
            seeds=seeds_for(settings.agent.preset, settings.home_seed),
            environ=source,
        )
        self.sandboxes = Sandboxes(settings.sandbox_parent, allow_execute=settings.allow_execute)
        self._handed = (
            handed_boundary(settings.acp_cwd, allow_execute=settings.allow_execute)
            if settings.acp_cwd is not None
            else None
        )
        self._conversations: dict[str, Conversation] = {}
        self._tickets: dict[str, TaskTicket] = {}
        self._pool: deque[AgentSession] = deque()
        self._pool_filling = 0
        self._task_group: TaskGroup | None = None
        self._closing = False
        self._closed = False
        self.agent_info: AgentInfo | None = None
        self.prompt_capabilities: PromptCapabilities | None = None
        # Whether the adapter runs in a supervised mode (None until one has started).
        self.supervised: bool | None = None
        self.agent_info_ready = anyio.Event()
        self.metrics = metrics or Metrics()
        self.metrics.watch(
            conversation_adapters=lambda: sum(
                1 for c in self._conversations.values() if c.session is not None
            ),
            warm_adapters=lambda: len(self._pool),
            queued_tasks=lambda: sum(1 for t in self._tickets.values() if not t.running),
            running_tasks=lambda: sum(1 for t in self._tickets.values() if t.running),
        )

    # --- lifecycle ---------------------------------------------------------------------

    async def __aenter__(self) -> Bridge:
        self._task_group = anyio.create_task_group()
        await self._task_group.__aenter__()
        self._task_group.start_soon(self._reaper)
        self._fill_pool()
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        await self.shutdown()
        assert self._task_group is not None
        self._task_group.cancel_scope.cancel()
        await self._task_group.__aexit__(*exc_info)

    async def cancel_all(self, grace_s: float = SHUTDOWN_GRACE_S) -> None:
        """Stop taking turns and cancel every task (CANCELED, "the bridge is shutting
        down"); wait, bounded, until each has ended. Called before the server stops
        accepting requests' responses, so streaming callers still see the final state."""
        self._closing = True
        with anyio.CancelScope(shield=True):
            tickets = list(self._tickets.values())
            for ticket in tickets:
                await self.cancel(ticket.task_id, reason=SHUTDOWN_REASON)
            with anyio.move_on_after(grace_s):
                for ticket in tickets:
                    await ticket.done.wait()

    async def shutdown(self, grace_s: float = SHUTDOWN_GRACE_S) -> None:
        """Cancel every running task, then stop every adapter tree."""
        if self._closed:
            return
        self._closed = True
        with anyio.CancelScope(shield=True):
            await self.cancel_all(grace_s)
            sessions = [c.session for c in self._conversations.values() if c.session is not None]
            sessions.extend(self._pool)
            self._pool.clear()
            for conversation in self._conversations.values():
                conversation.session = None
            async with anyio.create_task_group() as group:
                for session in sessions:
                    group.start_soon(session.close)
            logger.info("adapters stopped", extra={"count": len(sessions)})

    @property
    def agent_label(self) -> str:
        """How messages name the agent: its reported name once known, else the preset."""
        info = self.agent_info
        if info is not None and (info.title or info.name):
            return info.title or info.name or ""
        return self.settings.agent.label

    @property
    def live_adapters(self) -> int:
        count = sum(1 for c in self._conversations.values() if c.session is not None)
        return count + len(self._pool)

    @property
    def warm_adapters(self) -> int:
        """Adapters started ahead of need, waiting for a new conversation."""
        return len(self._pool)

    # --- the pool ----------------------------------------------------------------------

    def _fill_pool(self) -> None:
        if self._task_group is None or self._closing:
            return
        missing = self.settings.pool_size - len(self._pool) - self._pool_filling
        missing = min(missing, self.settings.max_sessions - self._adapters_held())
        for _ in range(max(0, missing)):
            self._pool_filling += 1
            self._task_group.start_soon(self._start_pooled)

    async def _start_pooled(self) -> None:
        # Started from whichever task took a warm adapter: its ids are not this adapter's.
        with log_ids(task_id=None, context_id=None, session_id=None):
            await self._start_warm()

    async def _start_warm(self) -> None:
        try:
            boundary = self.homes.attach(self._handed or self.sandboxes.create())
            session = await self._start(boundary, load_session_id=None)
        except AdapterError:
            return  # _start logged it
        finally:
            self._pool_filling -= 1
        if self._closing:
            await session.close()
            return
        self._pool.append(session)

    def _take_pooled(self) -> AgentSession | None:
        while self._pool:
            session = self._pool.popleft()
            if session.alive:
                self._fill_pool()
                return session
            self._task_group_spawn(session.close)
        return None

    def _task_group_spawn(self, func: Callable[[], Coroutine[Any, Any, Any]]) -> None:
        if self._task_group is not None:
            self._task_group.start_soon(func)

    # --- conversations -----------------------------------------------------------------

    def _conversation(self, context_id: str) -> Conversation:
        conversation = self._conversations.get(context_id)
        if conversation is None:
            conversation = Conversation(context_id, self._boundary_for(context_id))
            self._conversations[context_id] = conversation
        return conversation

    def _boundary_for(self, context_id: str) -> Boundary:
        if self._handed is not None:
            return self.homes.attach(self._handed)
        return self.homes.attach(self.sandboxes.for_context(context_id))

    def root_of(self, context_id: str) -> Path | None:
        """The conversation's working directory, once it has one."""
        conversation = self._conversations.get(context_id)
        return conversation.boundary.root if conversation is not None else None

    async def _start(self, boundary: Boundary, *, load_session_id: str | None) -> AgentSession:
        spec = self.settings.agent
        try:
            env = home_environment(self._env, self.homes.prepare(boundary))
            confined = await self.isolation.confine(
                boundary, within_s=self.settings.start_timeout_s
            )
        except AdapterError as exc:
            self.metrics.adapter_started(ok=False)
            logger.error("adapter could not start", extra={"agent": spec.label, "error": str(exc)})
            raise
        plan = StartPlan(
            command=spec.command,
            label=spec.label,
            env=env,
            confined=confined,
            boundary=boundary,
            supervised_mode=self.settings.supervised_mode,
            load_session_id=load_session_id,
            start_timeout_s=self.settings.start_timeout_s,
            decider=self._decider,
            answerer=self._answerer,
            on_decision=self.metrics.permission_decided,
            question_timeout_s=self.settings.question_timeout_s,
            cancel_grace_s=self.settings.cancel_grace_s,
        )
        try:
            session = await AgentSession.start(plan)
        except AdapterError as exc:
            self.metrics.adapter_started(ok=False)
            logger.error(
                "adapter could not start",
                extra={"agent": spec.label, "error": str(exc)},
            )
            raise
        self.metrics.adapter_started(ok=True)
        process = session.process

        def exited(_status: object) -> None:
            if not process.stopping:
                self.metrics.adapter_crashed()

        process.on_exit(exited)
        # An adapter that dies on its own is stopped whole at once (a grandchild may
        # still run), not when its conversation next needs it.
        session.on_dead = lambda: self._task_group_spawn(session.close)
        self.supervised = session.guard_mode is not None and bool(session.allowed_modes)
        if self.agent_info is None:
            self.agent_info = session.agent_info
            self.prompt_capabilities = session.prompt_capabilities
            self.agent_info_ready.set()
        return session

    async def _ensure_session(self, conversation: Conversation, ticket: TaskTicket) -> AgentSession:
        """The conversation's live session, starting one (shared by concurrent callers)."""
        while True:
            session = conversation.session
            if session is not None and session.alive:
                return session
            if session is not None:
                self._retire(conversation, session)
            if conversation.starting is None:
                pooled = None
                if conversation.last_session_id is None and self._is_fresh(conversation):
                    pooled = self._take_pooled()
                if pooled is not None:
                    self._adopt(conversation, pooled)
                    continue
                displaced = self._make_room(conversation)
                conversation.starting = anyio.Event()
                conversation.start_error = None
                assert self._task_group is not None
                self._task_group.start_soon(self._start_for, conversation, displaced)
            starting = conversation.starting
            if ticket.cancel_requested:
                raise TurnCancelled
            await _first_of(starting, ticket.wake)
            if ticket.cancel_requested:
                raise TurnCancelled
            # Woken for another reason (a task behind this one left the queue): a wake left
            # set would make _first_of return at once and this loop spin, freezing the loop.
            ticket.wake = anyio.Event()
            if conversation.start_error is not None and conversation.session is None:
                raise conversation.start_error

    # --- the cap on live adapters ------------------------------------------------------

    @property
    def accepting(self) -> bool:
        """Started and not shutting down."""
        return self._task_group is not None and not self._closing

    def can_start_adapter(self) -> bool:
        """Whether a new conversation would get an adapter now (for /readyz)."""
        if self._pool or self._adapters_held() < self.settings.max_sessions:
            return True
        return any(c.session is not None and not c.busy for c in self._conversations.values())

    def _adapters_held(self) -> int:
        """Adapters alive or being started, counted against ACP_MAX_SESSIONS."""
        held = len(self._pool) + self._pool_filling
        for conversation in self._conversations.values():
            if conversation.session is not None or conversation.starting is not None:
                held += 1
        return held

    def _make_room(self, conversation: Conversation) -> AgentSession | None:
        """A slot for one more adapter: free, or taken from a warm or an idle adapter.

        Returns the adapter that gives way (the caller stops it before starting the new
        one); raises CapacityError when every live adapter is busy."""
        limit = self.settings.max_sessions
        if self._adapters_held() < limit:
            return None
        if self._pool:
            return self._pool.pop()
        idle = [
            c
            for c in self._conversations.values()
            if c is not conversation and c.session is not None and not c.busy
        ]
        if idle:
            oldest = min(idle, key=lambda c: c.last_used)
            displaced = oldest.session
            assert displaced is not None
            # Its conversation's next start waits for this stop (one adapter per context).
            self._retire(oldest, displaced)
            logger.info(
                "adapter stopped to make room",
                extra={
                    "context_id": oldest.context_id,
                    "session_id": displaced.session_id,
                    "pid": displaced.process.pid,
                    "max_sessions": limit,
                },
            )
            return displaced
        self.metrics.capacity_refused("sessions")
        logger.warning("task refused: every adapter is busy", extra={"max_sessions": limit})
        raise CapacityError(
            f"The bridge is running as many agents as it may ({limit}, ACP_MAX_SESSIONS), all "
            "busy with other conversations; send the task again when one finishes."
        )

    def _is_fresh(self, conversation: Conversation) -> bool:
        """A brand-new context whose sandbox holds nothing yet can take a warm adapter."""
        if not conversation.boundary.owned:
            return True
        try:
            return not any(conversation.boundary.root.iterdir())
        except OSError:
            return False

    def _adopt(self, conversation: Conversation, session: AgentSession) -> None:
        if conversation.boundary.owned:
            # The warm adapter works in its own fresh sandbox; that one becomes the context's.
            old = conversation.boundary
            self.sandboxes.adopt(conversation.context_id, session.plan.boundary)
            conversation.boundary = session.plan.boundary
            with contextlib.suppress(OSError):
                old.root.rmdir()  # empty: _is_fresh checked it
        else:
            # Under ACP_CWD the warm adapter's home becomes the conversation's (homes.py).
            conversation.boundary = session.plan.boundary
        conversation.session = session
        conversation.last_session_id = session.session_id
        session.process.log_fields["context_id"] = conversation.context_id

    def _retire(self, conversation: Conversation, session: AgentSession) -> None:
        """Stop the conversation's adapter in the background; the next start waits for it."""
        if conversation.session is session:
            conversation.session = None
        retiring = anyio.Event()
        conversation.retiring = retiring

        async def stop() -> None:
            try:
                await session.close()
            finally:
                retiring.set()
                if conversation.retiring is retiring:
                    conversation.retiring = None

        if self._task_group is None:
            retiring.set()
            return
        self._task_group.start_soon(stop)

    async def _start_for(
        self, conversation: Conversation, displaced: AgentSession | None = None
    ) -> None:
        starting = conversation.starting
        try:
            if displaced is not None:
                await displaced.close()
            retiring = conversation.retiring
            if retiring is not None:
                await retiring.wait()
            if conversation.boundary.owned and not self.sandboxes.is_current(
                conversation.context_id, conversation.boundary
            ):
                conversation.boundary = self._boundary_for(conversation.context_id)
                conversation.last_session_id = None
            session = await self._start(
                conversation.boundary, load_session_id=conversation.last_session_id
            )
            if self._closing:
                await session.close()
                raise AdapterStartError("the bridge is shutting down")
            if conversation.last_session_id is not None and session.memory_lost:
                conversation.lost_memory_pending = True
            conversation.session = session
            conversation.last_session_id = session.session_id
            session.process.log_fields["context_id"] = conversation.context_id
        except AdapterError as exc:
            conversation.start_error = exc
        except Exception:
            logger.exception("adapter start failed", extra={"context_id": conversation.context_id})
            conversation.start_error = AdapterStartError(
                f"{self.settings.agent.label} could not be started (see the bridge's log)"
            )
        finally:
            conversation.starting = None
            if starting is not None:
                starting.set()

    # --- turns -------------------------------------------------------------------------

    def ticket(self, task_id: str, context_id: str, message_id: str | None = None) -> TaskTicket:
        """Register a task before its turn; cancel() works from this moment on."""
        ticket = self._tickets.get(task_id)
        if ticket is None:
            ticket = TaskTicket(task_id, context_id, message_id)
            self._tickets[task_id] = ticket
        return ticket

    async def run_turn(
        self,
        ticket: TaskTicket,
        prompt: Sequence[PromptPart],
        on_events: EventsCallback,
    ) -> TurnOutcome:
        """Wait for the conversation's turn, make sure its adapter runs, and prompt it."""
        conversation = self._conversation(ticket.context_id)
        if len(conversation.queue) > self.settings.max_queued:
            self._tickets.pop(ticket.task_id, None)
            ticket.done.set()
            self.metrics.capacity_refused("queue")
            logger.warning(
                "task refused: the conversation's queue is full",
                extra={"max_queued": self.settings.max_queued},
            )
            raise CapacityError(
                "This conversation is busy and its queue is full (at most "
                f"{self.settings.max_queued} waiting task(s), ACP_MAX_QUEUED_TASKS); send this "
                "one again when the running task finishes."
            )
        conversation.queue.append(ticket)
        try:
            if self._closing:
                ticket.cancel_requested = True
                ticket.cancel_reason = SHUTDOWN_REASON
                raise TurnCancelled
            if conversation.queue[0] is not ticket:
                ahead = len(conversation.queue) - 1
                await on_events(
                    [Notice(f"Queued: {ahead} earlier task(s) of this conversation run first.")]
                )
            while conversation.queue[0] is not ticket and not ticket.cancel_requested:
                await ticket.wake.wait()
                ticket.wake = anyio.Event()
            if ticket.cancel_requested:
                raise TurnCancelled
            ticket.wake = anyio.Event()
            session = await self._ensure_session(conversation, ticket)
            if conversation.lost_memory_pending:
                conversation.lost_memory_pending = False
                await on_events([notice_for_lost_memory(session.name)])
            if ticket.cancel_requested:
                raise TurnCancelled
            state = session.state
            assert state is not None
            state.context_id, state.task_id = ticket.context_id, ticket.task_id
            ticket.session = session
            ticket.session_id = session.session_id
            ticket.running = True
            meta = {
                "a2a": {
                    "taskId": ticket.task_id,
                    "contextId": ticket.context_id,
                    **({"messageId": ticket.message_id} if ticket.message_id else {}),
                }
            }
            try:
                with log_ids(session_id=session.session_id):
                    outcome = await session.run_turn(
                        prompt,
                        on_events,
                        silence_s=self.settings.silence_s,
                        hard_cap_s=self.settings.turn_cap_s,
                        meta=meta,
                    )
            except SupervisionLostError:
                # Switched back to its mode, it may serve the next turn; otherwise the
                # session stopped itself, and the finally below lets it go.
                raise
            except (AdapterExitedError, SupervisionError):
                # A dead adapter, or one that may act unsupervised, serves no more turns:
                # the next message starts a new one (loading the session when it can).
                self._retire(conversation, session)
                raise
            finally:
                if not session.alive and conversation.session is session:
                    self._retire(conversation, session)
            if not outcome.prompted:
                raise TurnCancelled
            # Re-read: a cancel can arrive while the turn runs (mypy narrowed the field above).
            outcome.cancelled_by_bridge |= ticket.was_cancelled()
            return outcome
        finally:
            ticket.running = False
            ticket.session = None
            conversation.last_used = time.monotonic()
            with contextlib.suppress(ValueError):
                conversation.queue.remove(ticket)
            if conversation.queue:
                conversation.queue[0].wake.set()
            self._tickets.pop(ticket.task_id, None)
            ticket.done.set()

    async def cancel(self, task_id: str, reason: str | None = None) -> bool:
        """Cancel a queued or running task. False if the bridge does not know it."""
        ticket = self._tickets.get(task_id)
        if ticket is None:
            return False
        if not ticket.cancel_requested:
            ticket.cancel_requested = True
            if reason:
                ticket.cancel_reason = reason
        ticket.wake.set()
        session = ticket.session
        if ticket.running and session is not None:
            await session.cancel_turn()
        return True

    async def wait_done(self, task_id: str, timeout_s: float) -> bool:
        ticket = self._tickets.get(task_id)
        if ticket is None:
            return True
        with anyio.move_on_after(timeout_s):
            await ticket.done.wait()
        return ticket.done.is_set()

    def answer_question(self, task_id: str, question_id: str, reply: QuestionReply) -> bool:
        """Give the agent the caller's answer to its question; False if none is pending."""
        ticket = self._tickets.get(task_id)
        session = ticket.session if ticket is not None else None
        if session is None or session.state is None:
            return False
        return session.state.answer(question_id, reply)

    def spawn(self, func: Callable[..., Coroutine[Any, Any, Any]], *args: Any) -> None:
        """Run a task's turn in the bridge's task group: it outlives the request that
        started it (a question leaves the turn waiting for the caller's next message)."""
        if self._task_group is None:
            raise RuntimeError("the bridge is not running")
        self._task_group.start_soon(func, *args)

    def cancel_reason(self, task_id: str) -> str | None:
        ticket = self._tickets.get(task_id)
        return ticket.cancel_reason if ticket is not None else None

    # --- idle adapters -----------------------------------------------------------------

    async def _reaper(self) -> None:
        idle_s = self.settings.idle_timeout_ms / 1000
        period = min(REAP_EVERY_S, max(idle_s / 4, 0.05))
        while True:
            await anyio.sleep(period)
            now = time.monotonic()
            for conversation in list(self._conversations.values()):
                session = conversation.session
                if session is None or conversation.busy:
                    continue
                if now - conversation.last_used < idle_s:
                    continue
                logger.info(
                    "adapter idle: stopping it",
                    extra={
                        "context_id": conversation.context_id,
                        "pid": session.process.pid,
                        "idle_s": round(now - conversation.last_used, 1),
                    },
                )
                self._retire(conversation, session)


async def _first_of(*events: anyio.Event) -> None:
    """Return as soon as any of the events is set."""
    if any(event.is_set() for event in events):
        return
    async with anyio.create_task_group() as group:

        async def wait(event: anyio.Event) -> None:
            await event.wait()
            group.cancel_scope.cancel()

        for event in events:
            group.start_soon(wait, event)


__all__ = ["Bridge", "TaskTicket", "TurnCancelled", "TurnEnd", "TurnOutcome"]
