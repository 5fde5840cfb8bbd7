"""The scripted agent through the running bridge: supervision is forced, refusals are named."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from tests.support.agents import CLAUDE_INFO, CLAUDE_MODES, CLAUDE_OPTIONS, scripted_agent
from tests.support.server import make_settings, serve_bridge
from tests.support.wire import answer_text, send, task_report

pytestmark = pytest.mark.anyio


async def test_a_claude_like_agent_is_switched_out_of_auto_and_an_outside_edit_is_refused(
    tmp_path: Path,
) -> None:
    outside = tmp_path / "outside" / "escape.txt"
    script = {
        "agent_info": CLAUDE_INFO,
        "modes": CLAUDE_MODES,
        "config_mode": True,
        "turns": [
            [
                {
                    "op": "permission",
                    "tool_call": {
                        "toolCallId": "toolu_1",
                        "title": f"Write {outside}",
                        "kind": "edit",
                        "locations": [{"path": str(outside)}],
                    },
                    "options": CLAUDE_OPTIONS,
                    "act": {"write": str(outside), "text": "should not exist"},
                },
                {"op": "say", "text": "the turn went on"},
            ]
        ],
    }
    settings = make_settings(tmp_path, {"ACP_AGENT": scripted_agent(tmp_path, script)})
    async with serve_bridge(settings) as bridge, httpx.AsyncClient() as client:
        task = await send(client, bridge.rpc_url, "go")
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    note = task["status"]["message"]["parts"][0]["text"]
    assert "1 action(s) refused by the bridge" in note
    assert str(outside) in note
    assert "permission toolu_1: reject" in answer_text(task)
    assert "the turn went on" in answer_text(task)
    assert not outside.exists()
    refusal = task_report(task)["refusedByBridge"][0]
    assert refusal["rule"] == "change-outside-root"
    assert refusal["answer"] == "reject"
    assert refusal["turn"] == "continues"
    modes = [m for m in task["history"] if "mode is now" in m["parts"][0].get("text", "")]
    assert modes == []  # switched before the turn, not during it


async def test_an_agent_that_wants_a_login_fails_the_task_saying_so(tmp_path: Path) -> None:
    script = {
        "agent_info": CLAUDE_INFO,
        "new_session_error": {"code": -32000, "message": "Authentication required"},
        "turns": [[{"op": "say", "text": "never"}]],
    }
    settings = make_settings(tmp_path, {"ACP_AGENT": scripted_agent(tmp_path, script)})
    async with serve_bridge(settings) as bridge, httpx.AsyncClient() as client:
        task = await send(client, bridge.rpc_url, "go")
    assert task["status"]["state"] == "TASK_STATE_FAILED"
    note = task["status"]["message"]["parts"][0]["text"]
    assert note.startswith("claude-agent-acp is not authenticated: ")
