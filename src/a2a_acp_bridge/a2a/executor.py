"""The AgentExecutor: one A2A task is one ACP turn (or, after a question, one more).

`execute` publishes the task first (with the caller's message in its history), registers
the turn with the bridge and starts it in the bridge's task group (`TaskRun.drive`), then
waits until the turn either ends or asks the caller something. What the agent does is
streamed as it happens: answer text as chunks of one `answer` artifact, files and data
the agent returns as parts of their own in it; thinking, tool calls, plans and refusals
as WORKING status messages; completed file edits in a `changes` artifact. Before a final
or interrupted status every open artifact is closed with its whole content, and the
terminal status carries the turn's report in its metadata (a2a/artifacts.py).

A question from the agent (ACP elicitation) puts the task in INPUT_REQUIRED with the
question and its form (a JSON Schema in a data part) and returns; the turn keeps waiting.
The caller's next message on that task is the answer (a2a/input.py `reply_from_message`);
an answer that does not fit the form restates the question.

A blocking SendMessage without push notifications may be answered with a Message instead
of a task: when the agent marks its prompt response `_meta.a2a.reply = "message"` and its
turn, within `DIRECT_REPLY_WINDOW_S`, produced nothing but answer text and ended
`end_turn`. Until then nothing is published; after the window (or at the first thing that
is not answer text) the task is published as usual, with the text held so far as one chunk.

`cancel` asks the bridge to cancel (session/cancel on a running turn, a decline to a
pending question, nothing sent for a queued one) and waits, bounded, for the turn to
publish CANCELED itself, so streaming subscribers see the terminal state.
"""

from __future__ import annotations

import difflib
import json
import logging
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import anyio
from a2a.helpers.proto_helpers import new_data_part
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.types.a2a_pb2 import (
    Message,
    Part,
    Role,
    Task,
    TaskState,
    TaskStatus,
    TaskStatusUpdateEvent,
)
from a2a.utils.errors import InvalidParamsError

from a2a_acp_bridge.a2a.artifacts import CHANGES_ARTIFACT, TaskArtifacts, report_metadata
from a2a_acp_bridge.a2a.failures import request_error, task_failure
from a2a_acp_bridge.a2a.input import parsed_prompt, reply_from_message
from a2a_acp_bridge.a2a.ownership import principal_of
from a2a_acp_bridge.a2a.states import INTERRUPTED, OF_FINAL_STATE, TERMINAL
from a2a_acp_bridge.a2a.store import ANSWER_ARTIFACT
from a2a_acp_bridge.boundary import relative_text
from a2a_acp_bridge.bridge import Bridge
from a2a_acp_bridge.events import FileChunk, QuestionAsked, TurnEvent
from a2a_acp_bridge.logs import log_ids
from a2a_acp_bridge.principals import conversation_key
from a2a_acp_bridge.progress import (
    HOLD_S,
    AnswerFile,
    AnswerText,
    ChangeMade,
    FinalState,
    Output,
    Question,
    StatusText,
    TurnProgress,
)
from a2a_acp_bridge.prompt import BlobPart, LinkPart, PromptPart, TextPart
from a2a_acp_bridge.turn import CALLER_CANCEL_REASON, Turn

logger = logging.getLogger(__name__)

# How long CancelTask waits for the turn to end and publish CANCELED itself; the bridge
# gives the agent ACP_CANCEL_GRACE_MS (5 s by default) and then stops it, so this is a
# backstop.
CANCEL_WAIT_S = 15.0
# How long a blocking SendMessage holds its task back in case the agent answers with a
# direct message; longer turns are published as tasks.
DIRECT_REPLY_WINDOW_S = 5.0
STREAMING_METHODS = frozenset({"SendStreamingMessage", "message/stream"})
SCHEMA_MEDIA_TYPE = "application/schema+json"


def file_part(file: FileChunk) -> Part:
    """An answer file as an A2A part: a URL, raw bytes, or data for a JSON resource."""
    if file.text is not None and file.media_type == "application/json":
        try:
            value = json.loads(file.text)
        except ValueError:
            value = None
        if value is not None:
            part = new_data_part(value, media_type="application/json")
            if file.name:
                part.filename = file.name
            return part
    if file.uri is not None:
        part = Part(url=file.uri)
    elif file.data is not None:
        part = Part(raw=file.data)
    else:
        part = Part(raw=(file.text or "").encode("utf-8"))
    if file.media_type:
        part.media_type = file.media_type
    if file.name:
        part.filename = file.name
    return part


class TaskPublisher:
    """Builds and enqueues the A2A events of one task.

    The task object itself goes out just before the first event (`release`); while a
    direct reply is possible, answer text is held instead of published."""

    def __init__(
        self,
        queue: EventQueue,
        task_id: str,
        context_id: str,
        root: Callable[[], Path | None] = lambda: None,
        *,
        task: Task | None = None,
        defer: bool = False,
    ) -> None:
        self.queue = queue
        self.root = root
        self.task_id = task_id
        self.context_id = context_id
        self.artifacts = TaskArtifacts()
        self.accepted_at = time.monotonic()
        self.first_event_at: float | None = None
        # Set when a final (or interrupted) state is published: for the log and metrics.
        self.final_state: str | None = None
        self.final_message: str | None = None
        self.report: dict[str, object] = {}
        self._task = task
        self.deferring = defer and task is not None
        self._held: list[str] = []
        self._lock = anyio.Lock()

    def _message(self, parts: Sequence[Part]) -> Message:
        return Message(
            message_id=uuid.uuid4().hex,
            context_id=self.context_id,
            task_id=self.task_id,
            role=Role.ROLE_AGENT,
            parts=parts,
        )

    async def _emit(self, event: Any) -> None:
        if self._task is not None:
            task, self._task = self._task, None
            await self.queue.enqueue_event(task)
        await self.queue.enqueue_event(event)

    async def release(self) -> None:
        """Stop holding back: publish the task, WORKING and the text held so far."""
        async with self._lock:
            await self._release()

    async def _release(self) -> None:
        if not self.deferring:
            return
        self.deferring = False
        await self._status(TaskState.TASK_STATE_WORKING)
        if self._held:
            text = "".join(self._held)
            self._held.clear()
            await self._answer_text(text)

    async def reply_directly(self) -> bool:
        """Answer with one Message holding the text, if nothing else was published."""
        async with self._lock:
            if not self.deferring or not self._held:
                return False
            self.deferring = False
            self._task = None
            self.final_state = "message"
            message = self._message([Part(text="".join(self._held))])
            message.ClearField("task_id")
            self._held.clear()
            await self.queue.enqueue_event(message)
            return True

    async def status(
        self,
        state: int,
        text: str | None = None,
        extra: Sequence[Part] = (),
        metadata: dict[str, Any] | None = None,
    ) -> None:
        async with self._lock:
            await self._release()
            await self._status(state, text, extra, metadata)

    async def _status(
        self,
        state: int,
        text: str | None = None,
        extra: Sequence[Part] = (),
        metadata: dict[str, Any] | None = None,
    ) -> None:
        if state in TERMINAL or state in INTERRUPTED:
            self.final_state = TaskState.Name(state).removeprefix("TASK_STATE_").lower()
            self.final_message = text
            # --- issue 14: every streamed artifact ends with an update holding it whole.
            for closing in self.artifacts.closing(self.task_id, self.context_id):
                await self._emit(closing)
        status = TaskStatus(state=state)  # type: ignore[arg-type]
        status.timestamp.GetCurrentTime()
        if text:
            text = relative_text(text, self.root())  # titles name paths under the root
        if text or extra:
            parts = [Part(text=text)] if text else []
            status.message.CopyFrom(self._message([*parts, *extra]))
        event = TaskStatusUpdateEvent(
            task_id=self.task_id, context_id=self.context_id, status=status
        )
        if metadata:
            event.metadata.update(metadata)
        await self._emit(event)

    async def _answer(self, parts: Sequence[Part]) -> None:
        answer = self.artifacts.get(ANSWER_ARTIFACT)
        await self._emit(answer.chunk(self.task_id, self.context_id, parts))

    async def _answer_text(self, text: str) -> None:
        answer = self.artifacts.get(ANSWER_ARTIFACT)
        await self._emit(answer.text_chunk(self.task_id, self.context_id, text))

    async def _change(self, change: ChangeMade) -> None:
        diff = change.diff
        shown = _display_path(diff.path, self.root())
        before = (diff.old_text or "").splitlines(keepends=True)
        after = diff.new_text.splitlines(keepends=True)
        unified = "".join(
            difflib.unified_diff(
                before,
                after,
                fromfile="/dev/null" if diff.old_text is None else f"a/{shown}",
                tofile=f"b/{shown}",
            )
        )
        part = Part(text=unified, media_type="text/x-diff", filename=shown)
        changes = self.artifacts.get(CHANGES_ARTIFACT)
        await self._emit(changes.chunk(self.task_id, self.context_id, [part]))

    async def publish(self, outputs: Sequence[Output]) -> None:
        async with self._lock:
            for output in outputs:
                kind = type(output)
                if kind is AnswerText:
                    assert isinstance(output, AnswerText)
                    if self.deferring:
                        self._held.append(output.text)
                        continue
                    await self._answer_text(output.text)
                    continue
                await self._release()
                if kind is StatusText:
                    assert isinstance(output, StatusText)
                    await self._status(TaskState.TASK_STATE_WORKING, output.text)
                elif kind is ChangeMade:
                    assert isinstance(output, ChangeMade)
                    await self._change(output)
                elif kind is AnswerFile:
                    assert isinstance(output, AnswerFile)
                    await self._answer([file_part(output.file)])
                elif kind is Question:
                    assert isinstance(output, Question)
                    await self._ask(output.question)

    async def _ask(self, question: QuestionAsked, problem: str | None = None) -> None:
        text = question.message if problem is None else f"{problem}. {question.message}"
        schema = new_data_part(dict(question.schema), media_type=SCHEMA_MEDIA_TYPE)
        await self._status(TaskState.TASK_STATE_INPUT_REQUIRED, text, [schema])

    async def ask(self, question: QuestionAsked, problem: str | None = None) -> None:
        async with self._lock:
            await self._release()
            await self._ask(question, problem)


class TaskRun:
    """The publishing side of one task's turn. It runs in the bridge's task group, so it
    outlives the execute() call that started it: a question pauses the request, not the
    turn. The turn's own state (ids, cancel, question, end, completion) is `turn`."""

    def __init__(
        self,
        executor: BridgeExecutor,
        publisher: TaskPublisher,
        turn: Turn,
        prompt: Sequence[PromptPart],
    ) -> None:
        self.executor = executor
        self.bridge = executor.bridge
        self.publisher = publisher
        self.turn = turn
        self.prompt = prompt
        self.progress = TurnProgress()
        # Set when the task waits for nothing from this request: its final state is
        # published, or its question is.
        self.paused = anyio.Event()

    async def on_events(self, batch: list[TurnEvent]) -> float | None:
        publisher = self.publisher
        if batch and publisher.first_event_at is None:
            publisher.first_event_at = time.monotonic()
            self.bridge.metrics.first_event(publisher.first_event_at - publisher.accepted_at)
        outputs = self.progress.feed(batch)
        if outputs:
            await self.publisher.publish(outputs)
            if any(type(output) is Question for output in outputs):
                self.paused.set()
        return HOLD_S if self.progress.holding else None

    async def drive(self) -> None:
        turn = self.turn
        with log_ids(task_id=turn.task_id, context_id=turn.context_id):
            try:
                await self._turn()
            except Exception as exc:
                # Nothing may escape: this runs in the bridge's task group.
                await self._fail(exc)
            finally:
                self.executor.runs.pop(turn.task_id, None)
                self.bridge.finish(turn)
                self.paused.set()

    async def _fail(self, exc: Exception) -> None:
        state, message = task_failure(
            exc,
            self.turn,
            root=self.bridge.root_of(self.turn.context_id),
            layout=self.bridge.layout,
        )
        try:
            with anyio.CancelScope(shield=True):
                await self.publisher.publish(self.progress.finish())
                await self.publisher.status(state, message)
        except Exception:
            logger.exception("could not publish the failure")

    async def _turn(self) -> None:
        turn = self.turn
        publisher = self.publisher
        progress = self.progress
        end = await self.bridge.run_turn(turn, self.prompt, self.on_events)
        await publisher.publish(progress.finish())
        session_id = turn.session_id or ""
        result = progress.outcome(
            end, cancel_reason=turn.cancel_reason, agent=self.bridge.agent_label
        )
        publisher.report = {
            "session_id": session_id,
            "stop_reason": end.stop_reason,
            "refusals": len(progress.refusals),
        }
        a2a_meta = end.meta.get("a2a")
        wants_message = isinstance(a2a_meta, dict) and a2a_meta.get("reply") == "message"
        if (
            wants_message
            and result.state is FinalState.COMPLETED
            and result.message is None
            and await publisher.reply_directly()
        ):
            return
        data = _relative(progress.summary(end, session_id=session_id), publisher.root())
        await publisher.status(
            OF_FINAL_STATE[result.state], result.message, metadata=report_metadata(data)
        )


class BridgeExecutor(AgentExecutor):
    """Runs each A2A task as one turn of the context's ACP session."""

    def __init__(self, bridge: Bridge) -> None:
        self.bridge = bridge
        self.runs: dict[str, TaskRun] = {}

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        assert context.task_id is not None
        task_id = context.task_id
        current = context.current_task
        # a2a-sdk 1.3.0 invents a fresh contextId for a follow-up naming only its taskId.
        context_id = current.context_id if current is not None else (context.context_id or "")
        principal = principal_of(context.call_context)
        with log_ids(task_id=task_id, context_id=context_id, principal=principal):
            logger.info(
                "task started", extra={"follow_up": current is not None, "principal": principal}
            )
            # The publisher, once there is one: the finally below runs also when the SDK
            # cancels this call (CancelTask) after the turn published CANCELED.
            found: list[TaskPublisher] = []
            try:
                await self._execute(context, event_queue, task_id, context_id, found)
            except InvalidParamsError as exc:
                logger.info("task refused", extra={"reason": exc.message})
                raise
            finally:
                if found:
                    self._finished(found[0])

    def _finished(self, publisher: TaskPublisher) -> None:
        """One log line and the metrics for a task that reached a final (or interrupted)
        state; a question answered later counts again when the task ends."""
        if publisher.final_state is None:
            return
        state, publisher.final_state = publisher.final_state, None
        duration = time.monotonic() - publisher.accepted_at
        self.bridge.metrics.task_finished(state, duration)
        fields: dict[str, object] = {"state": state, "duration_s": round(duration, 3)}
        fields.update(publisher.report)
        if state not in ("completed", "message") and publisher.final_message:
            fields["reason"] = publisher.final_message
        logger.info("task finished", extra=fields)

    async def _execute(
        self,
        context: RequestContext,
        event_queue: EventQueue,
        task_id: str,
        context_id: str,
        found: list[TaskPublisher],
    ) -> None:
        message = context.message
        assert message is not None
        current = context.current_task
        ids = {"taskId": task_id, "contextId": context_id, "messageId": message.message_id}

        run = self.runs.get(task_id)
        if run is not None and run.turn.question is not None:
            found.append(run.publisher)
            await self._answer(run, message, event_queue, ids)
            return

        try:
            prompt = parsed_prompt(context.call_context.state, message)
        except Exception as exc:
            raise request_error(exc, "SendMessage") from None
        if logger.isEnabledFor(logging.DEBUG):
            logger.debug("task prompt", extra={"prompt": [_loggable(part) for part in prompt]})
        task = None
        if current is None:
            task = Task(id=task_id, context_id=context_id, history=[message])
            task.status.state = TaskState.TASK_STATE_SUBMITTED
            task.status.timestamp.GetCurrentTime()
        principal = principal_of(context.call_context)
        key = conversation_key(principal, context_id)
        publisher = TaskPublisher(
            event_queue,
            task_id,
            context_id,
            lambda: self.bridge.root_of(key),
            task=task,
            # Held back only for an agent that may answer with a message (unknown before
            # the first adapter starts): any other task is visible from this moment on.
            defer=bool(prompt)
            and self.bridge.direct_replies is not False
            and _may_reply_directly(context),
        )
        found.append(publisher)
        if not prompt:
            await publisher.status(
                TaskState.TASK_STATE_INPUT_REQUIRED,
                "Nothing in this message can be given to the agent: send the task as text, "
                "in this same task.",
            )
            return
        # Registered before the task is visible, so a CancelTask always finds it.
        turn = self.bridge.accept(
            task_id, context_id, message.message_id or None, principal=principal
        )
        self.bridge.metrics.task_accepted(principal)
        run = TaskRun(self, publisher, turn, prompt)
        self.runs[task_id] = run
        if not publisher.deferring:
            await publisher.status(TaskState.TASK_STATE_WORKING)
        self.bridge.spawn(run.drive)
        if publisher.deferring:
            with anyio.move_on_after(DIRECT_REPLY_WINDOW_S):
                await run.paused.wait()
            if not run.paused.is_set():
                await publisher.release()
        await run.paused.wait()

    async def _answer(
        self, run: TaskRun, message: Message, queue: EventQueue, ids: dict[str, str]
    ) -> None:
        """The caller's message answers the agent's pending question."""
        pending = run.turn.question
        assert pending is not None
        question = pending.asked
        run.publisher.queue = queue
        reply = reply_from_message(message, question, ids)
        if isinstance(reply, str):
            await run.publisher.ask(question, reply[:1].upper() + reply[1:])
            return
        run.paused = anyio.Event()
        # The status update is what puts the caller's message into the task's history.
        await run.publisher.status(TaskState.TASK_STATE_WORKING)
        if not run.turn.answer(question.question_id, reply):
            logger.warning("answer for a question no longer pending")
        await run.paused.wait()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        task_id = context.task_id
        if task_id is None:
            return
        run = self.runs.get(task_id)
        if run is not None:
            run.publisher.queue = event_queue
        turn = self.bridge.turn(task_id)
        await self.bridge.cancel(task_id)
        if turn is not None:
            # The turn publishes CANCELED itself, so streaming subscribers see it.
            with anyio.move_on_after(CANCEL_WAIT_S):
                await turn.done.wait()
            if turn.done.is_set():
                return
        current = context.current_task
        context_id = current.context_id if current is not None else (context.context_id or "")
        publisher = TaskPublisher(event_queue, task_id, context_id)
        await publisher.status(TaskState.TASK_STATE_CANCELED, CALLER_CANCEL_REASON)


def _may_reply_directly(context: RequestContext) -> bool:
    """Only a caller that blocks for the result, with no webhook, can get a Message."""
    config = context.configuration
    if config is not None and (
        config.return_immediately or config.HasField("task_push_notification_config")
    ):
        return False
    call = context.call_context
    state = call.state if call is not None else {}
    return state.get("method") not in STREAMING_METHODS and not state.get("rest_stream", False)


def _loggable(part: PromptPart) -> str:
    """A prompt part for the DEBUG log: text as it is, files by name and size only."""
    if isinstance(part, TextPart):
        return part.text
    if isinstance(part, BlobPart):
        return f"<file {part.name or ''} {part.media_type}, {len(part.data)} bytes>"
    if isinstance(part, LinkPart):
        return f"<link {part.uri}>"
    return part.as_text()


def _relative(value: Any, root: Path | None) -> Any:
    """The report with the root's absolute path written relative to it in every text."""
    if isinstance(value, str):
        return relative_text(value, root)
    if isinstance(value, dict):
        return {key: _relative(item, root) for key, item in value.items()}
    if isinstance(value, list):
        return [_relative(item, root) for item in value]
    return value


def _display_path(path: str, root: Path | None) -> str:
    """A path relative to the working directory when it lies inside it."""
    if root is not None:
        try:
            return str(Path(path).relative_to(root))
        except ValueError:
            pass
    return path
