"""One adapter process with the one ACP session the bridge opened on it.

`AgentSession.start` spawns the adapter, runs `initialize` (protocol version 1, no fs or
terminal capability; form elicitation, which needs the SDK's unstable switch), opens the
session (`session/load` of the previous one when the
agent can, else `session/new`) and puts it in its supervised mode, failing closed.
`run_turn` prompts and streams the turn's events to a callback, bounded by a silence
deadline that every update resets; `cancel_turn` sends `session/cancel`; `close` ends
the session and stops the whole process tree.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
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
from a2a_acp_bridge.acp.client import (
    BridgeClient,
    SessionState,
    mode_from_config_options,
    mode_values,
)
from a2a_acp_bridge.acp.process import AdapterProcess, spawn
from a2a_acp_bridge.acp.prompt import PromptCapabilities, to_content_blocks
from a2a_acp_bridge.acp.transport import StdioTransport
from a2a_acp_bridge.adapters import READ_ONLY_MODES, profile_for
from a2a_acp_bridge.boundary import Boundary
from a2a_acp_bridge.errors import (
    AdapterError,
    AdapterExitedError,
    AdapterSilentError,
    AdapterStartError,
    SupervisionError,
)
from a2a_acp_bridge.events import Notice, TurnEnd, TurnEvent
from a2a_acp_bridge.permissions import Answerer, Decider, Supervision, answer, decide
from a2a_acp_bridge.prompt import PromptPart

logger = logging.getLogger(__name__)

# How long a mode change may take to be reported after session/set_mode answered.
MODE_READBACK_S = 2.0
# Bound on each control call (set_mode, cancel, close): they answer in milliseconds.
CONTROL_CALL_S = 10.0
# After session/cancel, how long the agent gets to end its turn before the bridge stops it.
CANCEL_GRACE_S = 5.0
# The JSON-RPC error code ACP gives to "authentication required".
AUTH_REQUIRED = -32000
# After a crash is seen, how long to wait for the exit status before reporting.
EXIT_REPORT_S = 1.0


@dataclass(frozen=True)
class AgentInfo:
    """Who the adapter says it is at initialize."""

    name: str | None = None
    title: str | None = None
    version: str | None = None

    def display(self, fallback: str) -> str:
        return self.name or fallback


@dataclass(frozen=True)
class StartPlan:
    """Everything needed to start one adapter session."""

    command: Sequence[str]
    label: str
    env: Mapping[str, str]
    boundary: Boundary
    supervised_mode: str | None = None  # operator override (ACP_SUPERVISED_MODE)
    load_session_id: str | None = None
    start_timeout_s: float = 60.0
    # The permission classifier; an external channel replaces these two.
    decider: Decider = decide
    answerer: Answerer = answer
    # Told of every permission decision: (verdict "allow" | "deny", rule). For metrics.
    on_decision: Callable[[str, str], None] | None = None
    question_timeout_s: float = 3600.0


@dataclass
class TurnOutcome:
    """How a turn ended, as far as the ACP side knows."""

    end: TurnEnd
    cancelled_by_bridge: bool = False
    notes: list[str] = field(default_factory=list)


class AgentSession:
    """A started adapter and its one session."""

    def __init__(
        self,
        process: AdapterProcess,
        client: BridgeClient,
        conn: Any,
        plan: StartPlan,
    ) -> None:
        self.process = process
        self.client = client
        self.conn = conn
        self.plan = plan
        self.agent_info = AgentInfo()
        self.session_id = ""
        self.state: SessionState | None = None
        self.load_session = False
        self.can_close = False
        self.prompt_capabilities = PromptCapabilities()
        self.memory_lost = False
        self.dead = False
        self._last_turn_cancelled = False
        process.on_exit(self._on_exit)

    # --- start --------------------------------------------------------------------------

    @classmethod
    async def start(cls, plan: StartPlan) -> AgentSession:
        """Spawn, initialize, open the session and supervise it; stop everything on failure."""
        process = await spawn(plan.command, cwd=plan.boundary.root, env=plan.env, label=plan.label)
        client = BridgeClient(plan.label, plan.decider, plan.answerer, on_decision=plan.on_decision)
        transport = StdioTransport(process.stdout, process.stdin, client.update_from_wire)
        # elicitation/create is routed only with the SDK's unstable switch (ACP 0.12.1).
        conn = connect_to_agent(client, transport, use_unstable_protocol=True)  # type: ignore[arg-type]
        session = cls(process, client, conn, plan)
        try:
            with anyio.fail_after(plan.start_timeout_s):
                await session._handshake()
        except TimeoutError:
            await session.close()
            raise AdapterStartError(
                f"{session.name} did not finish starting within {plan.start_timeout_s:g} s"
            ) from None
        except AdapterError:
            await session.close()
            raise
        except (ConnectionError, OSError):
            await session._await_exit()
            await session.close()
            raise AdapterStartError(
                f"{session.name} stopped while starting: {process.describe_exit()}"
            ) from None
        except (RequestError, ValidationError) as exc:
            await session.close()
            if isinstance(exc, RequestError) and exc.code == AUTH_REQUIRED:
                # codex-acp and gemini-cli refuse session/new without credentials.
                raise AdapterStartError(_not_authenticated(session.name)) from None
            raise AdapterStartError(f"{session.name} failed to start: {_describe(exc)}") from None
        except BaseException:
            await session.close()
            raise
        return session

    @property
    def name(self) -> str:
        return self.agent_info.display(self.plan.label)

    async def _handshake(self) -> None:
        init = await self.conn.initialize(
            protocol_version=PROTOCOL_VERSION,
            client_capabilities=ClientCapabilities(
                elicitation=ElicitationCapabilities(form=ElicitationFormCapabilities())
            ),
            client_info=Implementation(name="a2a-acp-bridge", version=__version__),
        )
        if init.agent_info is not None:
            self.agent_info = AgentInfo(
                init.agent_info.name, init.agent_info.title, init.agent_info.version
            )
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
            prompt_caps = caps.prompt_capabilities
            if prompt_caps is not None:
                self.prompt_capabilities = PromptCapabilities(
                    image=bool(prompt_caps.image),
                    audio=bool(prompt_caps.audio),
                    embedded_context=bool(prompt_caps.embedded_context),
                )
        profile = profile_for(self.agent_info.name)
        supervised = self.plan.supervised_mode or (profile.supervised_mode if profile else None)
        state = SessionState(
            boundary=self.plan.boundary,
            supervision=Supervision(profile=profile, supervised_mode=supervised),
            question_timeout_s=self.plan.question_timeout_s,
        )
        self.state = state
        cwd = str(self.plan.boundary.root)
        response: Any = None
        if self.plan.load_session_id:
            if self.load_session:
                # Register first: the agent replays the conversation as session/update.
                self.client.sessions[self.plan.load_session_id] = state
                try:
                    response = await self.conn.load_session(
                        cwd=cwd, session_id=self.plan.load_session_id, mcp_servers=[]
                    )
                    self.session_id = self.plan.load_session_id
                except RequestError as exc:
                    del self.client.sessions[self.plan.load_session_id]
                    logger.warning(
                        "session/load failed; opening a new session",
                        extra={"agent": self.name, "reason": _describe(exc)},
                    )
                    self.memory_lost = True
            else:
                self.memory_lost = True
        if not self.session_id:
            response = await self.conn.new_session(cwd=cwd, mcp_servers=[])
            self.session_id = response.session_id
            self.client.sessions[self.session_id] = state
        state.sink.discard()  # a replayed conversation is not part of any task
        self.process.log_fields["session_id"] = self.session_id
        await self._supervise(response, supervised, known=profile is not None)
        logger.info(
            "session opened",
            extra={
                "agent": self.name,
                "pid": self.process.pid,
                "session_id": self.session_id,
                "profile": profile.family if profile is not None else None,
                "mode": state.current_mode,
                "cwd": cwd,
                "loaded": self.plan.load_session_id is not None and not self.memory_lost,
            },
        )

    async def _supervise(self, response: Any, target: str | None, *, known: bool) -> None:
        """Put the session in `target` mode and read it back; fail closed."""
        state = self.state
        assert state is not None
        config = _mode_option(getattr(response, "config_options", None))
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
            logger.warning(
                "adapter not recognised: it keeps its own mode",
                extra={"agent": self.name, "mode": current},
            )
            return
        if current == target:
            return
        what = f"{self.name} could not switch to its {target!r} mode"
        if current is None and not offered:
            raise SupervisionError(f"{what}: it offers no modes")
        if target not in offered:
            raise SupervisionError(f"{what}: it does not offer it")
        readback: str | None = None
        use_set_mode = config is None
        if config is not None:
            try:
                with anyio.fail_after(CONTROL_CALL_S):
                    answer = await self.conn.set_config_option(
                        config_id=str(config.id), session_id=self.session_id, value=target
                    )
                found = mode_from_config_options(getattr(answer, "config_options", None))
                readback = found[1] if found else None
            except RequestError as exc:
                if exc.code not in (-32601, -32602):
                    raise SupervisionError(f"{what}: it refused") from None
                use_set_mode = True
        if use_set_mode:
            changed = asyncio.Event()
            state.mode_listeners.append(lambda _mode: changed.set())
            try:
                with anyio.fail_after(CONTROL_CALL_S):
                    await self.conn.set_session_mode(session_id=self.session_id, mode_id=target)
            except RequestError:
                raise SupervisionError(f"{what}: it refused") from None
            with anyio.move_on_after(MODE_READBACK_S):
                while state.current_mode not in (target,) and not changed.is_set():
                    await changed.wait()
            state.mode_listeners.clear()
            readback = state.current_mode if changed.is_set() else None
            if readback is None:
                logger.warning(
                    "mode change not confirmed by the adapter",
                    extra={"agent": self.name, "mode": target},
                )
        if readback is not None and readback != target:
            raise SupervisionError(f"{what}: it reads back as {readback!r}")
        state.current_mode = target

    # --- turns -------------------------------------------------------------------------

    async def run_turn(
        self,
        prompt: Sequence[PromptPart],
        on_events: Callable[[list[TurnEvent]], Awaitable[float | None]],
        *,
        silence_s: float,
        hard_cap_s: float | None = None,
        meta: Mapping[str, Any] | None = None,
    ) -> TurnOutcome:
        """Prompt once and feed every update to `on_events` until the agent answers.

        `on_events` may return a number of seconds: if nothing arrives by then it is
        called again with an empty batch (text held back for coalescing goes out)."""
        state = self.state
        assert state is not None
        if self.dead:
            raise AdapterExitedError(
                self.process.describe_exit(),
                returncode=self.process.proc.returncode,
                stderr_tail=self.process.stderr_tail.text(),
            )
        blocks = to_content_blocks(prompt, self.prompt_capabilities)
        await self._ensure_supervised()
        retried_stale = False
        while True:
            outcome = await self._one_prompt(blocks, on_events, silence_s, hard_cap_s, meta)
            stale = (
                outcome.end.stop_reason == "cancelled"
                and not outcome.cancelled_by_bridge
                and self._last_turn_cancelled
                and not retried_stale
                and outcome.notes == ["no-updates"]
            )
            if not stale:
                break
            # claude-agent-acp #551: a cancelled turn's stop reason can surface on the next
            # prompt. The agent did nothing with this one, so send it again, once.
            logger.warning(
                "stale stop reason from the previous turn; prompting again",
                extra={"agent": self.name, "session_id": self.session_id},
            )
            retried_stale = True
        outcome.notes = [note for note in outcome.notes if note != "no-updates"]
        self._last_turn_cancelled = outcome.end.stop_reason == "cancelled"
        return outcome

    async def _one_prompt(
        self,
        blocks: list[Any],
        on_events: Callable[[list[TurnEvent]], Awaitable[float | None]],
        silence_s: float,
        hard_cap_s: float | None,
        meta: Mapping[str, Any] | None,
    ) -> TurnOutcome:
        state = self.state
        assert state is not None
        sink = state.sink
        sink.drain()  # updates that arrived between turns belong to no task
        state.cancelling = False
        started = time.monotonic()
        sink.last_activity = started
        saw_updates = False
        prompt_task = asyncio.create_task(
            self.conn.prompt(session_id=self.session_id, prompt=blocks, **dict(meta or {})),
            name=f"prompt:{self.session_id}",
        )
        prompt_task.add_done_callback(lambda _task: sink.wake())
        cancel_deadline: float | None = None
        tick_at: float | None = None
        try:
            while True:
                batch = sink.drain()
                if batch:
                    saw_updates = True
                    hold = await on_events(batch)
                    tick_at = None if hold is None else time.monotonic() + hold
                    continue
                if prompt_task.done():
                    break
                if self.process.exited.is_set() or self.dead:
                    await self._raise_exited()
                now = time.monotonic()
                if tick_at is not None and now >= tick_at:
                    tick_at = None
                    await on_events([])
                    continue
                if state.cancelling and cancel_deadline is None:
                    cancel_deadline = now + CANCEL_GRACE_S
                # A question waits for the caller, not the agent: no silence limit meanwhile
                # (the question has its own bound).
                if state.questions:
                    sink.last_activity = now
                limits = [sink.last_activity + silence_s - now]
                if hard_cap_s is not None:
                    limits.append(started + hard_cap_s - now)
                if cancel_deadline is not None:
                    limits.append(cancel_deadline - now)
                wait_s = min(limits)
                if wait_s > 0:
                    if tick_at is not None:
                        wait_s = min(wait_s, max(tick_at - now, 0.0))
                    with anyio.move_on_after(wait_s):
                        await sink.wait()
                    continue
                if cancel_deadline is not None and now >= cancel_deadline:
                    logger.warning(
                        "agent did not stop its turn after session/cancel; stopping it",
                        extra={"agent": self.name, "session_id": self.session_id},
                    )
                    await self.close()
                    return TurnOutcome(TurnEnd("cancelled"), cancelled_by_bridge=True)
                await self.cancel_turn()
                silent = now - sink.last_activity
                if hard_cap_s is not None and now - started >= hard_cap_s:
                    message = f"{self.name} did not finish its turn within {hard_cap_s:g} s"
                else:
                    message = f"{self.name} sent no update for {silent:.0f} s"
                with anyio.move_on_after(CANCEL_GRACE_S):
                    await asyncio.shield(prompt_task)
                if not prompt_task.done():
                    await self.close()
                raise AdapterSilentError(message)
            try:
                response = prompt_task.result()
            except (ConnectionError, OSError):
                await self._raise_exited()
                raise
            except RequestError as exc:
                raise _prompt_error(self.name, exc) from None
            except ValidationError:
                raise AdapterError(
                    f"{self.name} answered the prompt with a response the bridge cannot read"
                ) from None
            # The SDK awaited every update handler before returning: drain the last ones.
            batch = sink.drain()
            if batch:
                saw_updates = True
                await on_events(batch)
            usage = _usage(response.usage)
            outcome = TurnOutcome(
                TurnEnd(response.stop_reason, usage, dict(response.field_meta or {})),
                cancelled_by_bridge=state.cancelling,
            )
            if not saw_updates:
                outcome.notes.append("no-updates")
            return outcome
        finally:
            if not prompt_task.done():
                prompt_task.cancel()
                with contextlib.suppress(BaseException):
                    await prompt_task

    async def cancel_turn(self) -> None:
        """session/cancel; the turn's loop then waits (bounded) for the agent to stop."""
        state = self.state
        if state is None or self.dead:
            return
        state.cancelling = True
        state.decline_questions()
        state.sink.wake()
        try:
            with anyio.fail_after(CONTROL_CALL_S):
                await self.conn.cancel(session_id=self.session_id)
        except Exception:
            logger.warning("session/cancel could not be sent", extra={"agent": self.name})

    async def _ensure_supervised(self) -> None:
        """Before every prompt: the session must still be in its supervised mode."""
        state = self.state
        assert state is not None
        target = state.supervision.supervised_mode
        if (
            target is None
            or state.current_mode in (target, None)
            or state.current_mode in READ_ONLY_MODES
        ):
            return
        logger.warning(
            "session left its supervised mode; switching back",
            extra={"agent": self.name, "mode": state.current_mode, "target": target},
        )
        what = f"{self.name} could not switch back to its {target!r} mode"
        try:
            with anyio.fail_after(CONTROL_CALL_S):
                if state.mode_config_id is not None:
                    answer = await self.conn.set_config_option(
                        config_id=state.mode_config_id, session_id=self.session_id, value=target
                    )
                    found = mode_from_config_options(getattr(answer, "config_options", None))
                    if found is not None and found[1] != target:
                        raise SupervisionError(f"{what}: it reads back as {found[1]!r}")
                else:
                    await self.conn.set_session_mode(session_id=self.session_id, mode_id=target)
        except (RequestError, TimeoutError):
            raise SupervisionError(f"{what}: it refused") from None
        state.current_mode = target

    # --- end ---------------------------------------------------------------------------

    def _on_exit(self, _status: Any) -> None:
        if not self.process.stopping:
            self.dead = True
        if self.state is not None:
            self.state.sink.wake()

    async def _await_exit(self) -> None:
        with anyio.move_on_after(EXIT_REPORT_S):
            await self.process.exited.wait()

    async def _raise_exited(self) -> None:
        self.dead = True
        await self._await_exit()
        raise AdapterExitedError(
            self.process.describe_exit(),
            returncode=self.process.proc.returncode,
            stderr_tail=self.process.stderr_tail.text(),
        )

    @property
    def alive(self) -> bool:
        return not self.dead and not self.process.exited.is_set()

    async def close(self) -> None:
        """End the session (session/close when offered) and stop the whole process tree."""
        with anyio.CancelScope(shield=True):
            if self.alive and self.can_close and self.session_id:
                with contextlib.suppress(Exception), anyio.move_on_after(2.0):
                    await self.conn.close_session(session_id=self.session_id)
            self.dead = True
            with contextlib.suppress(Exception), anyio.move_on_after(2.0):
                await self.conn.close()
            # The process logs its own exit ("adapter exited", expected=true).
            await self.process.stop()


def notice_for_lost_memory(name: str) -> Notice:
    return Notice(
        f"{name} was restarted and could not reload the conversation: "
        "its memory of earlier messages in this context is lost."
    )


def _mode_option(options: Any) -> Any:
    for option in options or ():
        if (
            getattr(option, "category", None) == "mode"
            and getattr(option, "type", None) == "select"
        ):
            return option
    return None


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


def _describe(exc: BaseException) -> str:
    if isinstance(exc, RequestError):
        return f"JSON-RPC error {exc.code}"
    if isinstance(exc, ValidationError):
        return "a malformed response"
    return type(exc).__name__


def _not_authenticated(name: str) -> str:
    return (
        f"{name} is not authenticated: give it its credentials (an API key in the bridge's "
        "environment, or a login with its own CLI; the README's Agents section lists what each "
        "preset needs) and try again"
    )


def _prompt_error(name: str, exc: RequestError) -> AdapterError:
    if exc.code == AUTH_REQUIRED:
        return AdapterError(_not_authenticated(name))
    text = " ".join(str(exc).split())[:300]
    return AdapterError(f"{name} answered the prompt with error {exc.code}: {text}")
