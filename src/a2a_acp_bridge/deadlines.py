"""The deadlines of one running turn, as a pure clock: given the time and what happened,
what is due next.

Five bounds apply while the agent works on a prompt:

- silence (ACP_SILENCE_TIMEOUT_MS): no update from the agent for this long fails the turn;
- the hard cap (ACP_TURN_TIMEOUT_MS, optional): the whole turn, whatever it streams;
- the cancel grace (ACP_CANCEL_GRACE_MS): after session/cancel, the agent gets this long to
  end its turn before the bridge stops it;
- the question wait (A2A_QUESTION_TIMEOUT_MS): a question to the caller is declined after
  this long; while it waits, silence and the cancel grace are suspended (the agent waits for
  the caller, not the other way round), and both count again from the answer;
- a decision waiting for a supervisor (decisions.py, bounded by ACP_DECISION_TIMEOUT_MS
  there): silence is suspended meanwhile, and counts again from its verdict;
- the coalescing tick: answer text held back to be sent in larger pieces goes out when its
  hold expires, even if nothing else arrives.

No I/O and no awaiting here: the turn's loop (acp/session.py) feeds the facts and sleeps
for `Next.in_s` when nothing is due.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass


class Due(enum.Enum):
    WAIT = "wait"  # nothing is due: sleep `in_s` (or until something happens)
    TICK = "tick"  # held answer text goes out
    QUESTION = "question"  # the question waited too long: decline it for the caller
    CANCEL_GRACE = "cancel-grace"  # the agent ignored session/cancel: stop it
    HARD_CAP = "hard-cap"  # the turn ran longer than its cap
    SILENCE = "silence"  # the agent has been silent too long


@dataclass(frozen=True)
class Next:
    due: Due
    in_s: float = 0.0


@dataclass
class TurnDeadlines:
    """What is due next in one turn; every time is on one monotonic clock, in seconds."""

    started: float
    silence_s: float
    cancel_grace_s: float
    question_s: float
    hard_cap_s: float | None = None
    _tick_at: float | None = None
    _interrupted_at: float | None = None
    _question_since: float | None = None
    _decision_since: float | None = None
    # When the last question was answered: silence and the cancel grace count from here.
    _resumed_at: float = -math.inf

    def hold(self, now: float, seconds: float | None) -> None:
        """Text is held back for `seconds` (None: nothing is held)."""
        self._tick_at = None if seconds is None else now + seconds

    def interrupted(self, now: float) -> None:
        """session/cancel was sent (the first time counts)."""
        if self._interrupted_at is None:
            self._interrupted_at = now

    def question(self, asked_at: float | None, now: float) -> None:
        """The pending question's time of asking, or None when none waits."""
        if asked_at is None and self._question_since is not None:
            self._resumed_at = now
        self._question_since = asked_at

    def decision(self, since: float | None, now: float) -> None:
        """When the oldest decision waiting for a supervisor began, or None when none waits."""
        if since is None and self._decision_since is not None:
            self._resumed_at = max(self._resumed_at, now)
        self._decision_since = since

    def next(self, now: float, last_activity: float) -> Next:
        """What is due at `now`, in order of precedence; else how long until something is."""
        waits: list[float] = []

        def due_at(at: float) -> bool:
            if now >= at:
                return True
            waits.append(at - now)
            return False

        waiting_for_caller = self._question_since is not None
        if self._tick_at is not None and due_at(self._tick_at):
            return Next(Due.TICK)
        if self._question_since is not None and due_at(self._question_since + self.question_s):
            return Next(Due.QUESTION)
        if (
            not waiting_for_caller
            and self._interrupted_at is not None
            and due_at(max(self._interrupted_at, self._resumed_at) + self.cancel_grace_s)
        ):
            return Next(Due.CANCEL_GRACE)
        if self.hard_cap_s is not None and due_at(self.started + self.hard_cap_s):
            return Next(Due.HARD_CAP)
        waiting = waiting_for_caller or self._decision_since is not None
        if not waiting and due_at(max(last_activity, self._resumed_at) + self.silence_s):
            return Next(Due.SILENCE)
        return Next(Due.WAIT, min(waits) if waits else math.inf)

    def silent_for(self, now: float, last_activity: float) -> float:
        return now - max(last_activity, self._resumed_at)
