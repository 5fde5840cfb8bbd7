"""Faults of the adapter process, each through the running bridge: the task ends in the
right state with a message that says what happened, and no process of the agent is left."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.agents import CLAUDE_INFO, logged_agent
from tests.support.procs import events, living, wait_until_gone
from tests.support.server import make_settings, serve_bridge
from tests.support.wire import answer_text, send, status_text

pytestmark = pytest.mark.anyio

# Small limits so that faults end quickly; the defaults are minutes.
FAST = {"ACP_SILENCE_TIMEOUT_MS": "400", "ACP_CANCEL_GRACE_MS": "400"}


async def run_one(
    tmp_path: Path, script: dict[str, Any], text: str = "go", env: dict[str, str] | None = None
) -> tuple[dict[str, Any], Path]:
    """One message to a fresh bridge running `script`; the task, and the agent's log."""
    agent, log = logged_agent(tmp_path, script)
    settings = make_settings(tmp_path, {"ACP_AGENT": agent, **FAST, **(env or {})})
    async with serve_bridge(settings) as bridge, httpx.AsyncClient(timeout=30) as client:
        task = await send(client, bridge.rpc_url, text)
    return task, log


def final_message(task: dict[str, Any]) -> str:
    return status_text(task["status"])


async def test_a_crash_mid_turn_fails_the_task_naming_the_exit_code_and_the_last_stderr_lines(
    tmp_path: Path,
) -> None:
    script = {"turns": [[{"op": "say", "text": "working"}, {"op": "stderr", "bytes": 10}]]}
    script["turns"][0].append({"op": "crash", "code": 3})
    task, log = await run_one(tmp_path, script)
    assert task["status"]["state"] == "TASK_STATE_FAILED"
    message = final_message(task)
    assert "exited with code 3" in message
    assert "last words of the scripted agent" in message
    assert "working" in answer_text(task)
    assert await wait_until_gone(log) == []


async def test_a_crash_message_names_the_bridges_directories_by_label_never_their_paths(
    tmp_path: Path,
) -> None:
    # A real adapter's stack trace names where Node, the adapter and the bridge live.
    text = (
        f"at Object.<anonymous> ({sys.prefix}/lib/node_modules/x.js:1:2)\n"
        f"state in {tmp_path}/.a2a-acp-bridge/homes/h/.codex\n"
        "cwd {CWD}/src/main.py"
    )
    script = {"turns": [[{"op": "stderr", "text": text}, {"op": "crash", "code": 1}]]}
    task, _ = await run_one(tmp_path, script)
    message = final_message(task)
    assert task["status"]["state"] == "TASK_STATE_FAILED"
    assert sys.prefix not in message
    assert str(tmp_path) not in message
    assert "<python>/lib/node_modules/x.js" in message
    assert "<state>/homes/h/.codex" in message
    assert "cwd src/main.py" in message  # inside the root: relative to it


async def test_an_agent_killed_by_a_signal_is_reported_by_the_signals_name(
    tmp_path: Path,
) -> None:
    script = {"turns": [[{"op": "say", "text": "working"}, {"op": "signal", "name": "SIGKILL"}]]}
    task, log = await run_one(tmp_path, script)
    assert task["status"]["state"] == "TASK_STATE_FAILED"
    assert "was killed by SIGKILL" in final_message(task)
    assert await wait_until_gone(log) == []


async def test_a_crash_while_a_grandchild_holds_stdout_fails_the_task_and_the_grandchild_goes(
    tmp_path: Path,
) -> None:
    # Without the exit watchdog the prompt would wait for EOF, that is for the grandchild.
    script = {"turns": [[{"op": "say", "text": "working"}, {"op": "grandchild", "seconds": 120}]]}
    task, log = await run_one(tmp_path, script)
    assert task["status"]["state"] == "TASK_STATE_FAILED"
    assert "exited with code 4" in final_message(task)
    assert len(events(log, "grandchild")) == 1
    assert await wait_until_gone(log) == []


async def test_an_agent_that_never_answers_is_cancelled_after_the_silence_and_then_stopped(
    tmp_path: Path,
) -> None:
    script = {"turns": [[{"op": "say", "text": "thinking hard"}, {"op": "hang"}]]}
    task, log = await run_one(tmp_path, script)
    assert task["status"]["state"] == "TASK_STATE_FAILED"
    message = final_message(task)
    assert "sent no update for" in message
    assert "ACP_SILENCE_TIMEOUT_MS" in message
    assert "stopped the agent" in message
    assert len(events(log, "session/cancel")) == 1
    assert await wait_until_gone(log) == []


async def test_more_than_a_mebibyte_of_stderr_neither_blocks_the_agent_nor_floods_the_message(
    tmp_path: Path,
) -> None:
    flood = 3 * 1024 * 1024
    script = {
        "turns": [
            [{"op": "stderr", "bytes": flood}, {"op": "say", "text": "still talking"}],
            [{"op": "stderr", "bytes": flood}, {"op": "crash", "code": 5}],
        ]
    }
    agent, log = logged_agent(tmp_path, script)
    settings = make_settings(tmp_path, {"ACP_AGENT": agent, **FAST})
    async with serve_bridge(settings) as bridge, httpx.AsyncClient(timeout=30) as client:
        first = await send(client, bridge.rpc_url, "one")
        second = await send(client, bridge.rpc_url, "two", context_id=first["contextId"])
    assert first["status"]["state"] == "TASK_STATE_COMPLETED"
    assert "still talking" in answer_text(first)
    assert second["status"]["state"] == "TASK_STATE_FAILED"
    message = final_message(second)
    assert "exited with code 5" in message
    assert "last words of the scripted agent" in message
    assert len(message) < 4000  # a bounded tail, each line cut short
    assert living(log) == []


async def test_malformed_lines_on_stdout_are_skipped_and_the_turn_goes_on(tmp_path: Path) -> None:
    noise = ["this is not json", "[1, 2]", "42", '{"jsonrpc": "2.0", "method"', '"a string"']
    steps: list[dict[str, Any]] = [{"op": "raw", "line": line} for line in noise]
    script = {"turns": [[*steps, {"op": "say", "text": "after the noise"}]]}
    task, log = await run_one(tmp_path, script)
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    assert "after the noise" in answer_text(task)
    assert living(log) == []


async def test_an_error_reply_to_the_prompt_fails_the_task_with_the_agents_error(
    tmp_path: Path,
) -> None:
    script = {"turns": [[{"op": "error", "code": -32603, "message": "model overloaded"}]]}
    task, log = await run_one(tmp_path, script)
    assert task["status"]["state"] == "TASK_STATE_FAILED"
    assert "answered the prompt with error -32603: model overloaded" in final_message(task)
    assert living(log) == []


async def test_an_agent_that_stops_reading_its_input_fails_the_task_instead_of_hanging(
    tmp_path: Path,
) -> None:
    # The bridge's answer to the permission request cannot be written: any failed write
    # is fatal (the SDK's own sender would hang every later call).
    permission = {
        "op": "permission",
        "tool_call": {"toolCallId": "t1", "title": "Read a file", "kind": "read"},
        "options": [["allow", "Allow", "allow_once"], ["deny", "Deny", "reject_once"]],
    }
    script = {"turns": [[{"op": "close_stdin"}, {"op": "say", "text": "hello"}, permission]]}
    task, log = await run_one(tmp_path, script, env={"ACP_SILENCE_TIMEOUT_MS": "60000"})
    assert task["status"]["state"] == "TASK_STATE_FAILED"
    assert "stopped reading its input" in final_message(task)
    assert await wait_until_gone(log) == []


async def test_an_agent_that_does_not_finish_starting_in_time_fails_the_task_without_a_prompt(
    tmp_path: Path,
) -> None:
    script = {"hang": ["session/new"]}
    task, log = await run_one(tmp_path, script, env={"ACP_START_TIMEOUT_MS": "500"})
    assert task["status"]["state"] == "TASK_STATE_FAILED"
    message = final_message(task)
    assert "did not finish starting within 500 ms" in message
    assert "ACP_START_TIMEOUT_MS" in message
    assert events(log, "session/prompt") == []
    assert living(log) == []


async def test_an_agent_that_asks_for_authentication_fails_the_task_saying_so(
    tmp_path: Path,
) -> None:
    script = {
        "agent_info": CLAUDE_INFO,
        "new_session_error": {"code": -32000, "message": "Authentication required"},
    }
    task, log = await run_one(tmp_path, script)
    assert task["status"]["state"] == "TASK_STATE_FAILED"
    assert "claude-agent-acp is not authenticated" in final_message(task)
    assert living(log) == []


async def test_permission_requests_with_uuid_string_ids_are_answered(tmp_path: Path) -> None:
    permission = {
        "op": "permission",
        "tool_call": {"toolCallId": "t1", "title": "Read notes", "kind": "read"},
        "options": [["allow-once", "Allow", "allow_once"], ["reject", "Reject", "reject_once"]],
    }
    script = {"string_ids": True, "turns": [[permission, {"op": "say", "text": "read it"}]]}
    task, log = await run_one(tmp_path, script)
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    assert "permission t1: allow-once" in answer_text(task)
    assert living(log) == []


async def test_the_agent_gets_only_the_allowlisted_environment_and_the_names_added_to_it(
    tmp_path: Path,
) -> None:
    agent, log = logged_agent(tmp_path, {"turns": [[{"op": "env"}]]})
    settings = make_settings(tmp_path, {"ACP_AGENT": agent, "ACP_AGENT_ENV": "MY_TOOL_HOME"})
    environ = {
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path),
        "LC_ALL": "C.UTF-8",
        "HTTPS_PROXY": "http://127.0.0.1:9",
        "NODE_OPTIONS": "--max-old-space-size=512",
        "ANTHROPIC_API_KEY": "sk-ant-test",
        "CODEX_HOME": str(tmp_path / "codex"),
        "MY_TOOL_HOME": str(tmp_path / "tool"),
        "AWS_SECRET_ACCESS_KEY": "not for the agent",
        "GITHUB_TOKEN": "not for the agent",
        "A2A_TOKEN": "not for the agent either",
        "ACP_SUPERVISED_MODE_X": "nor this",
    }
    async with serve_bridge(settings, environ=environ) as bridge, httpx.AsyncClient() as client:
        task = await send(client, bridge.rpc_url, "go")
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    seen = set(json.loads(answer_text(task)))
    assert {
        "PATH",
        "HOME",
        "LC_ALL",
        "HTTPS_PROXY",
        "NODE_OPTIONS",
        "ANTHROPIC_API_KEY",
        "CODEX_HOME",
        "MY_TOOL_HOME",
    } <= seen
    assert not seen & {
        "AWS_SECRET_ACCESS_KEY",
        "GITHUB_TOKEN",
        "A2A_TOKEN",
        "ACP_SUPERVISED_MODE_X",
    }
    assert living(log) == []
