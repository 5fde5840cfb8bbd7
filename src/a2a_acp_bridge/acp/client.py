"""The bridge's ACP client: what the adapter calls back into.

`BridgeClient` is a plain class (not a subclass of `acp.Client`, whose protocol stubs would
answer `null` to methods the bridge does not serve). The router calls its handlers with
keyword arguments named exactly as the SDK expects.

- `session_update` does only synchronous work: it converts the update into a bridge event
  and appends it to the session's `EventSink`. Every notification runs as its own asyncio
  task in the SDK, so awaiting here would let chunks overtake each other.
- `request_permission` is answered by the classifier (`permissions.decide` and
  `permissions.answer`), or, when the bridge gives one, by its decision chain
  (decisions.py: the floor, the policy, a supervisor, the table; its ledger row written
  before the answer leaves), never by the A2A caller; every decision is logged and travels to
  the task as a `PermissionSeen` event. A request that arrives while no turn of the session
  runs, or after session/cancel, is answered `cancelled`.
- `create_elicitation` (ACP `elicitation/create`, form mode) is a question for the
  agent's user: it is held on the running `Turn` and becomes a `QuestionAsked` event (the
  task goes INPUT_REQUIRED) until the caller answers; a cancelled turn declines it, and the
  turn's deadlines (deadlines.py) decline it when no answer comes in time. A permission
  request never takes this path.
- fs and terminal methods are not advertised, so adapters use their own tools, each of
  which is gated by a permission request; the handlers here answer "method not found".
"""

from __future__ import annotations

import base64
import binascii
import logging
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import unquote

import anyio
from acp import RequestError
from acp.schema import (
    AcceptElicitationResponse,
    AgentMessageChunk,
    AgentPlanUpdate,
    AgentThoughtChunk,
    AllowedOutcome,
    AudioContentBlock,
    BlobResourceContents,
    CancelElicitationResponse,
    ConfigOptionUpdate,
    CurrentModeUpdate,
    DeclineElicitationResponse,
    DeniedOutcome,
    ElicitationFormRequestMode,
    ElicitationFormSessionMode,
    EmbeddedResourceContentBlock,
    FileEditToolCallContent,
    ImageContentBlock,
    RequestPermissionResponse,
    ResourceContentBlock,
    SessionNotification,
    TextContentBlock,
    ToolCallProgress,
    ToolCallStart,
    ToolCallUpdate,
)
from acp.schema import (
    PermissionOption as AcpPermissionOption,
)
from pydantic import ValidationError

from a2a_acp_bridge.adapters import is_unsupervised_mode, refusal_effect
from a2a_acp_bridge.boundary import Boundary
from a2a_acp_bridge.decisions import DecisionChain, Outcome, Where, bridge_outcome
from a2a_acp_bridge.events import (
    FileChunk,
    FileDiff,
    ModeSeen,
    PermissionSeen,
    PlanEntry,
    PlanSeen,
    QuestionAsked,
    TextChunk,
    ToolCallSeen,
    TurnEvent,
)
from a2a_acp_bridge.logs import log_ids
from a2a_acp_bridge.permissions import (
    REJECT_KINDS,
    Answer,
    Answerer,
    Decider,
    Decision,
    PermissionOption,
    PermissionRequest,
    Rule,
    Supervision,
    answer,
    decide,
    refusal_record,
)
from a2a_acp_bridge.schema import DEFAULT_PRINCIPAL
from a2a_acp_bridge.turn import Turn

logger = logging.getLogger(__name__)

# Tool calls remembered per session for requests that omit kind or locations
# (claude-code-acp 0.16 sends neither in the permission request).
TOOL_CALL_MEMORY = 512


class EventSink:
    """A session's FIFO of turn events: appended synchronously, drained by one consumer.

    `last_activity` is when the agent last proved alive (any update), on the monotonic clock."""

    __slots__ = ("_items", "_wake", "last_activity")

    def __init__(self) -> None:
        self._items: deque[TurnEvent] = deque()
        self._wake = anyio.Event()
        self.last_activity = time.monotonic()

    def put(self, event: TurnEvent) -> None:
        self._items.append(event)
        self.last_activity = time.monotonic()
        self._wake.set()

    def touch(self) -> None:
        """An update arrived that carries nothing for the task; it still proves liveness."""
        self.last_activity = time.monotonic()

    def wake(self) -> None:
        """Wake the consumer for a reason other than an event (turn ended, process exited)."""
        self._wake.set()

    def drain(self) -> list[TurnEvent]:
        items = list(self._items)
        self._items.clear()
        if self._wake.is_set():
            self._wake = anyio.Event()
        return items

    def discard(self) -> None:
        self._items.clear()

    async def wait(self) -> None:
        await self._wake.wait()


@dataclass
class SessionState:
    """What the client knows about one ACP session it serves; `turn` is the task whose
    turn runs on it now (None between turns)."""

    boundary: Boundary
    supervision: Supervision
    sink: EventSink = field(default_factory=EventSink)
    turn: Turn | None = None
    current_mode: str | None = None
    mode_config_id: str | None = None
    tool_calls: dict[str, ToolCallSeen] = field(default_factory=dict)
    mode_listeners: list[Callable[[str], None]] = field(default_factory=list)

    def remember(self, seen: ToolCallSeen) -> ToolCallSeen:
        """Merge a tool call into what is known of it (a repeated tool_call updates it).

        Paths only accumulate: a later update or request with an empty list never erases a
        location or a diff an earlier tool_call with the same id announced (the permission
        is decided on all of them)."""
        known = self.tool_calls.get(seen.tool_call_id)
        if known is not None:
            locations = known.locations
            if seen.locations is not None:
                locations = tuple(dict.fromkeys((*(known.locations or ()), *seen.locations)))
            seen = ToolCallSeen(
                tool_call_id=seen.tool_call_id,
                started=seen.started,
                title=seen.title if seen.title is not None else known.title,
                kind=seen.kind if seen.kind is not None else known.kind,
                status=seen.status if seen.status is not None else known.status,
                locations=locations,
                diffs=(*known.diffs, *(d for d in seen.diffs if d not in known.diffs)),
                raw_input=seen.raw_input if seen.raw_input is not None else known.raw_input,
            )
        elif len(self.tool_calls) >= TOOL_CALL_MEMORY:
            self.tool_calls.pop(next(iter(self.tool_calls)))
        self.tool_calls[seen.tool_call_id] = seen
        return seen

    def set_mode(self, mode_id: str) -> None:
        # Listeners hear every report, also one that repeats the mode: after a switch, an
        # agent that reports its old mode again has refused it.
        if mode_id != self.current_mode:
            self.current_mode = mode_id
            self.sink.put(ModeSeen(mode_id))
        for listener in list(self.mode_listeners):
            listener(mode_id)


class BridgeClient:
    """The ACP client of one adapter connection; sessions are registered as they open."""

    def __init__(
        self,
        label: str,
        decider: Decider = decide,
        answerer: Answerer = answer,
        on_decision: Callable[[str, str], None] | None = None,
        chain: DecisionChain | None = None,
    ) -> None:
        self.label = label
        self.sessions: dict[str, SessionState] = {}
        self._decide = decider
        self._answer = answerer
        self._on_decision = on_decision
        self._chain = chain

    # --- session/update -----------------------------------------------------------------

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        """Updates the transport did not take (a session not registered yet)."""
        state = self.sessions.get(session_id)
        if state is not None:
            self._apply(state, update)

    def update_from_wire(self, params: dict[str, Any]) -> bool:
        """The transport's fast path: take a raw `session/update` for a known session.

        Text chunks, most of what a turn streams, go straight into the sink; every other
        update is validated with the SDK's model first. False leaves the message to the SDK.
        """
        state = self.sessions.get(params.get("sessionId"))  # type: ignore[arg-type]
        if state is None:
            return False
        update = params.get("update")
        if isinstance(update, dict):
            kind = update.get("sessionUpdate")
            if kind == "agent_message_chunk" or kind == "agent_thought_chunk":
                content = update.get("content")
                if isinstance(content, dict) and content.get("type") == "text":
                    text = content.get("text")
                    if isinstance(text, str):
                        if kind == "agent_message_chunk":
                            state.sink.put(TextChunk("answer", text))
                        else:
                            state.sink.put(TextChunk("thought", text))
                        return True
        try:
            notification = SessionNotification.model_validate(params)
        except ValidationError:
            # An update kind this SDK does not know, or a malformed one: proof of life only.
            logger.debug("session/update not understood; skipped", extra={"agent": self.label})
            state.sink.touch()
            return True
        self._apply(state, notification.update)
        return True

    def _apply(self, state: SessionState, update: Any) -> None:
        sink = state.sink
        kind = type(update)
        if kind is AgentMessageChunk:
            content = update.content
            if type(content) is TextContentBlock:
                sink.put(TextChunk("answer", str(content.text)))
            else:
                sink.put(_file_chunk(content))
        elif kind is AgentThoughtChunk:
            sink.put(TextChunk("thought", _content_text(update.content)))
        elif kind is ToolCallStart or kind is ToolCallProgress:
            seen = _tool_call_seen(update, started=kind is ToolCallStart)
            state.remember(seen)
            sink.put(seen)
        elif kind is AgentPlanUpdate:
            sink.put(
                PlanSeen(
                    tuple(
                        PlanEntry(entry.content, entry.status, entry.priority)
                        for entry in update.entries
                    )
                )
            )
        elif kind is CurrentModeUpdate:
            state.set_mode(update.current_mode_id)
        elif kind is ConfigOptionUpdate:
            mode = mode_from_config_options(update.config_options, state.mode_config_id)
            if mode is not None:
                state.mode_config_id = state.mode_config_id or mode[0]
                state.set_mode(mode[1])
            else:
                sink.touch()
        else:
            # usage_update and kinds the bridge does not show: proof of life only.
            sink.touch()

    # --- session/request_permission ----------------------------------------------------

    async def request_permission(
        self,
        session_id: str,
        tool_call: ToolCallUpdate,
        options: list[AcpPermissionOption],
        **kwargs: Any,
    ) -> RequestPermissionResponse:
        state = self.sessions.get(session_id)
        offered = [PermissionOption(o.option_id, o.kind, o.name) for o in options]
        if state is None:
            logger.warning(
                "permission request for an unknown session answered cancelled",
                extra={"session_id": session_id, "agent": self.label},
            )
            return _cancelled()
        state.sink.touch()
        request = self._request_from(state, tool_call, offered)
        turn = state.turn
        early = turn is not None and turn.interrupted  # refused before any decider
        if turn is None:
            # Between turns nobody asked for this action: it is no task's to allow.
            reply = Answer(None, note="no turn is running")
            decision = Decision(
                False, Rule.NO_TURN, "no turn of this session was running, so no task asked for it"
            )
        elif turn.interrupted:
            reply = Answer(None, note="the turn is being cancelled")
            decision = Decision(False, Rule.TURN_CANCELLED, "the task was cancelled")
        elif self._chain is not None:
            decision, reply = await self._through_chain(
                self._chain, state, turn, session_id, request, offered
            )
        else:
            decision, reply = self._classify(state, request, offered)
        if self._chain is not None and (turn is None or early):
            self._note(self._chain, state, turn, session_id, request, decision, reply)
        self._record(state, turn, session_id, request, decision, reply)
        if reply.option_id is None:
            return _cancelled()
        return RequestPermissionResponse(
            outcome=AllowedOutcome(outcome="selected", option_id=reply.option_id)
        )

    async def _through_chain(
        self,
        chain: DecisionChain,
        state: SessionState,
        turn: Turn,
        session_id: str,
        request: PermissionRequest,
        offered: list[PermissionOption],
    ) -> tuple[Decision, Answer]:
        """The chain's verdict, its answer among the offered options, and its ledger rows,
        written before the answer leaves (a row that cannot be written refuses)."""
        where = self._where(turn, session_id)
        seen = state.tool_calls.get(request.tool_call_id)
        outcome = await chain.decide(
            request,
            state.boundary,
            state.supervision,
            where,
            turn,
            notify=state.sink.put,
            diffs=seen.diffs if seen is not None else (),
        )
        if turn.interrupted:
            reason = "the task was cancelled"
            decision = Decision(False, Rule.TURN_CANCELLED, reason)
            reply = Answer(None, note="the turn is being cancelled")
            if outcome.ruling.verdict != "cancelled":
                ruling = replace(outcome.ruling, verdict="cancelled", reason=reason)
                outcome = Outcome(decision, (*outcome.rulings[:-1], ruling))
        else:
            decision, reply = self._classify(state, request, offered, outcome.decision)
        allowed = decision.allow and reply.allows
        if not await chain.record(outcome, request, where, chosen=reply.option_id, allowed=allowed):
            decision, reply = _failed(decision, state, "the decision could not be recorded")
            decision = replace(decision, rule=Rule.LEDGER_FAILED)
        return decision, reply

    def _where(self, turn: Turn | None, session_id: str) -> Where:
        return Where(
            adapter=self.label,
            session_id=session_id,
            context_id=turn.context_id if turn is not None else None,
            task_id=turn.task_id if turn is not None else None,
            principal=turn.principal if turn is not None else DEFAULT_PRINCIPAL,
        )

    def _note(
        self,
        chain: DecisionChain,
        state: SessionState,
        turn: Turn | None,
        session_id: str,
        request: PermissionRequest,
        decision: Decision,
        reply: Answer,
    ) -> None:
        """A decision the bridge made before the chain (no turn, cancelled, malformed):
        recorded with the next batch."""
        chain.note(
            bridge_outcome(decision),
            request,
            self._where(turn, session_id),
            chosen=reply.option_id,
            allowed=decision.allow and reply.allows,
        )

    def _record(
        self,
        state: SessionState,
        turn: Turn | None,
        session_id: str,
        request: PermissionRequest,
        decision: Decision,
        reply: Answer,
    ) -> None:
        """Log a decision, count it, and tell the task (a refusal is always reported).
        Outside a turn it is nobody's: logged without any task's ids, told to no task."""
        offered = request.options
        allowed = decision.allow and reply.allows
        refusal = None if allowed else refusal_record(request, decision, reply)
        verdict = "allow" if allowed else "deny"
        if self._on_decision is not None:
            self._on_decision(verdict, decision.rule.value)
        # The connection's tasks inherit the ids bound when the adapter started: unbind them.
        with log_ids(task_id=None, context_id=None):
            logger.info(
                "permission decided",
                extra={
                    "session_id": session_id,
                    "context_id": turn.context_id if turn is not None else None,
                    "task_id": turn.task_id if turn is not None else None,
                    "tool_call_id": request.tool_call_id,
                    "title": request.label,
                    "kind": request.kind,
                    "locations": list(request.locations),
                    "verdict": verdict,
                    "rule": decision.rule.value,
                    "reason": decision.reason,
                    "offered": [{"optionId": o.option_id, "kind": o.kind} for o in offered],
                    "chosen": reply.option_id,
                    "turn_effect": reply.turn_effect.value,
                },
            )
        if turn is not None and not turn.interrupted:
            state.sink.put(
                PermissionSeen(
                    tool_call_id=request.tool_call_id,
                    label=request.label,
                    allowed=allowed,
                    option_id=reply.option_id,
                    rule=decision.rule.value,
                    refusal=refusal,
                )
            )

    def malformed_permission(self, params: Any, problem: str) -> None:
        """A permission request the SDK could not read: the transport answered it
        `cancelled`; here it is logged and reported as a refusal like any other."""
        raw = params if isinstance(params, dict) else {}
        session_id = raw.get("sessionId")
        state = self.sessions.get(session_id) if isinstance(session_id, str) else None
        found = raw.get("toolCall")
        tool_call: dict[str, Any] = found if isinstance(found, dict) else {}
        title = tool_call.get("title")
        kind = tool_call.get("kind")
        request = PermissionRequest(
            tool_call_id=str(tool_call.get("toolCallId") or "unknown"),
            title=title if isinstance(title, str) else None,
            kind=kind if isinstance(kind, str) else None,
        )
        decision = Decision(
            False,
            Rule.MALFORMED_REQUEST,
            f"the agent's permission request could not be read ({problem}), so it was "
            "answered cancelled",
        )
        if state is None:
            logger.warning(
                "malformed permission request answered cancelled",
                extra={"agent": self.label, "problem": problem},
            )
            return
        turn = state.turn
        state.sink.touch()
        effect = refusal_effect(state.supervision.profile, None, leaving_plan=False)
        reply = Answer(None, turn_effect=effect, note=problem)
        if self._chain is not None:
            self._note(self._chain, state, turn, str(session_id), request, decision, reply)
        self._record(state, turn, str(session_id), request, decision, reply)

    def _classify(
        self,
        state: SessionState,
        request: PermissionRequest,
        offered: list[PermissionOption],
        decided: Decision | None = None,
    ) -> tuple[Decision, Answer]:
        """`decide` (unless the chain `decided`) then `answer`, failing closed: whatever a
        classifier (ours or an external channel's) raises or returns, only an offered id
        goes out, and an allow option only when the decision allowed."""
        where = {"agent": self.label, "tool_call_id": request.tool_call_id}
        try:
            decision = decided or self._decide(request, state.boundary, state.supervision)
        except Exception:
            logger.exception("the permission classifier failed; refusing", extra=where)
            decision = Decision(False, Rule.CLASSIFIER_FAILED, "the permission classifier failed")
        try:
            reply = self._answer(decision, offered, state.supervision)
        except Exception:
            logger.exception("choosing the permission answer failed; cancelling", extra=where)
            return _failed(decision, state, "choosing the answer failed")
        if reply.option_id is None:
            return decision, reply
        chosen = next((o for o in offered if o.option_id == reply.option_id), None)
        if chosen is None:
            logger.error("the classifier chose an option that was not offered", extra=where)
            return _failed(decision, state, f"the answer {reply.option_id!r} was not offered")
        if not decision.allow and chosen.kind not in REJECT_KINDS:
            logger.error("the answer contradicts the decision; cancelling", extra=where)
            return _failed(decision, state, f"the answer {reply.option_id!r} does not refuse")
        return decision, replace(reply, option_kind=chosen.kind)

    def _request_from(
        self, state: SessionState, tool_call: ToolCallUpdate, offered: list[PermissionOption]
    ) -> PermissionRequest:
        seen = state.remember(_tool_call_seen(tool_call, started=False))
        paths: list[str] = list(seen.locations or ())
        # Every path a diff touches counts too: for a move, codex lists the source in
        # `locations` and carries the destination only in the diff.
        diff_paths = tuple(dict.fromkeys(diff.path for diff in seen.diffs))
        for path in diff_paths:
            if path not in paths:
                paths.append(path)
        return PermissionRequest(
            tool_call_id=seen.tool_call_id,
            title=seen.title,
            kind=seen.kind,
            locations=tuple(paths),
            raw_input=seen.raw_input,
            options=tuple(offered),
            diffs=diff_paths,
        )

    # --- elicitation/create ---------------------------------------------------------------

    async def create_elicitation(self, message: str, mode: Any, **kwargs: Any) -> Any:
        if isinstance(mode, ElicitationFormSessionMode):
            state = self.sessions.get(mode.session_id)
        elif isinstance(mode, ElicitationFormRequestMode) and len(self.sessions) == 1:
            state = next(iter(self.sessions.values()))
        else:
            # URL mode is not advertised: the bridge cannot open a page for anyone.
            logger.warning(
                "elicitation declined: not a form for a known session",
                extra={"agent": self.label, "mode": type(mode).__name__},
            )
            return DeclineElicitationResponse(action="decline")
        turn = state.turn if state is not None else None
        if state is None or turn is None or turn.interrupted:
            return DeclineElicitationResponse(action="decline")
        schema = mode.requested_schema.model_dump(by_alias=True, exclude_none=True, mode="json")
        asked = QuestionAsked(
            question_id=uuid.uuid4().hex,
            message=message,
            schema=schema,
            tool_call_id=getattr(mode, "tool_call_id", None),
        )
        pending = turn.ask(asked)
        state.sink.put(asked)
        logger.info(
            "agent asks the caller a question",
            extra={"task_id": turn.task_id, "context_id": turn.context_id, "agent": self.label},
        )
        try:
            # Bounded by the turn's question deadline, which declines it (deadlines.py).
            reply = await pending.wait()
        finally:
            turn.question_settled(pending)
            state.sink.touch()
        meta = dict(reply.meta) if reply.meta else None
        if reply.action == "accept":
            return AcceptElicitationResponse(
                action="accept",
                content=dict(reply.content) if reply.content is not None else None,
                field_meta=meta,
            )
        if reply.action == "cancel":
            return CancelElicitationResponse(action="cancel", field_meta=meta)
        return DeclineElicitationResponse(action="decline", field_meta=meta)

    # --- methods the bridge does not serve ---------------------------------------------

    async def read_text_file(self, session_id: str, path: str, **kwargs: Any) -> Any:
        raise RequestError.method_not_found("fs/read_text_file")

    async def write_text_file(self, session_id: str, path: str, content: str, **kwargs: Any) -> Any:
        raise RequestError.method_not_found("fs/write_text_file")

    async def create_terminal(self, session_id: str, command: str, **kwargs: Any) -> Any:
        raise RequestError.method_not_found("terminal/create")

    async def terminal_output(self, session_id: str, terminal_id: str, **kwargs: Any) -> Any:
        raise RequestError.method_not_found("terminal/output")

    async def release_terminal(self, session_id: str, terminal_id: str, **kwargs: Any) -> Any:
        raise RequestError.method_not_found("terminal/release")

    async def wait_for_terminal_exit(self, session_id: str, terminal_id: str, **kwargs: Any) -> Any:
        raise RequestError.method_not_found("terminal/wait_for_exit")

    async def kill_terminal(self, session_id: str, terminal_id: str, **kwargs: Any) -> Any:
        raise RequestError.method_not_found("terminal/kill")

    async def ext_method(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        raise RequestError.method_not_found("_" + method)

    async def ext_notification(self, method: str, params: dict[str, Any]) -> None:
        return None


def _failed(decision: Decision, state: SessionState, why: str) -> tuple[Decision, Answer]:
    """Refuse with the outcome `cancelled` when a classifier misbehaved."""
    effect = refusal_effect(state.supervision.profile, None, leaving_plan=decision.leaving_plan)
    refused = Decision(
        False,
        Rule.CLASSIFIER_FAILED,
        f"{why}; refused to be safe",
        leaving_plan=decision.leaving_plan,
    )
    return refused, Answer(None, turn_effect=effect, note=refused.reason)


def _cancelled() -> RequestPermissionResponse:
    return RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))


def _content_text(content: Any) -> str:
    if type(content) is TextContentBlock:
        return str(content.text)
    kind = getattr(content, "type", "content")
    return f"<{kind}>"


def _file_chunk(content: Any) -> FileChunk:
    """Non-text answer content as a FileChunk (the A2A side makes it a file or data part)."""
    kind = type(content)
    if kind is ResourceContentBlock:
        return FileChunk(name=content.name, media_type=content.mime_type, uri=content.uri)
    if kind is EmbeddedResourceContentBlock:
        resource = content.resource
        name = _name_from_uri(resource.uri)
        if isinstance(resource, BlobResourceContents):
            return FileChunk(name, resource.mime_type, data=_decoded(resource.blob))
        return FileChunk(name, resource.mime_type, text=resource.text)
    if kind is ImageContentBlock or kind is AudioContentBlock:
        return FileChunk(
            _name_from_uri(getattr(content, "uri", None) or ""),
            content.mime_type,
            data=_decoded(content.data),
        )
    return FileChunk(None, "text/plain", text=_content_text(content))


def _name_from_uri(uri: str) -> str | None:
    tail = uri.split("?", 1)[0].rstrip("/").rsplit("/", 1)[-1]
    return unquote(tail) or None


def _decoded(data: str) -> bytes:
    try:
        return base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        return data.encode("utf-8")


def _tool_call_seen(
    update: ToolCallStart | ToolCallProgress | ToolCallUpdate, *, started: bool
) -> ToolCallSeen:
    locations = None
    if update.locations is not None:
        locations = tuple(location.path for location in update.locations)
    diffs: tuple[FileDiff, ...] = ()
    if update.content:
        diffs = tuple(
            FileDiff(item.path, item.old_text, item.new_text)
            for item in update.content
            if isinstance(item, FileEditToolCallContent)
        )
    return ToolCallSeen(
        tool_call_id=update.tool_call_id,
        started=started,
        title=update.title,
        kind=update.kind,
        status=update.status,
        locations=locations,
        diffs=diffs,
        raw_input=update.raw_input,
    )


def mode_option(options: Any, config_id: str | None = None) -> Any:
    """The session's mode among config options: the select option whose id is `config_id`
    (the one the bridge set) when there is one, else one of category `mode`. When several
    claim to be the mode, the one that selects a mode acting without asking is returned:
    an update is judged by the mode it selects, not by whichever entry comes first."""
    candidates = [
        option
        for option in options or ()
        if getattr(option, "type", None) == "select"
        and (
            getattr(option, "category", None) == "mode"
            or (config_id is not None and str(getattr(option, "id", "")) == config_id)
        )
    ]
    for option in candidates:
        if config_id is not None and str(option.id) == config_id:
            return option
    for option in candidates:
        if is_unsupervised_mode(str(option.current_value)):
            return option
    return candidates[0] if candidates else None


def mode_from_config_options(options: Any, config_id: str | None = None) -> tuple[str, str] | None:
    """(config id, current value) of the session's mode option (see `mode_option`)."""
    option = mode_option(options, config_id)
    return None if option is None else (str(option.id), str(option.current_value))


def mode_values(option: Any) -> list[str]:
    """Every selectable value of a select config option (groups flattened)."""
    values: list[str] = []
    for item in option.options:
        nested = getattr(item, "options", None)
        if nested is not None:
            values.extend(str(choice.value) for choice in nested)
        else:
            values.append(str(item.value))
    return values
