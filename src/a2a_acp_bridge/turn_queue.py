"""One conversation's turns: one at a time, in the order their messages arrived.

A second message while a turn runs is queued as its own task, behind it; cancelling a
queued task never touches the running one. At most ACP_MAX_QUEUED_TASKS wait behind the
running turn: the bridge refuses the next one at once (never queues silently).
"""

from __future__ import annotations

import contextlib
from collections import deque

from a2a_acp_bridge.turn import Turn, TurnCancelled


class TurnQueue:
    """The turns of one conversation; the first one runs."""

    def __init__(self, max_waiting: int) -> None:
        self._turns: deque[Turn] = deque()
        self.max_waiting = max_waiting

    def __len__(self) -> int:
        return len(self._turns)

    @property
    def full(self) -> bool:
        """No room for one more behind the running turn and those already waiting."""
        return len(self._turns) > self.max_waiting

    def join(self, turn: Turn) -> int:
        """Queue `turn` at the back; the number of turns ahead of it."""
        self._turns.append(turn)
        return len(self._turns) - 1

    async def wait_for(self, turn: Turn) -> None:
        """Return when `turn` is at the front; TurnCancelled when it is cancelled first."""
        while self._turns[0] is not turn and not turn.cancelled:
            await turn.wait_wake()
        if turn.cancelled:
            raise TurnCancelled
        turn.rearm()

    def leave(self, turn: Turn) -> None:
        """Take `turn` out (it ran, or it was cancelled) and wake the one now in front."""
        with contextlib.suppress(ValueError):
            self._turns.remove(turn)
        if self._turns:
            self._turns[0].wake()
