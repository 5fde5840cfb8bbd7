"""The turn's deadlines as a pure clock: every case on a made-up timeline, no process, no sleep."""

from __future__ import annotations

import math

import pytest

from a2a_acp_bridge.deadlines import Due, Next, TurnDeadlines


def deadlines(*, hard_cap_s: float | None = None) -> TurnDeadlines:
    return TurnDeadlines(
        started=100.0, silence_s=10.0, cancel_grace_s=5.0, question_s=60.0, hard_cap_s=hard_cap_s
    )


def test_nothing_is_due_before_the_silence_limit_and_the_wait_ends_there() -> None:
    clock = deadlines()
    assert clock.next(103.0, last_activity=100.0) == Next(Due.WAIT, 7.0)


def test_every_update_pushes_the_silence_limit_back() -> None:
    clock = deadlines()
    assert clock.next(115.0, last_activity=108.0) == Next(Due.WAIT, 3.0)
    assert clock.next(118.0, last_activity=108.0).due is Due.SILENCE


def test_silence_is_due_exactly_at_the_limit() -> None:
    assert deadlines().next(110.0, last_activity=100.0).due is Due.SILENCE


def test_the_hard_cap_ends_a_turn_that_keeps_streaming() -> None:
    clock = deadlines(hard_cap_s=30.0)
    assert clock.next(129.0, last_activity=128.9).due is Due.WAIT
    assert clock.next(130.0, last_activity=129.9).due is Due.HARD_CAP


def test_the_hard_cap_wins_over_silence_when_both_are_due() -> None:
    clock = deadlines(hard_cap_s=10.0)
    assert clock.next(110.0, last_activity=100.0).due is Due.HARD_CAP


def test_held_text_goes_out_when_its_hold_expires_before_anything_else() -> None:
    clock = deadlines()
    clock.hold(101.0, 0.05)
    step = clock.next(101.02, last_activity=101.0)
    assert step.due is Due.WAIT
    assert step.in_s == pytest.approx(0.03)
    assert clock.next(101.05, last_activity=101.0).due is Due.TICK
    clock.hold(101.05, None)
    step = clock.next(101.05, last_activity=101.0)
    assert step.due is Due.WAIT
    assert step.in_s == pytest.approx(9.95)


def test_the_tick_comes_first_even_when_silence_is_also_due() -> None:
    clock = deadlines()
    clock.hold(105.0, 0.05)
    assert clock.next(111.0, last_activity=100.0).due is Due.TICK


def test_after_session_cancel_the_agent_gets_its_grace_then_is_stopped() -> None:
    clock = deadlines()
    clock.interrupted(102.0)
    assert clock.next(106.0, last_activity=106.0) == Next(Due.WAIT, 1.0)
    assert clock.next(107.0, last_activity=106.5).due is Due.CANCEL_GRACE


def test_the_cancel_grace_counts_from_the_first_cancel_only() -> None:
    clock = deadlines()
    clock.interrupted(102.0)
    clock.interrupted(106.0)
    assert clock.next(107.0, last_activity=106.9).due is Due.CANCEL_GRACE


def test_the_cancel_grace_wins_over_silence() -> None:
    clock = deadlines()
    clock.interrupted(100.0)
    assert clock.next(111.0, last_activity=100.0).due is Due.CANCEL_GRACE


def test_a_question_suspends_silence_and_has_its_own_bound() -> None:
    clock = deadlines()
    clock.question(101.0, 101.0)
    # Long past the silence limit, the agent waits for the caller: nothing is due.
    assert clock.next(150.0, last_activity=101.0) == Next(Due.WAIT, 11.0)
    assert clock.next(161.0, last_activity=101.0).due is Due.QUESTION


def test_silence_counts_again_from_the_answer_not_from_the_last_update() -> None:
    clock = deadlines()
    clock.question(101.0, 101.0)
    clock.question(None, 140.0)  # answered at 140
    assert clock.next(145.0, last_activity=101.0) == Next(Due.WAIT, 5.0)
    assert clock.next(150.0, last_activity=101.0).due is Due.SILENCE


def test_a_question_suspends_the_cancel_grace_until_it_is_declined() -> None:
    clock = deadlines()
    clock.interrupted(100.0)
    clock.question(100.0, 100.0)
    assert clock.next(120.0, last_activity=100.0).due is Due.WAIT
    clock.question(None, 120.0)
    assert clock.next(124.0, last_activity=100.0).due is Due.WAIT
    assert clock.next(125.0, last_activity=100.0).due is Due.CANCEL_GRACE


def test_the_hard_cap_still_applies_while_a_question_waits() -> None:
    clock = deadlines(hard_cap_s=20.0)
    clock.question(101.0, 101.0)
    assert clock.next(120.0, last_activity=101.0).due is Due.HARD_CAP


def test_with_nothing_bounding_the_wait_it_is_unbounded() -> None:
    clock = TurnDeadlines(started=0.0, silence_s=math.inf, cancel_grace_s=5.0, question_s=60.0)
    assert clock.next(1e9, last_activity=0.0) == Next(Due.WAIT, math.inf)


def test_silent_for_measures_from_the_later_of_the_update_and_the_answer() -> None:
    clock = deadlines()
    assert clock.silent_for(107.0, last_activity=104.0) == 3.0
    clock.question(104.0, 104.0)
    clock.question(None, 106.0)
    assert clock.silent_for(107.0, last_activity=104.0) == 1.0
