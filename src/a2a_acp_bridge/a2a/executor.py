"""The AgentExecutor: one A2A task is one ACP turn.

`execute` publishes the task first (with the caller's message in its history), waits for
the conversation's turn on the bridge, and streams what the agent does: answer text as
chunks of one `answer` artifact, thinking, tool calls, plans and refusals as WORKING
status messages, completed file edits in a `changes` artifact. The last chunk of the
answer artifact carries a data part with the stop reason, usage, tool calls and every
refusal; then the terminal status.

`cancel` asks the bridge to cancel (session/cancel on a running turn, nothing sent for a
queued one) and waits, bounded, for `execute` to publish CANCELED itself, so streaming
subscribers see the terminal state.
"""

from __future__ import annotations

import difflib
import logging
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path

from a2a.helpers.proto_helpers import new_data_part
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.types.a2a_pb2 import (
    Artifact,
    Message,
    Part,
    Role,
    Task,
    TaskArtifactUpdateEvent,
    TaskState,
    TaskStatus,
    TaskStatusUpdateEvent,
)
from a2a.utils.errors import InvalidParamsError

from a2a_acp_bridge.a2a.input import InputProblem, prompt_from_message
from a2a_acp_bridge.acp.prompt import UnsupportedInputError
from a2a_acp_bridge.bridge import Bridge, TurnCancelled
from a2a_acp_bridge.errors import AdapterError, CapacityError
from a2a_acp_bridge.events import TurnEvent
from a2a_acp_bridge.logs import log_ids
from a2a_acp_bridge.progress import (
    HOLD_S,
    AnswerText,
    ChangeMade,
    FinalState,
    Output,
    StatusText,
    TurnProgress,
)

logger = logging.getLogger(__name__)

ANSWER_ARTIFACT = "answer"
CHANGES_ARTIFACT = "changes"
# How long CancelTask waits for the turn to end and publish CANCELED itself; the bridge
# gives the agent CANCEL_GRACE_S and then stops it, so this is a backstop.
CANCEL_WAIT_S = 15.0

_STATES = {
    FinalState.COMPLETED: TaskState.TASK_STATE_COMPLETED,
    FinalState.CANCELED: TaskState.TASK_STATE_CANCELED,
    FinalState.REJECTED: TaskState.TASK_STATE_REJECTED,
    FinalState.FAILED: TaskState.TASK_STATE_FAILED,
}

# States after which the task waits for nothing from the agent (INPUT_REQUIRED waits for
# the caller).
_FINAL_STATES = {*_STATES.values(), TaskState.TASK_STATE_INPUT_REQUIRED}


class TaskPublisher:
    """Builds and enqueues the A2A events of one task."""

    def __init__(
        self,
        queue: EventQueue,
        task_id: str,
        context_id: str,
        root: Callable[[], Path | None] = lambda: None,
    ) -> None:
        self.queue = queue
        self.root = root
        self.task_id = task_id
        self.context_id = context_id
        self.answer_started = False
        self.changes_started = False
        self.accepted_at = time.monotonic()
        self.first_event_at: float | None = None
        # Set when a final (or interrupted) state is published: for the log and metrics.
        self.final_state: str | None = None
        self.final_message: str | None = None
        self.report: dict[str, object] = {}

    def _message(self, text: str) -> Message:
        return Message(
            message_id=uuid.uuid4().hex,
            context_id=self.context_id,
            task_id=self.task_id,
            role=Role.ROLE_AGENT,
            parts=[Part(text=text)],
        )

    async def status(self, state: int, text: str | None = None) -> None:
        if state in _FINAL_STATES:
            self.final_state = TaskState.Name(state).removeprefix("TASK_STATE_").lower()
            self.final_message = text
        status = TaskStatus(state=state)  # type: ignore[arg-type]
        status.timestamp.GetCurrentTime()
        if text:
            status.message.CopyFrom(self._message(text))
        await self.queue.enqueue_event(
            TaskStatusUpdateEvent(task_id=self.task_id, context_id=self.context_id, status=status)
        )

    async def answer(self, parts: Sequence[Part], *, last: bool = False) -> None:
        artifact = Artifact(artifact_id=ANSWER_ARTIFACT, parts=parts)
        if not self.answer_started:
            artifact.name = "answer"
            artifact.description = "The agent's answer; the last chunk carries the turn's report"
        await self.queue.enqueue_event(
            TaskArtifactUpdateEvent(
                task_id=self.task_id,
                context_id=self.context_id,
                artifact=artifact,
                append=self.answer_started,
                last_chunk=last,
            )
        )
        self.answer_started = True

    async def change(self, change: ChangeMade) -> None:
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
        artifact = Artifact(
            artifact_id=CHANGES_ARTIFACT,
            parts=[Part(text=unified, media_type="text/x-diff", filename=shown)],
        )
        if not self.changes_started:
            artifact.name = "changes"
            artifact.description = "File edits the agent completed, as unified diffs"
        await self.queue.enqueue_event(
            TaskArtifactUpdateEvent(
                task_id=self.task_id,
                context_id=self.context_id,
                artifact=artifact,
                append=self.changes_started,
            )
        )
        self.changes_started = True

    async def publish(self, outputs: Sequence[Output]) -> None:
        for output in outputs:
            kind = type(output)
            if kind is AnswerText:
                assert isinstance(output, AnswerText)
                await self.answer([Part(text=output.text)])
            elif kind is StatusText:
                assert isinstance(output, StatusText)
                await self.status(TaskState.TASK_STATE_WORKING, output.text)
            elif kind is ChangeMade:
                assert isinstance(output, ChangeMade)
                await self.change(output)


class BridgeExecutor(AgentExecutor):
    """Runs each A2A task as one turn of the context's ACP session."""

    def __init__(self, bridge: Bridge) -> None:
        self.bridge = bridge

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        assert context.task_id is not None
        task_id = context.task_id
        current = context.current_task
        # a2a-sdk 1.3.0 invents a fresh contextId for a follow-up naming only its taskId.
        context_id = current.context_id if current is not None else (context.context_id or "")
        publisher = TaskPublisher(
            event_queue, task_id, context_id, lambda: self.bridge.root_of(context_id)
        )
        with log_ids(task_id=task_id, context_id=context_id):
            logger.info("task started", extra={"follow_up": current is not None})
            try:
                await self._execute(context, publisher)
            except InvalidParamsError as exc:
                logger.info("task refused", extra={"reason": exc.message})
                raise
            finally:
                self._finished(publisher)

    def _finished(self, publisher: TaskPublisher) -> None:
        """One log line and the metrics for a task that reached its final state."""
        state = publisher.final_state
        if state is None:
            return
        duration = time.monotonic() - publisher.accepted_at
        self.bridge.metrics.task_finished(state, duration)
        fields: dict[str, object] = {"state": state, "duration_s": round(duration, 3)}
        fields.update(publisher.report)
        if state != "completed" and publisher.final_message:
            fields["reason"] = publisher.final_message
        logger.info("task finished", extra=fields)

    async def _execute(self, context: RequestContext, publisher: TaskPublisher) -> None:
        message = context.message
        assert message is not None
        task_id, context_id = publisher.task_id, publisher.context_id
        event_queue = publisher.queue
        current = context.current_task
        try:
            prompt = prompt_from_message(message)
        except InputProblem as problem:
            raise InvalidParamsError(message=str(problem)) from None
        if logger.isEnabledFor(logging.DEBUG):
            logger.debug("task prompt", extra={"prompt": [str(part) for part in prompt]})
        # Registered before the task is visible, so a CancelTask always finds it.
        ticket = (
            self.bridge.ticket(task_id, context_id, message.message_id or None) if prompt else None
        )
        if current is None:
            task = Task(id=task_id, context_id=context_id, history=[message])
            task.status.state = TaskState.TASK_STATE_SUBMITTED
            task.status.timestamp.GetCurrentTime()
            await event_queue.enqueue_event(task)
        if ticket is None:
            await publisher.status(
                TaskState.TASK_STATE_INPUT_REQUIRED,
                "Nothing in this message can be given to the agent: send the task as text, "
                "in this same task.",
            )
            return
        await publisher.status(TaskState.TASK_STATE_WORKING)
        progress = TurnProgress()
        metrics = self.bridge.metrics

        async def on_events(batch: list[TurnEvent]) -> float | None:
            if batch and publisher.first_event_at is None:
                publisher.first_event_at = time.monotonic()
                metrics.first_event(publisher.first_event_at - publisher.accepted_at)
            await publisher.publish(progress.feed(batch))
            return HOLD_S if progress.holding else None

        try:
            outcome = await self.bridge.run_turn(ticket, prompt, on_events)
        except TurnCancelled:
            await publisher.publish(progress.finish())
            await publisher.status(TaskState.TASK_STATE_CANCELED, ticket.cancel_reason)
            return
        except CapacityError as exc:
            # A cap is reached: said at once, never queued silently (docs/operations.md).
            await publisher.status(TaskState.TASK_STATE_REJECTED, str(exc))
            return
        except UnsupportedInputError as exc:
            await publisher.status(TaskState.TASK_STATE_FAILED, str(exc))
            return
        except AdapterError as exc:
            await publisher.publish(progress.finish())
            if ticket.cancel_requested:
                await publisher.status(TaskState.TASK_STATE_CANCELED, ticket.cancel_reason)
            else:
                await publisher.status(TaskState.TASK_STATE_FAILED, str(exc))
            return
        except Exception:
            logger.exception("task failed unexpectedly")
            await publisher.publish(progress.finish())
            await publisher.status(
                TaskState.TASK_STATE_FAILED, "The bridge failed unexpectedly (see its log)."
            )
            return
        await publisher.publish(progress.finish())
        end = outcome.end
        session_id = ticket.session_id or ""
        data = progress.summary(end, session_id=session_id)
        await publisher.answer([new_data_part(data, media_type="application/json")], last=True)
        cancelled = ticket.cancel_requested or outcome.cancelled_by_bridge
        result = progress.outcome(
            end,
            cancel_reason=ticket.cancel_reason if cancelled else None,
            agent=self.bridge.agent_label,
        )
        publisher.report = {
            "session_id": session_id,
            "stop_reason": end.stop_reason,
            "refusals": len(progress.refusals),
        }
        await publisher.status(_STATES[result.state], result.message)

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        task_id = context.task_id
        if task_id is None:
            return
        known = await self.bridge.cancel(task_id)
        if known and await self.bridge.wait_done(task_id, CANCEL_WAIT_S):
            return
        current = context.current_task
        context_id = current.context_id if current is not None else (context.context_id or "")
        publisher = TaskPublisher(event_queue, task_id, context_id)
        await publisher.status(TaskState.TASK_STATE_CANCELED, "Cancelled at the caller's request.")


def _display_path(path: str, root: Path | None) -> str:
    """A path relative to the working directory when it lies inside it."""
    if root is not None:
        try:
            return str(Path(path).relative_to(root))
        except ValueError:
            pass
    return path
