"""What the agent does while no turn of its session runs belongs to no task, and is never
allowed: a permission request then is answered `cancelled`, logged without any task's ids,
and never reported in the previous or the next task."""

from __future__ import annotations

import logging
from pathlib import Path

import anyio
import httpx
import pytest

from tests.support.agents import CLAUDE_INFO, CLAUDE_MODES, CLAUDE_OPTIONS, scripted_agent
from tests.support.server import make_settings, serve_bridge
from tests.support.wire import answer_report, send, status_text

pytestmark = pytest.mark.anyio

LATE_S = 0.3
# How long the test waits for the late request to be answered.
ANSWER_WAIT_S = 10.0


def late_write(name: str) -> dict[str, object]:
    """An edit inside the sandbox, which a turn would allow, asked after the turn ended."""
    return {
        "op": "permission",
        "tool_call": {
            "toolCallId": "late-1",
            "title": f"Write {name}",
            "kind": "edit",
            "locations": [{"path": "{CWD}/" + name}],
            "rawInput": {"file_path": "{CWD}/" + name, "content": "late"},
        },
        "options": CLAUDE_OPTIONS,
        "act": {"write": "{CWD}/" + name, "text": "late"},
    }


class Awaited(logging.Handler):
    """Sets an event when a record with the given message is logged."""

    def __init__(self, message: str) -> None:
        super().__init__()
        self.message = message
        self.seen = anyio.Event()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.getMessage() == self.message:
            self.records.append(record)
            self.seen.set()


def late_files(parent: Path) -> list[Path]:
    return list(parent.glob("*/late.txt"))


async def test_a_permission_request_between_turns_is_cancelled_and_reaches_no_task(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    script = {
        "agent_info": CLAUDE_INFO,
        "modes": {**CLAUDE_MODES, "current": "default"},
        "turns": [
            [
                {"op": "say", "text": "first turn\n"},
                {"op": "after", "delay": LATE_S, "steps": [late_write("late.txt")]},
            ],
            [{"op": "say", "text": "second turn\n"}],
        ],
    }
    settings = make_settings(tmp_path, {"ACP_AGENT": scripted_agent(tmp_path, script)})
    caplog.set_level(logging.INFO, logger="a2a_acp_bridge")
    late = Awaited("permission request while no turn runs answered cancelled")
    logging.getLogger("a2a_acp_bridge").addHandler(late)
    async with serve_bridge(settings) as running, httpx.AsyncClient(timeout=30) as client:
        first = await send(client, running.rpc_url, "one")
        assert first["status"]["state"] == "TASK_STATE_COMPLETED"

        try:
            with anyio.fail_after(ANSWER_WAIT_S):
                await late.seen.wait()
        finally:
            logging.getLogger("a2a_acp_bridge").removeHandler(late)
        [record] = late.records
        assert getattr(record, "task_id", "missing") is None
        assert getattr(record, "context_id", "missing") is None
        assert getattr(record, "tool_call_id", None) == "late-1"

        second = await send(client, running.rpc_url, "two", context_id=first["contextId"])
        assert second["status"]["state"] == "TASK_STATE_COMPLETED", status_text(second["status"])

    assert not late_files(settings.sandbox_parent), "the late edit was allowed"
    for task in (first, second):
        assert answer_report(task)["refusedByBridge"] == []
    decided = [r for r in caplog.records if r.getMessage() == "permission decided"]
    assert decided == [], "a request outside any turn was decided for a task"
