"""The supervised mode through the running bridge: forced on every known adapter (found by
the name it reports, not by its command line), failing closed with a message that names
the agent and the mode, and kept for the whole session."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.agents import (
    CLAUDE_INFO,
    CLAUDE_MODES,
    CODEX_INFO,
    logged_agent,
    wrapped_agent,
)
from tests.support.procs import events, living, read_log, wait_until_gone
from tests.support.server import make_settings, serve_bridge
from tests.support.wire import answer_text, send, status_text

pytestmark = pytest.mark.anyio

CODEX_MODES = {
    "current": "agent",
    "available": ["read-only", "workspace-write", "agent", "agent-full-access"],
}


def switches(log: Path) -> list[str]:
    """Every mode the bridge asked for, in order, by either call."""
    asked = []
    for entry in read_log(log):
        if entry["event"] == "session/set_config_option":
            asked.append(entry["params"]["value"])
        elif entry["event"] == "session/set_mode":
            asked.append(entry["params"]["modeId"])
    return asked


def order(log: Path) -> list[str]:
    wanted = ("session/new", "session/set_config_option", "session/set_mode", "session/prompt")
    return [entry["event"] for entry in read_log(log) if entry["event"] in wanted]


async def run_one(
    tmp_path: Path, script: dict[str, Any], env: dict[str, str] | None = None
) -> tuple[dict[str, Any], Path]:
    agent, log = logged_agent(tmp_path, script)
    settings = make_settings(tmp_path, {"ACP_AGENT": agent, **(env or {})})
    async with serve_bridge(settings) as bridge, httpx.AsyncClient(timeout=30) as client:
        task = await send(client, bridge.rpc_url, "go")
    return task, log


@pytest.mark.parametrize(
    ("info", "modes", "config", "target"),
    [
        pytest.param(CLAUDE_INFO, CLAUDE_MODES, True, "default", id="claude-agent-acp"),
        pytest.param(CODEX_INFO, CODEX_MODES, True, "read-only", id="codex-acp"),
        pytest.param(
            {"name": "gemini-cli", "version": "0.61.0"},
            {"current": "yolo", "available": ["default", "autoEdit", "yolo", "plan"]},
            False,
            "default",
            id="gemini",
        ),
        pytest.param(
            {"name": "qwen-code", "version": "0.9.0"},
            {"current": "yolo", "available": ["plan", "default", "auto-edit", "yolo"]},
            False,
            "default",
            id="qwen-code",
        ),
        pytest.param(
            {"name": "goose", "version": "1.9.0"},
            {"current": "auto", "available": ["auto", "approve", "smart_approve", "chat"]},
            True,
            "approve",
            id="goose",
        ),
        pytest.param(
            {"name": "mistral-vibe", "version": "2.0.0"},
            {"current": "auto-approve", "available": ["ask", "auto-approve", "plan"]},
            False,
            "ask",
            id="mistral-vibe",
        ),
    ],
)
async def test_every_known_adapter_is_put_in_its_most_supervised_mode_before_the_first_prompt(
    tmp_path: Path, info: dict[str, str], modes: dict[str, Any], config: bool, target: str
) -> None:
    script = {"agent_info": info, "modes": modes, "config_mode": config}
    task, log = await run_one(tmp_path, script)
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    assert switches(log) == [target]
    call = "session/set_config_option" if config else "session/set_mode"
    assert order(log) == ["session/new", call, "session/prompt"]


async def test_set_mode_is_the_fallback_when_the_config_option_call_is_unknown(
    tmp_path: Path,
) -> None:
    script = {
        "agent_info": CLAUDE_INFO,
        "modes": CLAUDE_MODES,
        "config_mode": True,
        "config_call_error": {"code": -32601, "message": "Method not found"},
    }
    task, log = await run_one(tmp_path, script)
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    assert order(log) == [
        "session/new",
        "session/set_config_option",
        "session/set_mode",
        "session/prompt",
    ]


async def test_a_wrapper_script_around_a_known_adapter_is_still_recognised(
    tmp_path: Path,
) -> None:
    script = {"agent_info": CODEX_INFO, "modes": CODEX_MODES, "config_mode": True}
    agent, log = wrapped_agent(tmp_path, script, "bash", name="my-codex")
    settings = make_settings(tmp_path, {"ACP_AGENT": agent})
    async with serve_bridge(settings) as bridge, httpx.AsyncClient(timeout=30) as client:
        task = await send(client, bridge.rpc_url, "go")
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    assert switches(log) == ["read-only"]
    assert living(log) == []


@pytest.mark.parametrize(
    ("script", "expected"),
    [
        pytest.param(
            {"agent_info": CODEX_INFO, "modes": {"current": "agent", "available": ["agent"]}},
            "codex-acp could not switch to its 'read-only' mode: it does not offer it",
            id="not-offered",
        ),
        pytest.param(
            {
                "agent_info": CLAUDE_INFO,
                "modes": CLAUDE_MODES,
                "config_mode": True,
                "refuse_modes": ["default"],
                "refuse_message": "SECRET internal detail of the agent",
            },
            "claude-agent-acp could not switch to its 'default' mode: it refused",
            id="refused",
        ),
        pytest.param(
            {
                "agent_info": CLAUDE_INFO,
                "modes": CLAUDE_MODES,
                "refuse_modes": ["default"],
                "refuse_message": "SECRET internal detail of the agent",
            },
            "claude-agent-acp could not switch to its 'default' mode: it refused",
            id="refused-set-mode",
        ),
        pytest.param(
            {
                "agent_info": CLAUDE_INFO,
                "modes": CLAUDE_MODES,
                "config_mode": True,
                "readback": {"default": "auto"},
            },
            "claude-agent-acp could not switch to its 'default' mode: it reads back as 'auto'",
            id="reads-back-different",
        ),
        pytest.param(
            {"agent_info": CLAUDE_INFO, "modes": CLAUDE_MODES, "readback": {"default": "auto"}},
            "claude-agent-acp could not switch to its 'default' mode: it reads back as 'auto'",
            id="reads-back-different-set-mode",
        ),
        pytest.param(
            {"agent_info": CLAUDE_INFO, "modes": None},
            "claude-agent-acp could not switch to its 'default' mode: it offers no modes",
            id="no-modes",
        ),
    ],
)
async def test_a_session_that_cannot_be_supervised_does_not_open_and_the_task_says_why(
    tmp_path: Path, script: dict[str, Any], expected: str
) -> None:
    task, log = await run_one(tmp_path, script)
    assert task["status"]["state"] == "TASK_STATE_FAILED"
    message = status_text(task["status"])
    assert message == expected
    assert "SECRET" not in message
    assert events(log, "session/prompt") == []
    assert await wait_until_gone(log) == []


async def test_an_unknown_adapter_keeps_its_mode_and_the_card_and_the_log_say_so(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    script = {
        "agent_info": {"name": "homegrown-agent", "title": "Homegrown", "version": "3"},
        "modes": {"current": "careful", "available": ["careful", "plan"]},
    }
    agent, log = logged_agent(tmp_path, script)
    settings = make_settings(tmp_path, {"ACP_AGENT": agent})
    caplog.set_level(logging.WARNING, logger="a2a_acp_bridge")
    async with serve_bridge(settings) as bridge, httpx.AsyncClient(timeout=30) as client:
        task = await send(client, bridge.rpc_url, "go")
        card = (await client.get(bridge.url + "/.well-known/agent-card.json")).json()
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    assert switches(log) == []
    assert "does not know this adapter's supervised mode" in card["description"]
    unrecognised = [r for r in caplog.records if "adapter not recognised" in r.getMessage()]
    assert unrecognised
    assert unrecognised[0].__dict__["agent"] == "homegrown-agent"
    assert unrecognised[0].__dict__["mode"] == "careful"


async def test_the_card_of_a_known_adapter_makes_no_such_warning(tmp_path: Path) -> None:
    script = {"agent_info": CLAUDE_INFO, "modes": CLAUDE_MODES, "config_mode": True}
    agent, _log = logged_agent(tmp_path, script)
    settings = make_settings(tmp_path, {"ACP_AGENT": agent})
    async with serve_bridge(settings) as bridge, httpx.AsyncClient(timeout=30) as client:
        await send(client, bridge.rpc_url, "go")
        card = (await client.get(bridge.url + "/.well-known/agent-card.json")).json()
    assert "supervised mode" not in card["description"]


async def test_an_unknown_adapter_that_starts_in_a_bypass_mode_is_refused(
    tmp_path: Path,
) -> None:
    script = {
        "agent_info": {"name": "homegrown-agent"},
        "modes": {"current": "yolo", "available": ["ask-first", "yolo"]},
    }
    task, log = await run_one(tmp_path, script)
    assert task["status"]["state"] == "TASK_STATE_FAILED"
    message = status_text(task["status"])
    assert "homegrown-agent is not an adapter the bridge knows" in message
    assert "'yolo' mode, in which it acts without asking" in message
    assert "set ACP_SUPERVISED_MODE to one of its modes that asks (ask-first)" in message
    assert events(log, "session/prompt") == []


async def test_the_operator_can_name_another_supervised_mode_and_it_is_checked_the_same_way(
    tmp_path: Path,
) -> None:
    script = {"agent_info": CLAUDE_INFO, "modes": CLAUDE_MODES, "config_mode": True}
    task, log = await run_one(tmp_path, script, {"ACP_SUPERVISED_MODE": "plan"})
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    assert switches(log) == ["plan"]

    other = tmp_path / "missing"
    other.mkdir()
    missing, missing_log = await run_one(other, script, {"ACP_SUPERVISED_MODE": "careful"})
    assert missing["status"]["state"] == "TASK_STATE_FAILED"
    assert status_text(missing["status"]) == (
        "claude-agent-acp could not switch to its 'careful' mode: it does not offer it"
    )
    assert events(missing_log, "session/prompt") == []


@pytest.mark.parametrize("update", ["mode", "config_mode"])
async def test_an_agent_that_switches_itself_out_of_supervision_mid_turn_is_cancelled_and_reset(
    tmp_path: Path, update: str
) -> None:
    script = {
        "agent_info": CLAUDE_INFO,
        "modes": CLAUDE_MODES,
        "config_mode": True,
        "turns": [
            [
                {"op": "say", "text": "switching"},
                {"op": update, "id": "auto"},
                {"op": "sleep", "seconds": 30},
                {"op": "say", "text": "acting unsupervised"},
            ],
            [{"op": "say", "text": "second turn"}],
        ],
    }
    agent, log = logged_agent(tmp_path, script)
    settings = make_settings(tmp_path, {"ACP_AGENT": agent})
    async with serve_bridge(settings) as bridge, httpx.AsyncClient(timeout=30) as client:
        task = await send(client, bridge.rpc_url, "go")
        again = await send(client, bridge.rpc_url, "again", context_id=task["contextId"])
    assert task["status"]["state"] == "TASK_STATE_FAILED"
    assert status_text(task["status"]) == (
        "claude-agent-acp switched itself to its 'auto' mode, in which it acts without asking: "
        "the bridge cancelled the turn and switched it back to 'default'"
    )
    assert "acting unsupervised" not in answer_text(task)
    assert len(events(log, "session/cancel")) == 1
    assert switches(log) == ["default", "default"]
    assert again["status"]["state"] == "TASK_STATE_COMPLETED"
    assert "second turn" in answer_text(again)
    assert len(events(log, "start")) == 1


async def test_an_agent_that_cannot_be_put_back_in_its_mode_is_stopped(tmp_path: Path) -> None:
    script = {
        "agent_info": CLAUDE_INFO,
        "modes": CLAUDE_MODES,
        "config_mode": True,
        "refuse_modes_after_prompt": ["default"],
        "turns": [[{"op": "mode", "id": "bypassPermissions"}, {"op": "sleep", "seconds": 30}]],
        "by_prompt": {"again": [{"op": "say", "text": "a new adapter answers"}]},
    }
    agent, log = logged_agent(tmp_path, script)
    settings = make_settings(tmp_path, {"ACP_AGENT": agent})
    async with serve_bridge(settings) as bridge, httpx.AsyncClient(timeout=30) as client:
        task = await send(client, bridge.rpc_url, "go")
        first_agent = events(log, "start")[0]["pid"]
        assert not any(proc.pid == first_agent for proc in living(log))
        again = await send(client, bridge.rpc_url, "again", context_id=task["contextId"])
    assert task["status"]["state"] == "TASK_STATE_FAILED"
    assert status_text(task["status"]).endswith(
        "the bridge cancelled the turn and stopped the agent, which could not be switched "
        "back to 'default'"
    )
    assert again["status"]["state"] == "TASK_STATE_COMPLETED"
    assert len(events(log, "start")) == 2
