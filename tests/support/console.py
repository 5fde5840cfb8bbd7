"""The console for tests: a bridge serving /console for real, and questions parked in it."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import anyio.abc

from a2a_acp_bridge.console import ConsoleSupervisor
from a2a_acp_bridge.decision import Answer, Question
from a2a_acp_bridge.supervisors import find_console
from tests.support.server import RunningBridge, make_settings, serve_bridge

A2A_TOKEN = "a2a-caller-token-" + "a" * 24
CONSOLE_TOKEN = "operator-console-" + "c" * 24
# How long a test waits for the console to show a question, or for an answer to arrive.
CONSOLE_WAIT_S = 20.0


@dataclass
class ConsoleBridge:
    running: RunningBridge
    console: ConsoleSupervisor
    group: anyio.abc.TaskGroup
    answers: dict[str, Answer] = field(default_factory=dict)
    answered: anyio.Event = field(default_factory=anyio.Event)

    @property
    def url(self) -> str:
        return self.running.url

    def park(self, question: Question) -> None:
        """Ask the console `question` in the background; its answer lands in `answers`."""

        async def ask() -> None:
            self.answers[question.id] = await self.console.ask(question)
            self.answered.set()
            self.answered = anyio.Event()

        self.group.start_soon(ask)

    async def until_waiting(self, count: int) -> list[dict[str, Any]]:
        with anyio.fail_after(CONSOLE_WAIT_S):
            while len(self.console.waiting()) < count:
                await self.console.changed(self.console.version)
        return self.console.waiting()

    async def answer_of(self, question_id: str) -> Answer:
        with anyio.fail_after(CONSOLE_WAIT_S):
            while question_id not in self.answers:
                await self.answered.wait()
        return self.answers[question_id]


@contextlib.asynccontextmanager
async def serve_console(tmp_path: Path, **env: str) -> AsyncIterator[ConsoleBridge]:
    settings = make_settings(
        tmp_path,
        {
            "ACP_SUPERVISOR": "console",
            "ACP_CONSOLE_TOKEN": CONSOLE_TOKEN,
            "A2A_TOKEN": A2A_TOKEN,
            **env,
        },
    )
    async with serve_bridge(settings) as running, anyio.create_task_group() as group:
        console = find_console(running.app.state.supervisor)
        assert console is not None
        try:
            yield ConsoleBridge(running, console, group)
        finally:
            group.cancel_scope.cancel()
