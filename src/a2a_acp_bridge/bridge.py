"""The bridge: conversations, their adapters, and the turns that run on them.

One A2A context is one conversation: one sandbox (or the shared ACP_CWD), at most one
adapter process with one ACP session, and one turn at a time (turn_queue.py). Concurrent
first messages of a new context share one adapter start.

Adapters are started in the bridge's own task group (owned by the server's lifespan), so a
caller that cancels while its adapter boots is answered at once and the adapter is kept
for the conversation's next message. A brand-new context takes a warm adapter when there is
one (pool.py). Idle adapters are stopped after ACP_IDLE_TIMEOUT_MS; their sandbox stays,
and the next message loads the old session when the agent can.

Across restarts (issue 12) the conversation book (conversations.py) keeps each conversation's
sandbox, its identity and its last ACP session: a known context gets its old sandbox back
(only while it is still the very directory made) and its session loaded; a context that
never got an adapter leaves no directory behind, and the sweep removes conversations
unused for ACP_SANDBOX_TTL.

Two caps keep a busy bridge from eating the machine, and neither queues silently: live
adapters (ACP_MAX_SESSIONS, counted by the pool; a new one first displaces a warm or the
least recently used idle adapter, and when every one is busy the task is refused with
`CapacityError`), and tasks waiting in one conversation (ACP_MAX_QUEUED_TASKS, refused the
same way).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import shlex
import shutil
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
from anyio.abc import TaskGroup

from a2a_acp_bridge.acp.auth import StepCallback
from a2a_acp_bridge.acp.process import adapter_environment
from a2a_acp_bridge.acp.session import AgentSession, SessionSpec, notice_for_lost_memory
from a2a_acp_bridge.agent import AgentInfo, PromptCapabilities
from a2a_acp_bridge.boundary import Boundary, Sandboxes, directory_identity, handed_boundary
from a2a_acp_bridge.config import Settings, adapters_dir
from a2a_acp_bridge.conversations import ConversationBook, ConversationRecord
from a2a_acp_bridge.decision import Supervisor
from a2a_acp_bridge.decisions import DecisionChain
from a2a_acp_bridge.errors import (
    AdapterError,
    AdapterExitedError,
    AdapterStartError,
    BridgeError,
    CapacityError,
    SandboxError,
    SupervisionError,
    SupervisionLostError,
)
from a2a_acp_bridge.events import Notice, TurnEnd, TurnEvent
from a2a_acp_bridge.homes import AdapterHomes, home_environment, seeds_for
from a2a_acp_bridge.isolation import Isolation
from a2a_acp_bridge.leftovers import ProcessBook, records_directory
from a2a_acp_bridge.logs import log_ids
from a2a_acp_bridge.metrics import Metrics
from a2a_acp_bridge.permissions import Answerer, Decider, answer, decide
from a2a_acp_bridge.pool import WarmPool
from a2a_acp_bridge.prompt import PromptPart
from a2a_acp_bridge.schema import DEFAULT_PRINCIPAL
from a2a_acp_bridge.supervisors import supervisor_from
from a2a_acp_bridge.turn import Phase, Turn, TurnCancelled
from a2a_acp_bridge.turn_queue import TurnQueue

logger = logging.getLogger(__name__)

# How often the reaper looks for idle adapters, at most.
REAP_EVERY_S = 30.0
# On shutdown, how long running tasks get to end CANCELED before the adapters are stopped
# regardless (each turn is itself bounded by the cancel grace, then its adapter stopped).
SHUTDOWN_GRACE_S = 10.0
SHUTDOWN_REASON = "Cancelled: the bridge is shutting down."
SANDBOX_REPLACED = (
    "This conversation's working directory was deleted or replaced since the last "
    "message: its files and the agent's memory of earlier messages are lost, and it "
    "goes on in a new, empty directory."
)


@dataclass(eq=False)
class Conversation:
    """One A2A context of one principal. `context_id` is the bridge's key for the pair
    (principals.conversation_key: the caller's contextId alone for `default`)."""

    context_id: str
    boundary: Boundary
    queue: TurnQueue
    principal: str = DEFAULT_PRINCIPAL
    session: AgentSession | None = None
    last_session_id: str | None = None
    starting: anyio.Event | None = None
    start_error: BridgeError | None = None
    last_used: float = field(default_factory=time.monotonic)
    # A notice for the caller at the next turn: memory (or files) lost since the last one.
    pending_notice: Notice | None = None
    # Set while the conversation's previous adapter is being stopped: a new one waits for
    # it, so two adapters never hold the same session or sandbox at once.
    retiring: anyio.Event | None = None

    @property
    def busy(self) -> bool:
        return bool(self.queue) or self.starting is not None

    @property
    def holds_adapter(self) -> bool:
        return self.session is not None or self.starting is not None


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
        supervisor: Supervisor | None = None,
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
        # Each adapter's process group on record, for the clean-up after a crash.
        self.processes = ProcessBook(records_directory(settings.state_dir))
        self.homes = AdapterHomes(
            settings.state_dir,
            seeds=seeds_for(settings.agent.preset, settings.home_seed),
            environ=source,
        )
        protection = settings.protection()  # the bridge's own files, in every root
        self.sandboxes = Sandboxes(
            settings.sandbox_parent, allow_execute=settings.allow_execute, protection=protection
        )
        self._handed = (
            handed_boundary(
                settings.acp_cwd, allow_execute=settings.allow_execute, protection=protection
            )
            if settings.acp_cwd is not None
            else None
        )
        # The bridge's own directories, as the caller may see them named (without_layout).
        home = source.get("HOME")
        self.layout: tuple[tuple[Path, str], ...] = tuple(
            (path.resolve(), label)
            for path, label in (
                # The operator's HOME first: where it is the working directory too, `~/...`
                # still tells the operator where a login file goes.
                *(((Path(home), "~"),) if home else ()),
                (settings.workdir, "<bridge>"),
                (settings.sandbox_parent, "<sandboxes>"),
                (settings.state_dir, "<state>"),
                (Path(sys.prefix), "<python>"),
                (adapters_dir(), "<adapters>"),
            )
        )
        self._conversations: dict[str, Conversation] = {}
        self._turns: dict[str, Turn] = {}
        self._task_group: TaskGroup | None = None
        self._closing = False
        self._closed = False
        self.pool = WarmPool(
            size=settings.pool_size,
            max_sessions=settings.max_sessions,
            start=self._start_warm,
            spawn=self._spawn,
            held_by_conversations=lambda: sum(
                1 for c in self._conversations.values() if c.holds_adapter
            ),
        )
        # New conversations waiting for an adapter slot, first come first served.
        self._admission: list[Turn] = []
        self._capacity_changed = anyio.Event()
        self.agent_info: AgentInfo | None = None
        self.prompt_capabilities: PromptCapabilities | None = None
        # Whether the agent may answer with a direct message (None until one has started).
        self.direct_replies: bool | None = None
        # Whether the adapter runs in a supervised mode (None until one has started).
        self.supervised: bool | None = None
        self.metrics = metrics or Metrics()
        # The decision chain (decisions.py): the floor, ACP_POLICY, the supervisor, the
        # table. Its ledger is attached once the state database is open (persistence.py).
        self.decisions = DecisionChain(
            policy=settings.policy,
            mode=settings.policy_mode,
            timeout_s=settings.decision_timeout_s,
            # ACP_SUPERVISOR's, built once here unless a test hands one (supervisors.py).
            supervisor=supervisor or supervisor_from(settings, metrics=self.metrics),
            table=decider,
            metrics=self.metrics,
        )
        self.pool.on_failure = lambda: self.metrics.background_failed("warm_start")
        # --- durable state (issue 12): set by the app once the state database is open ---
        self.book: ConversationBook | None = None
        # Raises StateWriteError when the task could not be recorded (a2a/durable_store.py).
        self.task_recorded: Callable[[str], Awaitable[None]] | None = None
        self._restored: dict[str, ConversationRecord] = {}
        # --- end of durable state ---
        # --- replicas (issue 16): with a shared database, a conversation another replica
        # had is read from it before this one runs its turn (a2a/persistence.py) ---
        self.find_conversation: Callable[[str], Awaitable[ConversationRecord | None]] | None = None
        self.metrics.watch(
            conversation_adapters=lambda: sum(
                1 for c in self._conversations.values() if c.session is not None
            ),
            warm_adapters=lambda: len(self.pool),
            queued_tasks=lambda: self._count(Phase.QUEUED),
            running_tasks=lambda: self._count(Phase.RUNNING),
        )

    def _count(self, phase: Phase) -> int:
        return sum(1 for turn in self._turns.values() if turn.phase is phase)

    # --- lifecycle ---------------------------------------------------------------------

    async def __aenter__(self) -> Bridge:
        # Before any adapter of ours runs: what a bridge killed outright left (leftovers.py).
        try:
            await self.processes.stop_leftovers()
        except Exception:
            logger.exception("the previous bridge's leftovers could not be stopped")
        self._task_group = anyio.create_task_group()
        await self._task_group.__aenter__()
        self._spawn(self._reaper, "reaper")
        self.pool.fill()
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        await self.shutdown()
        assert self._task_group is not None
        self._task_group.cancel_scope.cancel()
        await self._task_group.__aexit__(*exc_info)

    async def cancel_all(self, grace_s: float = SHUTDOWN_GRACE_S) -> None:
        """Stop taking turns and cancel every task (CANCELED, "the bridge is shutting
        down"); wait, bounded, until each has published its end. Called before the server
        stops sending responses, so streaming callers still see the final state."""
        self._closing = True
        self.pool.closing = True
        with anyio.CancelScope(shield=True):
            turns = list(self._turns.values())
            for turn in turns:
                await self.cancel(turn.task_id, reason=SHUTDOWN_REASON)
            with anyio.move_on_after(grace_s):
                for turn in turns:
                    await turn.done.wait()

    async def shutdown(self, grace_s: float = SHUTDOWN_GRACE_S) -> None:
        """Cancel every running task, then stop every adapter tree."""
        if self._closed:
            return
        self._closed = True
        with anyio.CancelScope(shield=True):
            await self.cancel_all(grace_s)
            sessions = [c.session for c in self._conversations.values() if c.session is not None]
            warm = self.pool.empty()
            sessions.extend(warm)
            for conversation in self._conversations.values():
                conversation.session = None
            async with anyio.create_task_group() as group:
                for session in sessions:
                    group.start_soon(session.close)
            for session in warm:
                if session.spec.boundary.owned:
                    with contextlib.suppress(OSError):
                        session.spec.boundary.root.rmdir()  # a warm sandbox, still empty
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
        return count + len(self.pool)

    def adapter_load(self) -> tuple[int, int]:
        """(live adapters, conversations in a turn or waiting for one): a replica's heartbeat."""
        return self.live_adapters, sum(1 for c in self._conversations.values() if c.busy)

    @property
    def accepting(self) -> bool:
        """Started and not shutting down."""
        return self._task_group is not None and not self._closing

    @property
    def serving(self) -> bool:
        """The bridge's task group runs: turns, adapters and background work can go on
        (for /healthz: False asks an orchestrator to restart the process)."""
        group = self._task_group
        return group is not None and not group.cancel_scope.cancel_called and not self._closed

    def spawn(self, func: Callable[[], Coroutine[Any, Any, Any]]) -> None:
        """Run a task's turn in the bridge's task group: it outlives the request that
        started it (a question leaves the turn waiting for the caller's next message)."""
        if self._task_group is None:
            raise RuntimeError("the bridge is not running")
        self._task_group.start_soon(self._guarded, "turn", func)

    def run_in_background(self, func: Callable[[], Coroutine[Any, Any, Any]], name: str) -> None:
        """Run the app's own background work (the sweep) guarded like the bridge's."""
        self._spawn(func, name)

    def _spawn(self, func: Callable[[], Coroutine[Any, Any, Any]], name: str = "stop") -> None:
        if self._task_group is not None:
            self._task_group.start_soon(self._guarded, name, func)

    async def _guarded(self, name: str, func: Callable[[], Coroutine[Any, Any, Any]]) -> None:
        """Nothing the bridge runs in the background may end its task group: a failure is
        logged once, counted, and the bridge goes on."""
        try:
            await func()
        except Exception:
            self.metrics.background_failed(name)
            logger.exception("background task failed; the bridge goes on", extra={"task": name})

    # --- adapters ----------------------------------------------------------------------

    async def _start_warm(self) -> AgentSession:
        boundary = self.homes.attach(self._handed or self.sandboxes.create())
        return await self._start(boundary, load_session_id=None)

    @contextlib.asynccontextmanager
    async def probe(self, on_step: StepCallback) -> AsyncIterator[AgentSession]:
        """One adapter started exactly as for a new conversation (`doctor`), in a sandbox of
        its own that goes with it; `on_step` hears each start step that succeeded."""
        boundary = self.homes.attach(self._handed or self.sandboxes.create("doctor"))
        try:
            session = await self._start(boundary, load_session_id=None, on_step=on_step)
            try:
                yield session
            finally:
                await session.close()
        finally:
            if boundary.owned:
                shutil.rmtree(boundary.root, ignore_errors=True)
            if boundary.home is not None and boundary.owned:
                shutil.rmtree(boundary.home, ignore_errors=True)

    async def _start(
        self,
        boundary: Boundary,
        *,
        load_session_id: str | None,
        on_step: StepCallback | None = None,
    ) -> AgentSession:
        settings = self.settings
        try:
            env = home_environment(self._env, self.homes.prepare(boundary))
            confined = await self.isolation.confine(boundary, within_s=settings.start_timeout_s)
        except AdapterError as exc:
            self.metrics.adapter_started(ok=False)
            logger.error(
                "adapter could not start", extra={"agent": settings.agent.label, "error": str(exc)}
            )
            raise
        spec = SessionSpec(
            command=settings.agent.command,
            label=settings.agent.label,
            env=env,
            confined=confined,
            login_env=self._env,
            boundary=boundary,
            start_timeout_s=settings.start_timeout_s,
            cancel_grace_s=settings.cancel_grace_s,
            question_timeout_s=settings.question_timeout_s,
            supervised_mode=settings.supervised_mode,
            load_session_id=load_session_id,
            decider=self._decider,
            answerer=self._answerer,
            on_decision=self.metrics.permission_decided,
            chain=self.decisions,
            auth_method=settings.auth_method,
            on_step=on_step,
            max_line_bytes=settings.max_line_bytes,
            records=self.processes,
        )
        try:
            session = await AgentSession.start(spec)
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
        # still run), not when its conversation next needs it, and stops counting.
        session.on_dead = lambda: self._adapter_died(session)
        self.supervised = session.supervised_mode is not None and bool(session.allowed_modes)
        if self.agent_info is None:
            self.agent_info = session.agent_info
            self.prompt_capabilities = session.prompt_capabilities
            self.direct_replies = session.direct_replies
        return session

    def _adapter_died(self, session: AgentSession) -> None:
        for conversation in self._conversations.values():
            if conversation.session is session:
                self._retire(conversation, session)  # which refills once it is stopped
                return
        self.pool.discard(session)
        self._spawn(session.close)
        self.pool.fill()

    def can_start_adapter(self) -> bool:
        """Whether a new conversation would get an adapter now (for /readyz)."""
        if len(self.pool) or self.pool.has_room:
            return True
        return any(c.session is not None and not c.busy for c in self._conversations.values())

    # --- conversations -----------------------------------------------------------------

    def _conversation(self, context_id: str, principal: str = DEFAULT_PRINCIPAL) -> Conversation:
        conversation = self._conversations.get(context_id)
        if conversation is None:
            conversation = Conversation(
                context_id,
                self._boundary_for(context_id),
                TurnQueue(self.settings.max_queued),
                principal=principal,
            )
            self._conversations[context_id] = conversation
            self._resume(conversation)
        return conversation

    def _boundary_for(self, context_id: str) -> Boundary:
        if self._handed is not None:
            return self.homes.attach(self._handed)
        return self.homes.attach(self.sandboxes.for_context(context_id))

    def root_of(self, context_id: str) -> Path | None:
        """The conversation's working directory, once it has one."""
        conversation = self._conversations.get(context_id)
        return conversation.boundary.root if conversation is not None else None

    async def _ensure_session(
        self, conversation: Conversation, turn: Turn, on_events: EventsCallback
    ) -> AgentSession:
        """The conversation's live session, starting one (shared by concurrent callers)."""
        while True:
            self._check_sandbox(conversation)
            session = conversation.session
            if session is not None and session.alive:
                return session
            if session is not None:
                self._retire(conversation, session)
            if conversation.starting is None:
                self._check_principal_cap(conversation)  # issue 13
                pooled = None
                if conversation.last_session_id is None and self._is_fresh(conversation):
                    pooled = self.pool.take()
                if pooled is not None:
                    try:
                        self._adopt(conversation, pooled)
                    except BaseException:
                        self._spawn(pooled.close)  # never dropped without being stopped
                        raise
                    # Counted as the conversation's now: the pool may start another.
                    self.pool.fill()
                    continue
                displaced = await self._admit(conversation, turn, on_events)
                if conversation.starting is not None or conversation.session is not None:
                    # Another task of this context started one while this one waited.
                    if displaced is not None:
                        self._spawn(displaced.close)
                    continue
                conversation.starting = anyio.Event()
                conversation.start_error = None
                self._spawn(functools.partial(self._start_for, conversation, displaced), "start")
            starting = conversation.starting
            assert starting is not None
            if turn.cancelled:
                raise TurnCancelled
            await _first_of(starting, turn.woken)
            if turn.cancelled:
                raise TurnCancelled
            # Woken for another reason (a task behind this one left the queue): a wake left
            # set would make _first_of return at once and this loop spin, freezing the loop.
            turn.rearm()
            if conversation.start_error is not None and conversation.session is None:
                raise conversation.start_error

    def _check_sandbox(self, conversation: Conversation) -> None:
        """A sandbox deleted or replaced under its conversation is never silently swapped:
        the adapter goes, a new sandbox is made, and the caller is told what was lost."""
        boundary = conversation.boundary
        if not boundary.owned or self.sandboxes.is_current(conversation.context_id, boundary):
            return
        if conversation.session is None and conversation.last_session_id is None:
            # Nothing ran there yet (a warm adapter's sandbox replaced it, or none was used).
            conversation.boundary = self._boundary_for(conversation.context_id)
            return
        logger.warning(
            "the conversation's sandbox was deleted or replaced; starting over in a new one",
            extra={"context_id": conversation.context_id},
        )
        if conversation.session is not None:
            self._retire(conversation, conversation.session)
        conversation.last_session_id = None
        conversation.boundary = self._boundary_for(conversation.context_id)
        conversation.pending_notice = Notice(SANDBOX_REPLACED)

    async def _admit(
        self, conversation: Conversation, turn: Turn, on_events: EventsCallback
    ) -> AgentSession | None:
        """Room for one more adapter; returns the adapter that gives way (the caller stops
        it first). When every live adapter is busy, wait first come first served up to
        ACP_ADMISSION_TIMEOUT_MS, then raise CapacityError."""
        if not self._admission:
            room, displaced = self._make_room(conversation)
            if room:
                return displaced
        limit = self.settings.max_sessions
        timeout_s = self.settings.admission_timeout_s
        self._admission.append(turn)
        told: int | None = None
        try:
            with anyio.move_on_after(timeout_s):
                while True:
                    ahead = self._admission.index(turn)
                    if ahead == 0:
                        room, displaced = self._make_room(conversation)
                        if room:
                            return displaced
                    if told != ahead:
                        told = ahead
                        await on_events(
                            [Notice(f"Waiting for a free agent: {ahead} ahead of this task.")]
                        )
                    await _first_of(self._capacity_changed, turn.woken)
                    if turn.cancelled:
                        raise TurnCancelled
                    turn.rearm()
        finally:
            self._admission.remove(turn)
            self._capacity_freed()  # the next in line looks again
        self.metrics.capacity_refused("sessions")
        logger.warning(
            "task refused: every adapter stayed busy",
            extra={"max_sessions": limit, "waited_s": timeout_s},
        )
        waited = f" for {timeout_s:g} s (ACP_ADMISSION_TIMEOUT_MS)" if timeout_s > 0 else ""
        raise CapacityError(
            f"The bridge is running as many agents as it may ({limit}, ACP_MAX_SESSIONS), all "
            f"busy with other conversations{waited}; send the task again when one finishes."
        )

    # --- per-principal cap (issue 13) ---------------------------------------------------

    def _check_principal_cap(self, conversation: Conversation) -> None:
        """Refuse (CapacityError, at once) a new adapter for a principal whose other
        conversations already hold ACP_MAX_SESSIONS_PER_PRINCIPAL busy adapters."""
        cap = self.settings.per_principal_sessions
        if cap >= self.settings.max_sessions:
            return  # the global cap decides, as it always did
        held = sum(
            1
            for other in self._conversations.values()
            if other is not conversation
            and other.principal == conversation.principal
            and other.holds_adapter
            and other.busy
        )
        if held < cap:
            return
        self.metrics.capacity_refused("principal")
        logger.warning(
            "task refused: the principal holds as many adapters as it may",
            extra={"max_sessions_per_principal": cap},
        )
        raise CapacityError(
            f"This caller already runs as many agents as it may ({cap}, "
            "ACP_MAX_SESSIONS_PER_PRINCIPAL), all busy with its other conversations; send the "
            "task again when one finishes."
        )

    def _capacity_freed(self) -> None:
        """Something that may free an adapter slot happened: waiting tasks look again."""
        changed, self._capacity_changed = self._capacity_changed, anyio.Event()
        changed.set()

    def _make_room(self, conversation: Conversation) -> tuple[bool, AgentSession | None]:
        """A slot for one more adapter, if one can be had now: free, or taken from a warm
        or an idle adapter (returned: the caller stops it before starting the new one)."""
        limit = self.settings.max_sessions
        if self.pool.has_room:
            return True, None
        warm = self.pool.give_way()
        if warm is not None:
            return True, warm
        idle = [
            c
            for c in self._conversations.values()
            if c is not conversation and c.session is not None and not c.busy
        ]
        if not idle:
            return False, None
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
        return True, displaced

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
            self.sandboxes.adopt(conversation.context_id, session.spec.boundary)
            conversation.boundary = session.spec.boundary
            with contextlib.suppress(OSError):
                old.root.rmdir()  # empty: _is_fresh checked it
        else:
            # Under ACP_CWD the warm adapter's home becomes the conversation's (homes.py).
            conversation.boundary = session.spec.boundary
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
                # A slot is free: the pool may refill, a waiting task may start.
                self.pool.fill()
                self._capacity_freed()

        if self._task_group is None:
            retiring.set()
            return
        self._spawn(stop)

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
            session = await self._start(
                conversation.boundary, load_session_id=conversation.last_session_id
            )
            if self._closing:
                await session.close()
                raise AdapterStartError("the bridge is shutting down")
            if conversation.last_session_id is not None and session.memory_lost:
                conversation.pending_notice = notice_for_lost_memory(session.name)
            conversation.session = session
            conversation.last_session_id = session.session_id
            session.process.log_fields["context_id"] = conversation.context_id
        except (AdapterError, SandboxError) as exc:
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
            if conversation.session is None:
                self._capacity_freed()

    # --- turns -------------------------------------------------------------------------

    def accept(
        self,
        task_id: str,
        context_id: str,
        message_id: str | None = None,
        principal: str = DEFAULT_PRINCIPAL,
    ) -> Turn:
        """The task's one Turn, registered before the task is visible: a cancel finds it
        from this moment on. `finish` lets it go once its final state is published."""
        turn = self._turns.get(task_id)
        if turn is None:
            turn = Turn(task_id, context_id, message_id, principal=principal)
            self._turns[task_id] = turn
        return turn

    def turn(self, task_id: str) -> Turn | None:
        return self._turns.get(task_id)

    def finish(self, turn: Turn) -> None:
        if self._turns.get(turn.task_id) is turn:
            del self._turns[turn.task_id]
        turn.finish()

    async def run_turn(
        self, turn: Turn, prompt: Sequence[PromptPart], on_events: EventsCallback
    ) -> TurnEnd:
        """Wait for the conversation's turn, make sure its adapter runs, and prompt it.
        Raises TurnCancelled when the task was cancelled before the agent was prompted."""
        if self.task_recorded is not None:
            await self.task_recorded(turn.task_id)
        if self.find_conversation is not None and turn.conversation_key not in self._conversations:
            record = await self.find_conversation(turn.conversation_key)
            if record is not None and self.book is not None:
                self.restore(self.book, [record])
        conversation = self._conversation(turn.conversation_key, turn.principal)
        queue = conversation.queue
        if queue.full:
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
        ahead = queue.join(turn)
        try:
            if self._closing:
                turn.request_cancel(SHUTDOWN_REASON)
                raise TurnCancelled
            if ahead:
                await on_events(
                    [Notice(f"Queued: {ahead} earlier task(s) of this conversation run first.")]
                )
            await queue.wait_for(turn)
            session = await self._ensure_session(conversation, turn, on_events)
            await self._record(conversation)
            notice, conversation.pending_notice = conversation.pending_notice, None
            if notice is not None:
                await on_events([notice])
            if turn.cancelled:
                raise TurnCancelled
            turn.session_id = session.session_id
            turn.phase = Phase.RUNNING
            meta = {
                "a2a": {
                    "taskId": turn.task_id,
                    "contextId": turn.context_id,
                    **({"messageId": turn.message_id} if turn.message_id else {}),
                }
            }
            try:
                with log_ids(session_id=session.session_id):
                    end = await session.run_turn(
                        turn,
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
            turn.end = end
            return end
        finally:
            turn.phase = Phase.ENDED
            conversation.last_used = time.monotonic()
            queue.leave(turn)
            self._after_turn(conversation)
            # The conversation may be idle now, so its adapter could give way.
            self._capacity_freed()

    async def cancel(self, task_id: str, reason: str | None = None) -> bool:
        """Cancel a queued or running task. False if the bridge does not know it."""
        turn = self._turns.get(task_id)
        if turn is None:
            return False
        turn.request_cancel(reason)
        conversation = self._conversations.get(turn.conversation_key)
        session = conversation.session if conversation is not None else None
        if turn.running and session is not None:
            await session.cancel_turn(turn)
        return True

    # --- durable state (issue 12) -------------------------------------------------------

    @property
    def agent_key(self) -> str:
        """Which agent a recorded session belongs to: the preset, else the command line."""
        agent = self.settings.agent
        return f"preset:{agent.preset}" if agent.preset else "command:" + shlex.join(agent.command)

    def restore(self, book: ConversationBook, records: Sequence[ConversationRecord]) -> None:
        """Take the conversations recorded before a restart: their sandboxes are trusted
        again while each is still the very directory made, and their sessions loaded."""
        self.book = book
        for record in records:
            if record.owned and record.identity is not None and self._handed is None:
                self.sandboxes.restore(record.context_id, record.root, record.identity)
            self._restored[record.context_id] = record

    def _resume(self, conversation: Conversation) -> None:
        """A conversation known from before the restart goes on with its last session, in
        its old directory; when that directory is gone or the agent changed, the caller is
        told what was lost (and the files, when still there, stay)."""
        record = self._restored.pop(conversation.context_id, None)
        if record is None or record.session_id is None:
            return
        if conversation.boundary.root != record.root:
            logger.warning(
                "the conversation's sandbox was deleted or replaced while the bridge was down",
                extra={"context_id": conversation.context_id},
            )
            conversation.pending_notice = Notice(SANDBOX_REPLACED)
            return
        if record.agent != self.agent_key:
            conversation.pending_notice = notice_for_lost_memory(self.agent_label)
            return
        conversation.last_session_id = record.session_id

    async def _record(self, conversation: Conversation) -> None:
        if self.book is None:
            return
        boundary = conversation.boundary
        identity = (
            self.sandboxes.identity_of(boundary.root)
            if boundary.owned
            else directory_identity(boundary.root)
        )
        await self.book.remember(
            ConversationRecord(
                context_id=conversation.context_id,
                root=boundary.root,
                identity=identity,
                owned=boundary.owned,
                agent=self.agent_key,
                session_id=conversation.last_session_id,
                principal=conversation.principal,
            )
        )

    def _after_turn(self, conversation: Conversation) -> None:
        """A conversation whose turns never got an adapter (refused, cancelled, failed to
        start) leaves nothing behind: no record, and its sandbox goes while still empty."""
        context_id = conversation.context_id
        unused = (
            conversation.last_session_id is None
            and conversation.session is None
            and conversation.starting is None
            and conversation.retiring is None
            and not conversation.queue
        )
        if not unused:
            if self.book is not None:
                self.book.touch(context_id)
            return
        if self._conversations.get(context_id) is conversation:
            del self._conversations[context_id]
        if conversation.boundary.owned:
            self.sandboxes.remove_if_empty(context_id)

    async def sweep_conversations(self, now_ns: int) -> tuple[list[str], list[Path]]:
        """Remove the conversations unused for ACP_SANDBOX_TTL: sandbox, record, and the
        empty directories a killed bridge left; (context ids, directories removed). With a
        shared database the book decides from the database (conversations.py): what another
        replica runs or used since stays, and the sandbox goes only with the row."""
        ttl_s = self.settings.sandbox_ttl_s
        if self.book is None or ttl_s is None:
            return [], []
        cutoff_ns = now_ns - int(ttl_s * 1e9)
        removed: list[str] = []
        for record in await self.book.unused_since(cutoff_ns):
            if self._in_use(record.context_id):
                continue
            if not await self.book.forget_unused(record.context_id, cutoff_ns):
                continue  # used since (by another replica), or swept by one
            if record.context_id not in self._conversations and self._handed is None:
                # Known here only from the database (another replica made it): its sandbox
                # is trusted only while it is still the very directory that replica made.
                self.restore(self.book, [record])
            self._conversations.pop(record.context_id, None)
            self._restored.pop(record.context_id, None)
            if record.owned and self._handed is None:
                await self._discard_sandbox(record.context_id)
            removed.append(record.context_id)
        directories: list[Path] = []
        if self._handed is None:
            cutoff_s = now_ns / 1e9 - ttl_s
            directories = await anyio.to_thread.run_sync(
                self.sandboxes.remove_stale_empty, cutoff_s
            )
        return removed, directories

    def _in_use(self, context_id: str) -> bool:
        conversation = self._conversations.get(context_id)
        return conversation is not None and bool(
            conversation.busy or conversation.holds_adapter or conversation.retiring
        )

    async def _discard_sandbox(self, context_id: str) -> None:
        """The conversation's sandbox, only while still the very directory made (never a
        handed ACP_CWD), and its adapter HOME (homes.py: the sandbox's namesake) with it.
        The HOME's name comes from the root the sandboxes trusted, never from the record
        as read from the database: a root of "/" or "/x/.." names no HOME but the parent
        of all of them, or the state directory itself."""
        root = await anyio.to_thread.run_sync(self.sandboxes.discard, context_id)
        if root is None or root.name in ("", ".", ".."):
            return
        home = self.homes.parent / root.name
        await anyio.to_thread.run_sync(functools.partial(shutil.rmtree, home, ignore_errors=True))

    # --- idle adapters -----------------------------------------------------------------

    async def _reaper(self) -> None:
        idle_s = self.settings.idle_timeout_s
        period = min(REAP_EVERY_S, max(idle_s / 4, 0.05))
        while True:
            await anyio.sleep(period)
            try:
                self._reap_idle(idle_s)
            except Exception:
                # One bad pass must not end the reaping (nor the bridge).
                self.metrics.background_failed("reaper")
                logger.exception("reaping idle adapters failed; trying again later")

    def _reap_idle(self, idle_s: float) -> None:
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


__all__ = ["Bridge", "Turn", "TurnCancelled"]
