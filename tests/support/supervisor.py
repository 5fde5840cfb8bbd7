"""A test supervisor implementing the decision seam's `Supervisor` protocol (decision.py)."""

from __future__ import annotations

from typing import Any

import anyio

from a2a_acp_bridge.decision import Answer, Question


class ScriptedSupervisor:
    """A supervisor that answers what it is told, raises, hangs, or waits for `release`."""

    def __init__(self, reply: Any = None, *, hang: bool = False, fail: bool = False) -> None:
        self.name = "test-supervisor"
        self.reply = reply
        self.hang = hang
        self.fail = fail
        self.questions: list[Question] = []
        self.asked = anyio.Event()
        self.release = anyio.Event()
        self.cancelled = False

    async def ask(self, question: Question) -> Answer:
        self.questions.append(question)
        self.asked.set()
        try:
            if self.hang:
                await anyio.sleep_forever()
            if self.fail:
                raise RuntimeError("the supervisor broke")
            if self.reply is None:
                await self.release.wait()
                return Answer("allow", "released", "console")
            result: Answer = self.reply
            return result
        except anyio.get_cancelled_exc_class():
            self.cancelled = True
            raise
