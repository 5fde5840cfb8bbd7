"""claude-agent-acp (Claude Code) through the bridge over HTTP, against a fake Anthropic API.

Each test runs the pinned adapter as a real subprocess of a real bridge, with its own
HOME, and checks both what the A2A client is told and what is on disk afterwards.
"""

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
    log_events,
    watch_logs,
)
from tests.support.server import serve_bridge
from tests.support.wire import answer_text, artifact, send, status_text, task_report

pytestmark = [pytest.mark.anyio, pytest.mark.adapters]


@pytest.fixture
def rig(anthropic: FakeAnthropic, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> Rig:
    watch_logs(caplog)
    return claude_rig(anthropic, tmp_path)


async def test_claude_opens_its_session_in_manual_mode_and_asks_before_a_command(
    rig: Rig, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    script = rig.fake.add(
        Script([Call("Bash", {"command": "touch supervised.txt", "description": "Touch"})])
    )
    async with (
        serve_bridge(rig.settings(tmp_path), environ=rig.environ) as bridge,
        httpx.AsyncClient(timeout=HTTP_TIMEOUT_S) as client,
    ):
        task = await send(client, bridge.rpc_url, f"Touch the file. {script.marker}")
        root = bridge.bridge.root_of(task["contextId"])
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    # Claude Code starts in `auto`, where `touch` in the working directory is never asked
    # about (it runs, or its classifier blocks it): a request reaching the bridge shows the
    # session really is in `default`.
    assert decisions(caplog) == [("execute", "allow", "unverifiable-owned-root", "allow-once")]
    opened = log_events(caplog, "session opened")
    assert [(o["agent"], o["profile"], o["mode"]) for o in opened] == [
        ("@agentclientprotocol/claude-agent-acp", "claude", "default")
    ]
    assert root is not None
    assert (root / "supervised.txt").exists()
    assert rig.outside() == []


async def test_a_shell_command_in_an_owned_sandbox_is_allowed_and_takes_effect(
    rig: Rig, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    command = "echo ran-by-claude > proof.txt && cat proof.txt"
    script = rig.fake.add(
        Script([Call("Bash", {"command": command, "description": "Write a proof file"})])
    )
    async with (
        serve_bridge(rig.settings(tmp_path), environ=rig.environ) as bridge,
        httpx.AsyncClient(timeout=HTTP_TIMEOUT_S) as client,
    ):
        task = await send(client, bridge.rpc_url, f"Run the command. {script.marker}")
        root = bridge.bridge.root_of(task["contextId"])
    assert task["status"]["state"] == "TASK_STATE_COMPLETED", status_text(task["status"])
    assert decisions(caplog) == [("execute", "allow", "unverifiable-owned-root", "allow-once")]
    assert root is not None
    assert (root / "proof.txt").read_text() == "ran-by-claude\n"
    # The model was sent the command's output, and its final answer repeats it.
    assert "'ran-by-claude'" in answer_text(task)
    report = task_report(task)
    assert [(c["kind"], c["status"]) for c in report["toolCalls"]] == [("execute", "completed")]
    assert report["refusedByBridge"] == []
    assert rig.outside() == []


async def test_a_write_then_an_edit_inside_the_sandbox_are_allowed_with_the_scripted_content(
    rig: Rig, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    script = rig.fake.add(
        Script(
            [
                Call("Write", {"file_path": "notes.txt", "content": "first line\nline two\n"}),
                Call(
                    "Edit",
                    {"file_path": "notes.txt", "old_string": "line two", "new_string": "LINE 2"},
                ),
            ]
        )
    )
    async with (
        serve_bridge(rig.settings(tmp_path), environ=rig.environ) as bridge,
        httpx.AsyncClient(timeout=HTTP_TIMEOUT_S) as client,
    ):
        task = await send(client, bridge.rpc_url, f"Write, then edit. {script.marker}")
        root = bridge.bridge.root_of(task["contextId"])
    assert task["status"]["state"] == "TASK_STATE_COMPLETED", status_text(task["status"])
    assert decisions(caplog) == [("edit", "allow", "change-inside-root", "allow-once")] * 2
    assert root is not None
    assert (root / "notes.txt").read_text() == "first line\nLINE 2\n"
    changes = artifact(task, "changes")
    assert changes is not None
    diffs = [part["text"] for part in changes["parts"]]
    assert len(diffs) == 2
    assert "+line two" in diffs[0]
    assert "-line two" in diffs[1]
    assert "+LINE 2" in diffs[1]
    assert rig.outside() == []


async def test_a_write_outside_the_root_is_refused_named_and_the_turn_goes_on(
    rig: Rig, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    escape = outside / "escape.txt"
    script = rig.fake.add(
        Script(
            [
                Call("Write", {"file_path": str(escape), "content": "should never exist\n"}),
                Call("Write", {"file_path": "after.txt", "content": "the turn went on\n"}),
            ]
        )
    )
    async with (
        serve_bridge(rig.settings(tmp_path), environ=rig.environ) as bridge,
        httpx.AsyncClient(timeout=HTTP_TIMEOUT_S) as client,
    ):
        task = await send(client, bridge.rpc_url, f"Write both files. {script.marker}")
        root = bridge.bridge.root_of(task["contextId"])
    assert not escape.exists()
    assert list(outside.iterdir()) == []
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    note = status_text(task["status"])
    assert "1 action(s) refused by the bridge" in note
    assert str(escape) in note
    refusal = task_report(task)["refusedByBridge"]
    assert [(r["rule"], r["answer"], r["turn"]) for r in refusal] == [
        ("change-outside-root", "reject", "continues")
    ]
    assert decisions(caplog) == [
        ("edit", "deny", "change-outside-root", "reject"),
        ("edit", "allow", "change-inside-root", "allow-once"),
    ]
    # The turn went on after the refusal: the next write ran and the model heard of both.
    assert root is not None
    assert (root / "after.txt").read_text() == "the turn went on\n"
    answer = answer_text(task)
    assert "ERROR" in answer
    assert "refused" in answer.lower()
    assert rig.outside() == []


async def test_leaving_plan_mode_keeps_supervision_and_the_next_edit_is_still_asked(
    rig: Rig, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    plan = "1. Write plan.txt\n2. Report back"
    script = rig.fake.add(
        Script(
            [
                # Claude Code defers its plan tools: the model loads them first.
                Call(
                    "ToolSearch", {"query": "select:EnterPlanMode,ExitPlanMode", "max_results": 5}
                ),
                Call("EnterPlanMode", {}),
                Call("ExitPlanMode", {"plan": plan}),
                Call("Write", {"file_path": "plan.txt", "content": "implemented\n"}),
            ]
        )
    )
    async with (
        serve_bridge(rig.settings(tmp_path), environ=rig.environ) as bridge,
        httpx.AsyncClient(timeout=HTTP_TIMEOUT_S) as client,
    ):
        task = await send(client, bridge.rpc_url, f"Plan, then do it. {script.marker}")
        root = bridge.bridge.root_of(task["contextId"])
    assert task["status"]["state"] == "TASK_STATE_COMPLETED", status_text(task["status"])
    decided = log_events(caplog, "permission decided")
    assert [(d["kind"], d["verdict"], d["chosen"]) for d in decided] == [
        ("switch_mode", "allow", "exit-plan-default"),
        ("edit", "allow", "allow-once"),
    ]
    offered = [option["optionId"] for option in decided[0]["offered"]]
    assert "exit-plan-auto" in offered  # the option that would drop supervision was there
    modes = [m["parts"][0]["text"] for m in task["history"] if "mode is now" in _text(m)]
    assert modes == ["The agent's mode is now 'plan'.", "The agent's mode is now 'default'."]
    assert root is not None
    assert (root / "plan.txt").read_text() == "implemented\n"
    assert rig.outside() == []


async def test_a_shell_command_in_a_handed_root_without_allow_execute_is_refused(
    rig: Rig, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    handed = tmp_path / "project"
    handed.mkdir()
    command = "touch made-by-shell.txt"
    script = rig.fake.add(Script([Call("Bash", {"command": command, "description": "Touch"})]))
    settings = rig.settings(tmp_path, ACP_CWD=str(handed))
    async with (
        serve_bridge(settings, environ=rig.environ) as bridge,
        httpx.AsyncClient(timeout=HTTP_TIMEOUT_S) as client,
    ):
        task = await send(client, bridge.rpc_url, f"Run it. {script.marker}")
    assert not (handed / "made-by-shell.txt").exists()
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    assert decisions(caplog) == [("execute", "deny", "unverifiable-handed-root", "reject")]
    note = status_text(task["status"])
    assert "refused by the bridge" in note
    assert "without ACP_ALLOW_EXECUTE" in note
    assert "ERROR" in answer_text(task)
    assert rig.outside() == []


def _text(message: dict[str, object]) -> str:
    parts = message.get("parts")
    assert isinstance(parts, list)
    return "".join(str(part.get("text", "")) for part in parts if isinstance(part, dict))
