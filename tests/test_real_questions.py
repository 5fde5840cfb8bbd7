"""A real adapter's question reaches the A2A caller: claude-agent-acp turns Claude Code's
AskUserQuestion tool into an ACP form elicitation (the bridge advertises `elicitation.form`),
the task waits in INPUT_REQUIRED, and the caller's plain answer reaches the model."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from tests.fakes.anthropic import FakeAnthropic
from tests.fakes.script import Call, Script
from tests.support.real_adapters import (
    HTTP_TIMEOUT_S,
    Rig,
    claude_rig,
    decisions,
    watch_logs,
)
from tests.support.server import serve_bridge
from tests.support.wire import answer_text, rpc, send, status_text

pytestmark = [pytest.mark.anyio, pytest.mark.adapters]

QUESTION = {
    "questions": [
        {
            "question": "Which database should the service use?",
            "header": "Database",
            "options": [
                {"label": "Postgres", "description": "A server"},
                {"label": "SQLite", "description": "A file"},
            ],
            "multiSelect": False,
        }
    ]
}


@pytest.fixture
def rig(anthropic: FakeAnthropic, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> Rig:
    watch_logs(caplog)
    return claude_rig(anthropic, tmp_path)


async def test_claude_s_question_goes_to_the_caller_and_the_answer_reaches_the_model(
    rig: Rig, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    script = rig.fake.add(Script([Call("AskUserQuestion", QUESTION)]))
    async with (
        serve_bridge(rig.settings(tmp_path), environ=rig.environ) as bridge,
        httpx.AsyncClient(timeout=HTTP_TIMEOUT_S) as client,
    ):
        asked = await send(client, bridge.rpc_url, f"Ask me which database. {script.marker}")
        done = await send(client, bridge.rpc_url, "sqlite", task_id=asked["id"])
        again = await rpc(client, bridge.rpc_url, "GetTask", {"id": asked["id"]})
    assert asked["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    assert status_text(asked["status"]) == QUESTION["questions"][0]["question"]
    form = asked["status"]["message"]["parts"][1]["data"]
    choice = form["properties"]["question_0"]
    assert [option["const"] for option in choice["oneOf"]] == ["Postgres", "SQLite"]
    assert done["status"]["state"] == "TASK_STATE_COMPLETED"
    # The fake model repeats every tool result it was sent: Claude Code's answer to the tool.
    assert "SQLite" in answer_text(done)
    assert again["result"]["status"]["state"] == "TASK_STATE_COMPLETED"
    # Asked as a question, never as a permission.
    assert decisions(caplog) == []
