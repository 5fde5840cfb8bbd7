"""One task's Turn and one conversation's TurnQueue, without any process."""

from __future__ import annotations

import anyio
import pytest

from a2a_acp_bridge.events import QuestionAsked, QuestionReply
from a2a_acp_bridge.turn import CALLER_CANCEL_REASON, Phase, Turn, TurnCancelled
from a2a_acp_bridge.turn_queue import TurnQueue

pytestmark = pytest.mark.anyio

QUESTION = QuestionAsked("q1", "Which file?", {"type": "object", "properties": {}})


def test_the_first_cancel_reason_stays() -> None:
    turn = Turn("t", "c")
    assert turn.request_cancel("Cancelled: the bridge is shutting down.")
    assert not turn.request_cancel("another reason")
    assert turn.cancelled
    assert turn.cancel_reason == "Cancelled: the bridge is shutting down."


def test_a_cancel_without_a_reason_is_the_callers() -> None:
    turn = Turn("t", "c")
    turn.request_cancel()
    assert turn.cancel_reason == CALLER_CANCEL_REASON


def test_an_interrupted_turn_is_not_a_cancelled_task() -> None:
    # The bridge's own session/cancel (a deadline) fails the task; it is not the caller's cancel.
    turn = Turn("t", "c")
    assert turn.interrupt()
    assert not turn.interrupt()
    assert turn.interrupted
    assert not turn.cancelled


async def test_the_callers_answer_reaches_the_waiting_question() -> None:
    turn = Turn("t", "c")
    pending = turn.ask(QUESTION)
    assert not turn.answer("other-question", QuestionReply("accept", {"a": 1}))
    assert turn.answer("q1", QuestionReply("accept", {"a": 1}))
    assert not turn.answer("q1", QuestionReply("decline"))  # answered once
    with anyio.fail_after(1):
        reply = await pending.wait()
    assert reply == QuestionReply("accept", {"a": 1})
    turn.question_settled(pending)
    assert turn.question is None


async def test_interrupting_the_turn_declines_its_question() -> None:
    turn = Turn("t", "c")
    pending = turn.ask(QUESTION)
    turn.interrupt()
    with anyio.fail_after(1):
        assert (await pending.wait()).action == "decline"


async def test_a_question_asked_after_the_interrupt_is_declined_at_once() -> None:
    turn = Turn("t", "c")
    turn.interrupt()
    with anyio.fail_after(1):
        assert (await turn.ask(QUESTION).wait()).action == "decline"


def test_finishing_sets_done_and_ends_the_phase() -> None:
    turn = Turn("t", "c")
    turn.phase = Phase.RUNNING
    assert turn.running
    turn.finish()
    assert turn.done.is_set()
    assert turn.phase is Phase.ENDED
    assert not turn.running


async def test_turns_of_one_conversation_run_in_arrival_order() -> None:
    queue = TurnQueue(max_waiting=5)
    first, second, third = Turn("1", "c"), Turn("2", "c"), Turn("3", "c")
    assert [queue.join(t) for t in (first, second, third)] == [0, 1, 2]
    order: list[str] = []

    async def run(turn: Turn) -> None:
        await queue.wait_for(turn)
        order.append(turn.task_id)
        queue.leave(turn)

    with anyio.fail_after(2):
        async with anyio.create_task_group() as group:
            group.start_soon(run, third)
            group.start_soon(run, second)
            group.start_soon(run, first)
    assert order == ["1", "2", "3"]


async def test_a_cancelled_queued_turn_leaves_without_touching_the_running_one() -> None:
    queue = TurnQueue(max_waiting=5)
    running, queued = Turn("1", "c"), Turn("2", "c")
    queue.join(running)
    queue.join(queued)
    queued.request_cancel()
    with anyio.fail_after(1), pytest.raises(TurnCancelled):
        await queue.wait_for(queued)
    queue.leave(queued)
    assert not running.cancelled
    assert len(queue) == 1


def test_the_queue_is_full_past_its_waiting_room() -> None:
    queue = TurnQueue(max_waiting=1)
    queue.join(Turn("running", "c"))
    assert not queue.full
    queue.join(Turn("waiting", "c"))
    assert queue.full
