"""One adapter process with the one ACP session the bridge opened on it.

`AgentSession.start` spawns the adapter, runs `initialize` (protocol version 1, no fs or
terminal capability; form elicitation, which needs the SDK's unstable switch), opens the
session (`session/load` of the previous one when the agent can, else `session/new`, with
an absolute cwd and no MCP servers; refused for want of authentication, `acp/auth.py`
logs the adapter in once and asks again) and puts it in its supervised mode, failing closed.
`run_turn` prompts for one `Turn` and streams its events to a callback, keeping the
turn's deadlines (deadlines.py: silence, hard cap, cancel grace, question wait, coalescing
tick); a session that leaves supervision during the turn has the turn cancelled and its
mode switched back. `cancel_turn` sends `session/cancel`; `close` ends the session and
stops the whole process tree. One concurrency library throughout: anyio.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import anyio
from acp import PROTOCOL_VERSION, RequestError, connect_to_agent
from acp.schema import (
    ClientCapabilities,
    ElicitationCapabilities,
    ElicitationFormCapabilities,
    Implementation,
)
from pydantic import ValidationError

from a2a_acp_bridge import __version__
from a2a_acp_bridge.acp.auth import AUTH_REQUIRED, Authenticator, StepCallback, describe_offer
from a2a_acp_bridge.acp.client import (
    BridgeClient,
    EventSink,
    SessionState,
    mode_from_config_options,
    mode_option,
    mode_values,
)
from a2a_acp_bridge.acp.process import AdapterProcess, SpawnRecords, spawn
from a2a_acp_bridge.acp.prompt import to_content_blocks
from a2a_acp_bridge.acp.transport import DEFAULT_MAX_LINE_BYTES, StdioTransport
from a2a_acp_bridge.adapters import READ_ONLY_MODES, is_unsupervised_mode, profile_for
from a2a_acp_bridge.agent import AgentInfo, PromptCapabilities
from a2a_acp_bridge.boundary import Boundary
from a2a_acp_bridge.deadlines import Due, TurnDeadlines
from a2a_acp_bridge.decisions import DecisionChain
from a2a_acp_bridge.errors import (
    AdapterError,
    AdapterExitedError,
    AdapterSilentError,
    AdapterStartError,
    SupervisionError,
    SupervisionLostError,
)
from a2a_acp_bridge.events import Notice, QuestionReply, TurnEnd, TurnEvent
from a2a_acp_bridge.isolation import Confined
from a2a_acp_bridge.permissions import Answerer, Decider, Supervision, answer, decide
from a2a_acp_bridge.prompt import PromptPart
from a2a_acp_bridge.turn import Turn, TurnCancelled

logger = logging.getLogger(__name__)

# How long a mode change may take to be reported after session/set_mode answered.
MODE_READBACK_S = 2.0
# Bound on each control call (set_mode, set_config_option, cancel): they answer in
# milliseconds.
CONTROL_CALL_S = 10.0
# Bound on session/close and on the SDK's own teardown when a session ends.
CLOSE_CALL_S = 2.0
# After a crash is seen, how long to wait for the exit status and the end of stderr.
EXIT_REPORT_S = 1.0
# JSON-RPC errors that mean "this method or these params are unknown here".
UNKNOWN_CALL_CODES = (-32601, -32602)


@dataclass(frozen=True)
class SessionSpec:
    """Everything needed to start one adapter session and run its turns."""

    command: Sequence[str]
    label: str
    env: Mapping[str, str]
    boundary: Boundary
    # Bounds, from the settings: the start (spawn to supervised session), the agent's
    # grace after session/cancel, and a question's wait for the caller's answer.
    start_timeout_s: float
    cancel_grace_s: float
    question_timeout_s: float
    supervised_mode: str | None = None  # operator override (ACP_SUPERVISED_MODE)
    load_session_id: str | None = None
    # The permission classifier; an external channel replaces these two.
    decider: Decider = decide
    answerer: Answerer = answer
    # Told of every permission decision: (verdict "allow" | "deny", rule). For metrics.
    on_decision: Callable[[str, str], None] | None = None
    # The decision chain (decisions.py: policy, supervisor, ledger); None: the classifier.
    chain: DecisionChain | None = None
    auth_method: str | None = None  # the operator's choice (ACP_AUTH_METHOD)
    on_step: StepCallback | None = None  # told of each start step that succeeded (doctor)
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES  # ACP_MAX_LINE_BYTES
    # How the kernel confines the adapter (isolation.py); None: unconfined.
    confined: Confined | None = None
    # The operator's environment, for where a login is stored (`env` has the conversation's
    # own HOME, into which those files are copied).
    login_env: Mapping[str, str] | None = None
    # Where the adapter's process group is recorded, for the clean-up after a crash.
    records: SpawnRecords | None = None


class AgentSession:
    """A started adapter and its one session."""

    def __init__(self, process: AdapterProcess, spec: SessionSpec) -> None:
        self.process = process
        self.spec = spec
        self.client = BridgeClient(
            spec.label,
            spec.decider,
            spec.answerer,
            on_decision=spec.on_decision,
            chain=spec.chain,
        )
        self.transport = StdioTransport(
            process.stdout,
            process.stdin,
            self.client.update_from_wire,
            label=spec.label,
            on_broken=self._on_broken,
            on_bad_permission=self.client.malformed_permission,
            max_line_bytes=spec.max_line_bytes,
        )
        # BridgeClient has every method of acp.Client without subclassing it (the SDK's
        # stubs would answer null to what the bridge does not serve). elicitation/create
        # is routed only with the SDK's unstable switch (ACP 0.12.1).
        self.conn: Any = connect_to_agent(
            self.client,  # type: ignore[arg-type]
            self.transport,
            use_unstable_protocol=True,
        )
        self.auth = Authenticator(
            self.conn,
            label=spec.label,
            command=spec.command,
            env=spec.env,
            requested=spec.auth_method,
            on_step=spec.on_step,
            login_env=spec.login_env,
        )
        self.agent_info = AgentInfo()
        self.session_id = ""
        self.state: SessionState | None = None
        self.load_session = False
        # session/resume: the session back without the conversation replayed to the client.
        self.can_resume = False
        self.can_close = False
        self.prompt_capabilities = PromptCapabilities()
        # The agent said at initialize that it may answer a prompt with a direct message
        # (`_meta.a2a.directReplies`): only then does a blocking send wait to see.
        self.direct_replies = False
        self.memory_lost = False
        self.dead = False
        # The mode the session must keep, and the modes it may be in meanwhile.
        self.supervised_mode: str | None = None
        self.allowed_modes: frozenset[str] = frozenset()
        # Called once when the adapter dies on its own (the bridge stops what is left).
        self.on_dead: Callable[[], None] | None = None
        self._last_turn_cancelled = False
        self._closing: anyio.Event | None = None
        process.on_exit(self._on_exit)

    # --- start --------------------------------------------------------------------------

    @classmethod
    async def start(cls, spec: SessionSpec) -> AgentSession:
        """Spawn, initialize, open the session and supervise it; stop everything on failure."""
        process = await spawn(
            spec.command,
            cwd=spec.boundary.root,
            env=spec.env,
            label=spec.label,
            confined=spec.confined,
            records=spec.records,
        )
        session = cls(process, spec)
        session._step("spawn", f"pid {process.pid}; its environment: {', '.join(sorted(spec.env))}")
        try:
            with anyio.fail_after(spec.start_timeout_s):
                await session._handshake()
        except TimeoutError:
            await session.close()
            raise AdapterStartError(
                f"{session.name} did not finish starting within "
                f"{_duration(spec.start_timeout_s)} (ACP_START_TIMEOUT_MS)"
            ) from None
        except AdapterError:
            await session.close()
            raise
        except (ConnectionError, OSError):
            message = await session._exit_message()
            await session.close()
            raise AdapterStartError(f"{session.name} stopped while starting: {message}") from None
        except RequestError as exc:
            await session.close()
            if exc.code == AUTH_REQUIRED:
                raise session.auth.not_authenticated() from None
            raise AdapterStartError(f"{session.name} failed to start: {_describe(exc)}") from None
        except ValidationError as exc:
            await session.close()
            raise AdapterStartError(f"{session.name} failed to start: {_describe(exc)}") from None
        except BaseException:
            await session.close()
            raise
        return session

    @property
    def name(self) -> str:
        """The agent as messages name it (`codex-acp`)."""
        return self.agent_info.display(self.spec.label)

    @property
    def log_name(self) -> str:
        """The agent as the logs name it: what it reported (`@agentclientprotocol/codex-acp`)."""
        return self.agent_info.name or self.spec.label

    def _step(self, step: str, detail: str) -> None:
        if self.spec.on_step is not None:
            self.spec.on_step(step, detail)

    async def _handshake(self) -> None:
        init = await self.conn.initialize(
            protocol_version=PROTOCOL_VERSION,
            # Neither fs nor terminal: the agent uses its own tools, each gated by a
            # permission request the classifier answers.
            client_capabilities=ClientCapabilities(
                elicitation=ElicitationCapabilities(form=ElicitationFormCapabilities())
            ),
            client_info=Implementation(name="a2a-acp-bridge", version=__version__),
        )
        if init.agent_info is not None:
            self.agent_info = AgentInfo(
                init.agent_info.name, init.agent_info.title, init.agent_info.version
            )
        elif self.transport.raw_agent_info is not None:
            raw = self.transport.raw_agent_info
            self.agent_info = AgentInfo(
                *(_text(raw.get(key)) for key in ("name", "title", "version"))
            )
        a2a_meta = (init.field_meta or {}).get("a2a")
        self.direct_replies = isinstance(a2a_meta, dict) and a2a_meta.get("directReplies") is True
        if init.protocol_version != PROTOCOL_VERSION:
            raise AdapterStartError(
                f"{self.name} speaks ACP protocol version {init.protocol_version}; "
                f"the bridge speaks {PROTOCOL_VERSION}"
            )
        caps = init.agent_capabilities
        if caps is not None:
            self.load_session = bool(caps.load_session)
            session_caps = caps.session_capabilities
            self.can_close = session_caps is not None and session_caps.close is not None
            self.can_resume = session_caps is not None and session_caps.resume is not None
            prompt_caps = caps.prompt_capabilities
            if prompt_caps is not None:
                self.prompt_capabilities = PromptCapabilities(
                    image=bool(prompt_caps.image),
                    audio=bool(prompt_caps.audio),
                    embedded_context=bool(prompt_caps.embedded_context),
                )
        profile = profile_for(self.agent_info.name)
        version = f" {self.agent_info.version}" if self.agent_info.version else ""
        self._step("initialize", f"{self.log_name}{version}; {describe_offer(init.auth_methods)}")
        await self.auth.start(
            self.name, profile.credentials if profile else None, init.auth_methods
        )
        target = self.spec.supervised_mode or (profile.supervised_mode if profile else None)
        state = SessionState(
            boundary=self.spec.boundary,
            supervision=Supervision(profile=profile, supervised_mode=target),
        )
        self.state = state
        cwd = str(self.spec.boundary.root)
        response: Any = None
        if self.spec.load_session_id:
            if self.can_resume or self.load_session:
                # Register first: a loading agent replays the conversation as session/update.
                load_id = self.spec.load_session_id
                self.client.sessions[load_id] = state
                method = "session/resume" if self.can_resume else "session/load"
                reopen = self.conn.resume_session if self.can_resume else self.conn.load_session
                try:
                    response = await self.auth.retry(
                        lambda: reopen(cwd=cwd, session_id=load_id, mcp_servers=[])
                    )
                    self.session_id = load_id
                except RequestError as exc:
                    del self.client.sessions[load_id]
                    logger.warning(
                        f"{method} failed; opening a new session",
                        extra={"agent": self.log_name, "reason": _describe(exc)},
                    )
                    self.memory_lost = True
            else:
                self.memory_lost = True
        if not self.session_id:
            response = await self.auth.retry(lambda: self.conn.new_session(cwd=cwd, mcp_servers=[]))
            self.session_id = response.session_id
            self.client.sessions[self.session_id] = state
        state.sink.discard()  # a replayed conversation is not part of any task
        self.process.log_fields["session_id"] = self.session_id
        self._step("session", f"opened session {self.session_id}")
        await self._supervise(response, target)
        self._step("mode", f"{state.current_mode} ({'supervised' if target else 'its own'})")
        if target is not None:
            allowed = {target, *READ_ONLY_MODES}
            if profile is not None:
                allowed.add(profile.supervised_mode)
            self.supervised_mode, self.allowed_modes = target, frozenset(allowed)
        else:
            self.supervised_mode = state.current_mode
        logger.info(
            "session opened",
            extra={
                "agent": self.log_name,
                "pid": self.process.pid,
                "session_id": self.session_id,
                "profile": profile.family if profile is not None else None,
                "mode": state.current_mode,
                "supervised": target is not None,
                "cwd": cwd,
                "loaded": self.spec.load_session_id is not None and not self.memory_lost,
            },
        )

    async def _supervise(self, response: Any, target: str | None) -> None:
        """Put the session in `target` mode and read it back; fail closed."""
        state = self.state
        assert state is not None
        config = mode_option(getattr(response, "config_options", None))
        modes = getattr(response, "modes", None)
        current = None
        offered: list[str] = []
        if config is not None:
            current = str(config.current_value)
            offered = mode_values(config)
            state.mode_config_id = str(config.id)
        elif modes is not None:
            current = modes.current_mode_id
            offered = [mode.id for mode in modes.available_modes]
        state.current_mode = current
        if target is None:
            if current is not None and is_unsupervised_mode(current, known_adapter=False):
                asks = [mode for mode in offered if not is_unsupervised_mode(mode)]
                hint = (
                    f"set ACP_SUPERVISED_MODE to one of its modes that asks ({', '.join(asks)})"
                    if asks
                    else "it offers no mode that asks"
                )
                raise SupervisionError(
                    f"{self.name} is not an adapter the bridge knows, and it starts in its "
                    f"{current!r} mode, in which it acts without asking: {hint}"
                )
            logger.warning(
                "adapter not recognised: it keeps its own mode, unsupervised by the bridge",
                extra={"agent": self.log_name, "mode": current},
            )
            return
        if current == target:
            return
        what = f"{self.name} could not switch to its {target!r} mode"
        if current is None and not offered:
            raise SupervisionError(f"{what}: it offers no modes")
        if target not in offered:
            raise SupervisionError(f"{what}: it does not offer it")
        readback = await self._switch_mode(target, what, use_config=config is not None)
        if readback is None:
            logger.warning(
                "mode change not confirmed by the adapter",
                extra={"agent": self.log_name, "mode": target},
            )
        elif readback != target:
            raise SupervisionError(f"{what}: it reads back as {readback!r}")
        state.current_mode = target

    async def _switch_mode(self, target: str, what: str, *, use_config: bool) -> str | None:
        """Ask for `target` (config option first, set_mode when that call is unknown) and
        return the mode the agent then reports, None if it reports none."""
        state = self.state
        assert state is not None
        changed = anyio.Event()

        def listener(_mode: str) -> None:
            changed.set()

        state.mode_listeners.append(listener)
        try:
            if use_config and state.mode_config_id is not None:
                try:
                    with anyio.fail_after(CONTROL_CALL_S):
                        answer = await self.conn.set_config_option(
                            config_id=state.mode_config_id, session_id=self.session_id, value=target
                        )
                    found = mode_from_config_options(
                        getattr(answer, "config_options", None), state.mode_config_id
                    )
                    if found is not None:
                        return found[1]
                    # An answer without the option: wait for the update instead.
                except RequestError as exc:
                    if exc.code not in UNKNOWN_CALL_CODES:
                        raise SupervisionError(f"{what}: it refused") from None
                    await self._set_mode(target, what)
            else:
                await self._set_mode(target, what)
            with anyio.move_on_after(MODE_READBACK_S):
                while state.current_mode != target and not changed.is_set():
                    await changed.wait()
            return state.current_mode if changed.is_set() or state.current_mode == target else None
        except TimeoutError:
            raise SupervisionError(f"{what}: it did not answer") from None
        finally:
            with contextlib.suppress(ValueError):
                state.mode_listeners.remove(listener)

    async def _set_mode(self, target: str, what: str) -> None:
        try:
            with anyio.fail_after(CONTROL_CALL_S):
                await self.conn.set_session_mode(session_id=self.session_id, mode_id=target)
        except RequestError:
            raise SupervisionError(f"{what}: it refused") from None

    # --- supervision during the session -------------------------------------------------

    def unsupervised_mode(self) -> str | None:
        """The session's mode if it is one the bridge must not let the agent work in."""
        state = self.state
        mode = state.current_mode if state is not None else None
        if mode is None:
            return None
        if self.allowed_modes:
            return None if mode in self.allowed_modes else mode
        # An adapter the bridge does not know keeps its own mode, but not a known bypass.
        bypass = is_unsupervised_mode(mode, known_adapter=False)
        return mode if bypass and mode != self.supervised_mode else None

    async def _restore_mode(self) -> bool:
        """Switch the session back to its guarded mode; True when it reads back so."""
        state = self.state
        target = self.supervised_mode
        if state is None or target is None:
            return False
        what = f"{self.name} could not switch back to its {target!r} mode"
        try:
            readback = await self._switch_mode(
                target, what, use_config=state.mode_config_id is not None
            )
        except (SupervisionError, RequestError, ConnectionError, ValidationError, OSError):
            return False
        if readback is not None and readback != target:
            return False
        state.current_mode = target
        return True

    async def _ensure_supervised(self) -> None:
        """Before every prompt: the session must still be in a supervised mode."""
        mode = self.unsupervised_mode()
        if mode is None:
            return
        logger.warning(
            "session left its supervised mode between turns; switching back",
            extra={"agent": self.log_name, "mode": mode, "target": self.supervised_mode},
        )
        if not await self._restore_mode():
            raise SupervisionError(
                f"{self.name} is in its {mode!r} mode, in which it acts without asking, and "
                f"could not be switched back to {self.supervised_mode!r}"
            )

    # --- turns -------------------------------------------------------------------------

    async def run_turn(
        self,
        turn: Turn,
        prompt: Sequence[PromptPart],
        on_events: Callable[[list[TurnEvent]], Awaitable[float | None]],
        *,
        silence_s: float,
        hard_cap_s: float | None = None,
        meta: Mapping[str, Any] | None = None,
    ) -> TurnEnd:
        """Prompt once for `turn` and feed every update to `on_events` until the agent answers.

        `on_events` may return a number of seconds: if nothing arrives by then it is
        called again with an empty batch (text held back for coalescing goes out). A
        cancel of the turn from the moment this is called is honoured: before the prompt
        is sent, TurnCancelled is raised without prompting."""
        state = self.state
        assert state is not None
        state.turn = turn
        try:
            if not self.alive:
                raise await self._exited_error()
            blocks = to_content_blocks(prompt, self.prompt_capabilities)
            try:
                await self._ensure_supervised()
            except (ConnectionError, OSError):
                raise await self._exited_error() from None
            if turn.cancelled:
                raise TurnCancelled
            retried_stale = False
            while True:
                end, saw_updates = await self._one_prompt(
                    turn, blocks, on_events, silence_s, hard_cap_s, meta
                )
                stale = (
                    end.stop_reason == "cancelled"
                    and not turn.interrupted
                    and self._last_turn_cancelled
                    and not retried_stale
                    and not saw_updates
                )
                if not stale:
                    break
                # claude-agent-acp #551: a cancelled turn's stop reason can surface on the
                # next prompt. The agent did nothing with this one, so send it again, once.
                logger.warning(
                    "stale stop reason from the previous turn; prompting again",
                    extra={"agent": self.log_name, "session_id": self.session_id},
                )
                retried_stale = True
            self._last_turn_cancelled = end.stop_reason == "cancelled"
            return end
        finally:
            state.turn = None

    async def _one_prompt(
        self,
        turn: Turn,
        blocks: list[Any],
        on_events: Callable[[list[TurnEvent]], Awaitable[float | None]],
        silence_s: float,
        hard_cap_s: float | None,
        meta: Mapping[str, Any] | None,
    ) -> tuple[TurnEnd, bool]:
        """One session/prompt: its end and whether the agent sent any update."""
        state = self.state
        assert state is not None
        sink = state.sink
        sink.drain()  # updates that arrived between turns belong to no task
        deadlines = TurnDeadlines(
            started=time.monotonic(),
            silence_s=silence_s,
            hard_cap_s=hard_cap_s,
            cancel_grace_s=self.spec.cancel_grace_s,
            question_s=self.spec.question_timeout_s,
        )
        sink.last_activity = deadlines.started
        call = _PromptCall(sink)
        async with anyio.create_task_group() as group:
            group.start_soon(
                call.run,
                lambda: self.conn.prompt(
                    session_id=self.session_id, prompt=blocks, **dict(meta or {})
                ),
            )
            # Raised outside the group, so the caller sees the error itself, not a group.
            failure: Exception | None = None
            try:
                result = await self._follow(turn, call, deadlines, on_events)
            except Exception as exc:
                failure = exc
            finally:
                group.cancel_scope.cancel()
        if failure is not None:
            raise failure
        return result

    async def _follow(
        self,
        turn: Turn,
        call: _PromptCall,
        deadlines: TurnDeadlines,
        on_events: Callable[[list[TurnEvent]], Awaitable[float | None]],
    ) -> tuple[TurnEnd, bool]:
        """Drain the agent's updates into `on_events` and keep the turn's deadlines."""
        sink = self._sink
        saw_updates = False
        lost_mode: str | None = None
        restored = False
        while True:
            batch = sink.drain()
            if batch:
                saw_updates = True
                hold = await on_events(batch)
                deadlines.hold(time.monotonic(), hold)
            if lost_mode is None:
                lost_mode = self.unsupervised_mode()
                if lost_mode is not None:
                    # The agent switched itself into a mode that acts without asking: stop
                    # the turn now, and put the session back before anything else.
                    logger.warning(
                        "session left its supervised mode during a turn: cancelling it",
                        extra={"agent": self.log_name, "mode": lost_mode},
                    )
                    await self.cancel_turn()
                    restored = await self._restore_mode()
            if batch:
                continue
            if call.finished.is_set():
                break
            if not self.alive:
                raise await self._exited_error()
            now = time.monotonic()
            if turn.interrupted:
                deadlines.interrupted(now)
            question = turn.question
            deadlines.question(question.asked_at if question is not None else None, now)
            deadlines.decision(turn.deciding_since, now)  # a supervisor is being asked
            step = deadlines.next(now, sink.last_activity)
            if step.due is Due.WAIT:
                with anyio.move_on_after(step.in_s):
                    await sink.wait()
            elif step.due is Due.TICK:
                deadlines.hold(now, None)
                await on_events([])
            elif step.due is Due.QUESTION:
                self._decline_unanswered(turn)
            elif step.due is Due.CANCEL_GRACE:
                logger.warning(
                    "agent did not stop its turn after session/cancel; stopping it",
                    extra={"agent": self.log_name, "session_id": self.session_id},
                )
                await self.close()
                if lost_mode is not None:
                    raise self._lost_error(lost_mode, restored=False)
                return TurnEnd("cancelled"), saw_updates
            else:
                raise await self._deadline_expired(step.due, call, deadlines)
        response = await self._prompt_response(call)
        # The SDK awaited every update handler before returning: drain the last ones.
        batch = sink.drain()
        if batch:
            saw_updates = True
            await on_events(batch)
        if lost_mode is None:
            lost_mode = self.unsupervised_mode()
            if lost_mode is not None:
                restored = await self._restore_mode()
        if lost_mode is not None:
            if not restored:
                await self.close()
            raise self._lost_error(lost_mode, restored=restored)
        end = TurnEnd(response.stop_reason, _usage(response.usage), dict(response.field_meta or {}))
        return end, saw_updates

    async def _prompt_response(self, call: _PromptCall) -> Any:
        """The agent's answer to session/prompt, or its failure in the turn's own terms."""
        error = call.error
        if error is None:
            return call.result
        if isinstance(error, (ConnectionError, OSError)):
            raise await self._exited_error() from None
        if isinstance(error, RequestError):
            raise _prompt_error(self.name, error, self.auth) from None
        if isinstance(error, ValidationError):
            raise AdapterError(
                f"{self.name} answered the prompt with a response the bridge cannot read"
            ) from None
        raise error

    def _decline_unanswered(self, turn: Turn) -> None:
        question = turn.question
        if question is None or not question.settle(QuestionReply("decline")):
            return
        timeout = self.spec.question_timeout_s
        self._sink.put(
            Notice(
                f"No answer came within {_duration(timeout)}: the bridge declined the "
                "question for the caller."
            )
        )

    async def _deadline_expired(
        self, due: Due, call: _PromptCall, deadlines: TurnDeadlines
    ) -> AdapterSilentError:
        """session/cancel, a bounded wait for the agent to stop, then the error to raise."""
        if due is Due.HARD_CAP:
            assert deadlines.hard_cap_s is not None
            message = (
                f"{self.name} did not finish its turn within {_duration(deadlines.hard_cap_s)} "
                "(ACP_TURN_TIMEOUT_MS): the bridge cancelled it"
            )
        else:
            silent = deadlines.silent_for(time.monotonic(), self._sink.last_activity)
            message = (
                f"{self.name} sent no update for {_duration(silent)} "
                f"(the limit is {_duration(deadlines.silence_s)}, ACP_SILENCE_TIMEOUT_MS): "
                "the bridge cancelled the turn"
            )
        logger.warning("turn deadline expired", extra={"agent": self.log_name, "reason": message})
        await self.cancel_turn()
        with anyio.move_on_after(self.spec.cancel_grace_s):
            await call.finished.wait()
        if not call.finished.is_set():
            await self.close()
            message += " and stopped the agent, which did not stop on its own"
        return AdapterSilentError(message)

    def _lost_error(self, mode: str, *, restored: bool) -> SupervisionLostError:
        first = (
            f"{self.name} switched itself to its {mode!r} mode, in which it acts without "
            "asking: the bridge cancelled the turn"
        )
        if restored:
            return SupervisionLostError(f"{first} and switched it back to {self.supervised_mode!r}")
        return SupervisionLostError(
            f"{first} and stopped the agent, which could not be switched back to "
            f"{self.supervised_mode!r}"
        )

    @property
    def _sink(self) -> EventSink:
        assert self.state is not None
        return self.state.sink

    async def cancel_turn(self, turn: Turn | None = None) -> None:
        """session/cancel for the running turn (only if it is `turn`, when given); its loop
        then waits (bounded) for the agent to stop. Permission requests that arrive from now
        on are answered `cancelled`."""
        state = self.state
        running = state.turn if state is not None else None
        if state is None or running is None or (turn is not None and running is not turn):
            return
        if not running.interrupt():
            return
        state.sink.wake()
        if not self.alive:
            return
        try:
            with anyio.fail_after(CONTROL_CALL_S):
                await self.conn.cancel(session_id=self.session_id)
        except Exception:
            logger.warning("session/cancel could not be sent", extra={"agent": self.log_name})

    # --- end ---------------------------------------------------------------------------

    def _on_exit(self, status: Any) -> None:
        if not self.process.stopping:
            self.dead = True
            self._notify_dead()
        if self.state is not None:
            self.state.sink.wake()

    def _on_broken(self, _why: str) -> None:
        # Any failed write is fatal: the agent no longer hears the bridge.
        self.dead = True
        if self.state is not None:
            self.state.sink.wake()
        self._notify_dead()

    def _notify_dead(self) -> None:
        hook, self.on_dead = self.on_dead, None
        if hook is not None:
            hook()

    async def _exit_message(self) -> str:
        if self.transport.overflow is not None:
            return (
                f"{self.transport.overflow} ({self.name}, pid {self.process.pid}; "
                "ACP_MAX_LINE_BYTES): the bridge stopped it"
            )
        await self.process.settle(EXIT_REPORT_S)
        if self.process.exit_status is None and self.transport.broken is not None:
            tail = self.process.stderr_tail.text()
            message = f"{self.name} (pid {self.process.pid}) stopped reading its input"
            return f"{message}; last lines of its stderr:\n{tail}" if tail else message
        return self.process.describe_exit(self.name)

    async def _exited_error(self) -> AdapterExitedError:
        self.dead = True
        message = await self._exit_message()
        return AdapterExitedError(
            message,
            returncode=self.process.proc.returncode,
            stderr_tail=self.process.stderr_tail.text(),
        )

    @property
    def alive(self) -> bool:
        return not self.dead and not self.process.exited.is_set() and self.transport.broken is None

    async def close(self) -> None:
        """End the session (session/close when offered) and stop the whole process tree.
        Idempotent: a second call waits for the first to finish."""
        with anyio.CancelScope(shield=True):
            if self._closing is not None:
                await self._closing.wait()
                return
            self._closing = anyio.Event()
            self.on_dead = None
            # Closing the connection closes stdin, and the adapter may exit before its
            # tree is stopped: that exit is the bridge's doing, not a crash.
            self.process.expect_exit()
            try:
                if self.alive and self.can_close and self.session_id:
                    with contextlib.suppress(Exception), anyio.move_on_after(CLOSE_CALL_S):
                        await self.conn.close_session(session_id=self.session_id)
                self.dead = True
                with contextlib.suppress(Exception), anyio.move_on_after(CLOSE_CALL_S):
                    await self.conn.close()
                # The process logs its own exit ("adapter exited", expected=true).
                await self.process.stop()
            finally:
                self._closing.set()


class _PromptCall:
    """session/prompt running beside its turn's loop: the answer or the failure, and an
    event set when the call is over (which also wakes the loop)."""

    def __init__(self, sink: EventSink) -> None:
        self._sink = sink
        self.finished = anyio.Event()
        self.result: Any = None
        self.error: Exception | None = None

    async def run(self, send: Callable[[], Awaitable[Any]]) -> None:
        try:
            self.result = await send()
        except Exception as exc:  # reported by the turn's loop, in its own terms
            self.error = exc
        finally:
            self.finished.set()
            self._sink.wake()


def notice_for_lost_memory(name: str) -> Notice:
    return Notice(
        f"{name} was restarted and could not reload the conversation: "
        "its memory of earlier messages in this context is lost."
    )


def _usage(usage: Any) -> dict[str, int]:
    if usage is None:
        return {}
    fields = {
        "inputTokens": "input_tokens",
        "outputTokens": "output_tokens",
        "totalTokens": "total_tokens",
        "thoughtTokens": "thought_tokens",
        "cachedReadTokens": "cached_read_tokens",
        "cachedWriteTokens": "cached_write_tokens",
    }
    result = {}
    for wire, attr in fields.items():
        value = getattr(usage, attr, None)
        if isinstance(value, int):
            result[wire] = value
    return result


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _duration(seconds: float) -> str:
    """'250 ms', '1.5 s', '10 min' — as an operator would write the limit."""
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 120:
        return f"{seconds:.3g} s"
    return f"{seconds / 60:.3g} min"


def _describe(exc: BaseException) -> str:
    if isinstance(exc, RequestError):
        return f"JSON-RPC error {exc.code}"
    if isinstance(exc, ValidationError):
        return "a malformed response"
    return type(exc).__name__


def _prompt_error(name: str, exc: RequestError, auth: Authenticator) -> AdapterError:
    if exc.code == AUTH_REQUIRED:
        # claude-agent-acp opens the session without credentials and refuses the prompt.
        return auth.not_authenticated()
    text = " ".join(str(exc).split())[:300]
    return AdapterError(f"{name} answered the prompt with error {exc.code}: {text}")
