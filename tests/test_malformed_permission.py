"""A permission request the ACP SDK cannot read is answered `cancelled` and reported."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from a2a_acp_bridge.acp.transport import permission_problem
from tests.support.agents import CLAUDE_INFO, CLAUDE_MODES, CODEX_INFO, scripted_agent
from tests.support.server import make_settings, serve_bridge
from tests.support.wire import answer_text, send, status_text, task_report

pytestmark = pytest.mark.anyio


def ask(target: Path, options: list[list[str | None]], **extra: Any) -> dict[str, Any]:
    return {
        "op": "permission",
        "tool_call": {
            "toolCallId": "call_odd",
            "title": f"Write {target}",
            "kind": "edit",
            "locations": [{"path": str(target)}],
        },
        "options": options,
        "act": {"write": str(target), "text": "written"},
        **extra,
    }


async def test_an_option_of_unknown_kind_is_answered_cancelled_and_named_in_the_task(
    tmp_path: Path,
) -> None:
    inside = tmp_path / "sandboxes" / "inside.txt"
    script = {
        "agent_info": CLAUDE_INFO,
        "modes": {**CLAUDE_MODES, "current": "default"},
        "turns": [
            [
                ask(inside, [["allow-once", "Allow", "allow_once"], ["odd", "Odd", "maybe"]]),
                {"op": "say", "text": "still here"},
            ]
        ],
    }
    settings = make_settings(tmp_path, {"ACP_AGENT": scripted_agent(tmp_path, script)})
    async with serve_bridge(settings) as bridge, httpx.AsyncClient() as client:
        task = await send(client, bridge.rpc_url, "go")
    assert "permission call_odd: cancelled" in answer_text(task)
    assert "still here" in answer_text(task)
    assert not inside.exists()
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    assert "could not be read" in status_text(task["status"])
    refusal = task_report(task)["refusedByBridge"][0]
    assert refusal["rule"] == "malformed-request"
    assert refusal["answer"] == "cancelled"
    assert "options.1.kind" in refusal["reason"]


async def test_a_malformed_request_that_ends_a_codex_turn_is_named_in_the_canceled_status(
    tmp_path: Path,
) -> None:
    script = {
        "agent_info": CODEX_INFO,
        "modes": {"current": "read-only", "available": ["read-only", "agent"]},
        "turns": [
            [
                ask(
                    tmp_path / "x.txt",
                    [["allow_once", "Yes", "allow_once"], [None, "No", "reject_once"]],
                    end_turn_on=["cancelled"],
                ),
            ]
        ],
    }
    settings = make_settings(tmp_path, {"ACP_AGENT": scripted_agent(tmp_path, script)})
    async with serve_bridge(settings) as bridge, httpx.AsyncClient() as client:
        task = await send(client, bridge.rpc_url, "go")
    assert task["status"]["state"] == "TASK_STATE_CANCELED"
    note = status_text(task["status"])
    assert note.startswith("Refused by the bridge:")
    assert "could not be read" in note


@pytest.mark.parametrize(
    ("options", "where"),
    [
        pytest.param(
            [{"optionId": "a", "name": "A", "kind": "sometimes"}], "options.0.kind", id="kind"
        ),
        pytest.param([{"name": "A", "kind": "allow_once"}], "options.0.optionId", id="no-id"),
        pytest.param("all of them", "options", id="not-a-list"),
    ],
)
def test_what_makes_a_permission_request_unreadable_is_named(options: object, where: str) -> None:
    params = {"sessionId": "s", "toolCall": {"toolCallId": "t"}, "options": options}
    problem = permission_problem(params)
    assert problem is not None
    assert problem.startswith(where)


def test_a_well_formed_permission_request_is_left_to_the_sdk() -> None:
    params = {
        "sessionId": "s",
        "toolCall": {"toolCallId": "t", "kind": "edit"},
        "options": [{"optionId": "a", "name": "A", "kind": "allow_once"}],
    }
    assert permission_problem(params) is None
