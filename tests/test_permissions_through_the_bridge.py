"""The classifier through the running bridge: real HTTP, a real ACP subprocess over stdio.

The scripted agent introduces itself with each real adapter's agentInfo (so that adapter's
option tables apply), sends the captured permission requests (tests/fixtures/acp) one after
the other, and reports every answer it gets as a message chunk ("permission ID: ANSWER").
The A2A task must then name every refusal: in a WORKING status line, in the COMPLETED note
or the CANCELED message, and in `refusedByBridge` in the report (the task's metadata).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from a2a_acp_bridge.boundary import Boundary
from a2a_acp_bridge.permissions import (
    Decision,
    PermissionRequest,
    Rule,
    Supervision,
    decide,
    is_inside,
)
from tests.support import fixtures
from tests.support.agents import CLAUDE_INFO, CLAUDE_MODES, CODEX_INFO, GEMINI_INFO, scripted_agent
from tests.support.server import make_settings, serve_bridge
from tests.support.wire import answer_text, send, status_text, task_report

pytestmark = pytest.mark.anyio

CODEX_MODES = {
    "current": "agent",
    "available": ["read-only", "workspace-write", "agent", "agent-full-access"],
}
GEMINI_MODES = {"current": "default", "available": ["default", "autoEdit", "yolo", "plan"]}


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    path = tmp_path / "outside"
    path.mkdir()
    return path


def step(name: str, outside: Path, tmp_path: Path, **extra: Any) -> dict[str, Any]:
    return fixtures.permission_step(name, outside, tmp_path / "home", **extra)


def answers(task: dict[str, Any]) -> list[str]:
    """The answers the agent reported, in the order it got them."""
    return [
        line.split(": ", 1)[1]
        for line in answer_text(task).splitlines()
        if line.startswith("permission ")
    ]


def status_lines(task: dict[str, Any]) -> list[str]:
    """Every status message the task went through (history keeps the earlier ones)."""
    texts = [
        "".join(part.get("text", "") for part in message.get("parts", []))
        for message in task.get("history", [])
        if message.get("role") == "ROLE_AGENT"
    ]
    return [*texts, status_text(task["status"])]


async def test_a_claude_turn_gets_each_fixture_answered_and_names_every_refusal(
    tmp_path: Path, outside: Path
) -> None:
    claude = "claude-agent-acp-0.101.0-"
    script = {
        "agent_info": CLAUDE_INFO,
        "modes": CLAUDE_MODES,
        "config_mode": True,
        "turns": [
            [
                step(
                    claude + "plan.json",  # exit-plan-default beside auto exits
                    outside,
                    tmp_path,
                    act={"say": "leaving plan mode\n"},
                ),
                {"op": "mode", "id": "default"},
                step(
                    claude + "write.json",
                    outside,
                    tmp_path,
                    act={"write": "{CWD}/hello.txt", "text": "hello\n"},
                ),
                step(
                    claude + "write_outside.json",
                    outside,
                    tmp_path,
                    act={"write": f"{outside}/outside.txt", "text": "escaped\n"},
                ),
                step(claude + "write_outside_dotdot.json", outside, tmp_path),
                step(claude + "bash.json", outside, tmp_path),
                step(claude + "read_outside.json", outside, tmp_path),
                {"op": "say", "text": "the turn went on\n"},
            ]
        ],
    }
    settings = make_settings(tmp_path, {"ACP_AGENT": scripted_agent(tmp_path, script)})
    async with serve_bridge(settings) as bridge, httpx.AsyncClient() as client:
        task = await send(client, bridge.rpc_url, "go")
        root = bridge.bridge.root_of(task["contextId"])
    assert answers(task) == [
        "exit-plan-default",
        "allow-once",
        "reject",
        "reject",
        "allow-once",
        "allow-once",
    ]
    assert "the turn went on" in answer_text(task)
    assert root is not None
    assert (root / "hello.txt").read_text() == "hello\n"
    assert not (outside / "outside.txt").exists()
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    note = status_text(task["status"])
    assert note.startswith("Done, but 2 action(s) refused by the bridge: ")
    assert f"Write {outside}/outside.txt: the edit reaches outside" in note
    assert f"Write {root.parent}/outside-dotdot.txt: the edit reaches outside" in note
    refused = task_report(task)["refusedByBridge"]
    assert [(r["action"], r["rule"], r["answer"], r["turn"]) for r in refused] == [
        (f"Write {outside}/outside.txt", "change-outside-root", "reject", "continues"),
        (f"Write {root.parent}/outside-dotdot.txt", "change-outside-root", "reject", "continues"),
    ]
    assert refused[0]["kind"] == "edit"
    assert [o["optionId"] for o in refused[0]["offered"]] == [
        "allow-once",
        "allow-with-updates",
        "reject",
    ]
    lines = status_lines(task)
    assert sum(line.startswith("Refused by the bridge: Write ") for line in lines) == 2


async def test_a_claude_plan_exit_offering_only_elevating_exits_is_refused_and_the_task_says_so(
    tmp_path: Path, outside: Path
) -> None:
    plan = step("claude-agent-acp-0.101.0-plan.json", outside, tmp_path, end_turn_on=["reject"])
    plan["options"] = [o for o in plan["options"] if o[0] != "exit-plan-default"]
    script = {
        "agent_info": CLAUDE_INFO,
        "modes": CLAUDE_MODES,
        "config_mode": True,
        "turns": [[plan, {"op": "say", "text": "never reached"}]],
    }
    settings = make_settings(tmp_path, {"ACP_AGENT": scripted_agent(tmp_path, script)})
    async with serve_bridge(settings) as bridge, httpx.AsyncClient() as client:
        task = await send(client, bridge.rpc_url, "go")
    assert answers(task) == ["reject"]
    assert task["status"]["state"] == "TASK_STATE_CANCELED"
    message = status_text(task["status"])
    assert message.startswith("Refused by the bridge: Approve Plan: ")
    assert "only modes that drop supervision: exit-plan-clear-auto, exit-plan-auto" in message
    refused = task_report(task)["refusedByBridge"]
    assert [(r["rule"], r["answer"], r["turn"]) for r in refused] == [
        ("mode-drops-supervision", "reject", "ends")
    ]


async def test_codex_in_a_handed_root_refusals_end_the_turn_and_the_task_is_canceled(
    tmp_path: Path, outside: Path
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    codex = "codex-acp-2.6.0-"
    move = step(codex + "cx_move_ro.json", outside, tmp_path, end_turn_on=["cancel"])
    move_id = move["tool_call"]["toolCallId"]
    # codex sends the diff (with a move's destination) only in the tool_call before asking.
    editing = {
        "op": "tool_call",
        "call": {
            "toolCallId": move_id,
            "title": "Editing files",
            "kind": "edit",
            "status": "in_progress",
            "locations": [{"path": "{CWD}/hello.txt"}],
            "content": [
                {"type": "diff", "path": f"{outside}/moved.txt", "oldText": "a", "newText": "a"}
            ],
        },
    }
    script = {
        "agent_info": CODEX_INFO,
        "modes": CODEX_MODES,
        "config_mode": True,
        "by_prompt": {
            "patch then move": [
                step(codex + "cx_patch_ro.json", outside, tmp_path, end_turn_on=["cancel"]),
                editing,
                move,
                {"op": "say", "text": "never reached\n"},
            ],
            "run": [
                step(codex + "cx_exec.json", outside, tmp_path, end_turn_on=["cancel"]),
                {"op": "say", "text": "never reached\n"},
            ],
            "plan": [step(codex + "cx_plan.json", outside, tmp_path)],
        },
    }
    settings = make_settings(
        tmp_path, {"ACP_AGENT": scripted_agent(tmp_path, script), "ACP_CWD": str(project)}
    )
    async with serve_bridge(settings) as bridge, httpx.AsyncClient() as client:
        first = await send(client, bridge.rpc_url, "patch then move")
        context = first["contextId"]
        second = await send(client, bridge.rpc_url, "run", context_id=context)
        third = await send(client, bridge.rpc_url, "plan", context_id=context)

    assert answers(first) == ["allow_once", "cancel"]
    assert "never reached" not in answer_text(first)
    assert first["status"]["state"] == "TASK_STATE_CANCELED"
    message = status_text(first["status"])
    assert message.startswith("Refused by the bridge: Edit files: the edit reaches outside")
    assert f"{outside}/moved.txt" in message
    [refusal] = task_report(first)["refusedByBridge"]
    assert (refusal["rule"], refusal["answer"], refusal["turn"]) == (
        "change-outside-root",
        "cancel",
        "ends",
    )

    assert answers(second) == ["cancel"]
    assert second["status"]["state"] == "TASK_STATE_CANCELED"
    assert status_text(second["status"]).startswith(
        "Refused by the bridge: touch created_by_shell.txt && echo touched: an execute cannot "
        "be checked against the boundary"
    )
    [refusal] = task_report(second)["refusedByBridge"]
    assert (refusal["rule"], refusal["turn"]) == ("unverifiable-handed-root", "ends")

    assert answers(third) == ["implement_plan"]
    assert third["status"]["state"] == "TASK_STATE_COMPLETED"
    assert task_report(third)["refusedByBridge"] == []


async def test_a_codex_command_refused_by_decline_lets_the_turn_go_on(
    tmp_path: Path, outside: Path
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    command = step("codex-acp-2.6.0-cx_exec.json", outside, tmp_path, end_turn_on=["cancel"])
    # codex-acp 2.6 offers `decline` beside `cancel` for commands (its source).
    command["options"] = [
        ["allow_once", "Yes, proceed", "allow_once"],
        ["cancel", "No, and tell Codex what to do differently", "reject_once"],
        ["decline", "No, continue without running it", "reject_once"],
    ]
    script = {
        "agent_info": CODEX_INFO,
        "modes": CODEX_MODES,
        "config_mode": True,
        "turns": [[command, {"op": "say", "text": "carried on without it\n"}]],
    }
    settings = make_settings(
        tmp_path, {"ACP_AGENT": scripted_agent(tmp_path, script), "ACP_CWD": str(project)}
    )
    async with serve_bridge(settings) as bridge, httpx.AsyncClient() as client:
        task = await send(client, bridge.rpc_url, "run")
    assert answers(task) == ["decline"]
    assert "carried on without it" in answer_text(task)
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    assert status_text(task["status"]).startswith("Done, but 1 action(s) refused by the bridge")
    [refusal] = task_report(task)["refusedByBridge"]
    assert (refusal["answer"], refusal["turn"]) == ("decline", "continues")


async def test_gemini_in_a_handed_root_leaves_plan_mode_while_its_commands_are_refused(
    tmp_path: Path, outside: Path
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    gemini = "gemini-cli-0.61.0-"
    edit_outside = step(gemini + "gm_write.json", outside, tmp_path)
    edit_outside["tool_call"] = {
        **edit_outside["tool_call"],
        "toolCallId": "write_file-outside",
        "title": f"Writing to {outside}/x.txt",
        "locations": [{"path": f"{outside}/x.txt"}],
        "content": [],
    }
    script = {
        "agent_info": GEMINI_INFO,
        "modes": GEMINI_MODES,
        "turns": [
            [
                step(gemini + "gm_plan.json", outside, tmp_path),  # kind other
                step(gemini + "gm_shell.json", outside, tmp_path),
                step(gemini + "gm_write.json", outside, tmp_path),
                step(gemini + "gm_fetch.json", outside, tmp_path),
                edit_outside,
                {"op": "say", "text": "done\n"},
            ]
        ],
    }
    settings = make_settings(
        tmp_path, {"ACP_AGENT": scripted_agent(tmp_path, script), "ACP_CWD": str(project)}
    )
    async with serve_bridge(settings) as bridge, httpx.AsyncClient() as client:
        task = await send(client, bridge.rpc_url, "go")
    assert answers(task) == ["proceed_once", "cancel", "proceed_once", "cancel", "cancel"]
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    assert status_text(task["status"]).startswith("Done, but 3 action(s) refused by the bridge")
    refused = task_report(task)["refusedByBridge"]
    assert [(r["kind"], r["rule"], r["answer"], r["turn"]) for r in refused] == [
        ("execute", "unverifiable-handed-root", "cancel", "continues"),
        ("fetch", "unverifiable-handed-root", "cancel", "continues"),
        ("edit", "change-outside-root", "cancel", "continues"),
    ]


async def test_a_request_without_kind_is_decided_on_the_earlier_tool_call_with_its_id(
    tmp_path: Path, outside: Path
) -> None:
    """claude-code-acp 0.16 sends kind and locations only in the tool_call (twice)."""
    project = tmp_path / "project"
    project.mkdir()
    info = {"name": "@zed-industries/claude-code-acp", "title": "Claude Code", "version": "0.16.2"}
    options = [
        ["allow_always", "Always Allow", "allow_always"],
        ["allow", "Allow", "allow_once"],
        ["reject", "Reject", "reject_once"],
    ]

    def write(call_id: str, path: str, **extra: Any) -> list[dict[str, Any]]:
        call = {
            "toolCallId": call_id,
            "title": "Write",
            "kind": "edit",
            "status": "pending",
            "locations": [{"path": path}],
        }
        return [
            {"op": "tool_call", "call": call},
            {"op": "tool_call", "call": {**call, "title": f"Write {path}"}},  # the repeat
            {
                "op": "permission",
                "tool_call": {"toolCallId": call_id, "title": f"Write {path}"},
                "options": options,
                "act": {"write": path, "text": "written\n"},
                "end_reason": "end_turn",
                **extra,
            },
        ]

    script = {
        "agent_info": info,
        "modes": {"current": "default", "available": ["default", "acceptEdits", "plan"]},
        "turns": [
            [
                *write("toolu_inside", "{CWD}/inside.txt"),
                {
                    "op": "tool_call",
                    "call": {
                        "toolCallId": "toolu_plan",
                        "title": "Ready to code?",
                        "kind": "switch_mode",
                    },
                },
                {
                    "op": "permission",
                    "tool_call": {"toolCallId": "toolu_plan", "title": "Ready to code?"},
                    "options": [
                        ["acceptEdits", "Yes, and auto-accept edits", "allow_always"],
                        ["default", "Yes, and manually approve edits", "allow_once"],
                        ["plan", "No, keep planning", "reject_once"],
                    ],
                },
                # 0.16 interrupts on a refusal: the turn ends end_turn, nothing more runs.
                *write("toolu_outside", f"{outside}/outside.txt", end_turn_on=["reject"]),
                {"op": "say", "text": "never reached\n"},
            ]
        ],
    }
    settings = make_settings(
        tmp_path, {"ACP_AGENT": scripted_agent(tmp_path, script), "ACP_CWD": str(project)}
    )
    async with serve_bridge(settings) as bridge, httpx.AsyncClient() as client:
        task = await send(client, bridge.rpc_url, "go")
    # The plan exit's options are named after modes: `default` keeps supervision.
    assert answers(task) == ["allow", "default", "reject"]
    assert "never reached" not in answer_text(task)
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    assert status_text(task["status"]).startswith("Done, but 1 action(s) refused by the bridge")
    assert (project / "inside.txt").read_text() == "written\n"
    assert not (outside / "outside.txt").exists()
    report = task_report(task)
    assert [c["toolCallId"] for c in report["toolCalls"]].count("toolu_inside") == 1
    assert [(r["toolCallId"], r["rule"], r["turn"]) for r in report["refusedByBridge"]] == [
        ("toolu_outside", "change-outside-root", "ends")
    ]


async def test_an_external_channel_replaces_the_classifier_without_the_rest_noticing(
    tmp_path: Path, outside: Path
) -> None:
    """A declarative policy of its own (no reads outside the root) through the same seam."""
    seen: list[str] = []

    def policy(
        request: PermissionRequest, boundary: Boundary, supervision: Supervision
    ) -> Decision:
        seen.append(request.tool_call_id)
        if request.kind == "read" and not all(
            is_inside(p, boundary.root) for p in request.locations
        ):
            return Decision(False, Rule.READ_ONLY_KIND, "this policy keeps reads inside the root")
        return decide(request, boundary, supervision)

    claude = "claude-agent-acp-0.101.0-"
    script = {
        "agent_info": CLAUDE_INFO,
        "modes": CLAUDE_MODES,
        "config_mode": True,
        "turns": [
            [
                step(claude + "read_outside.json", outside, tmp_path),
                step(claude + "write.json", outside, tmp_path),
            ]
        ],
    }
    settings = make_settings(tmp_path, {"ACP_AGENT": scripted_agent(tmp_path, script)})
    async with (
        serve_bridge(settings, decider=policy) as bridge,
        httpx.AsyncClient() as client,
    ):
        task = await send(client, bridge.rpc_url, "go")
    assert answers(task) == ["reject", "allow-once"]
    assert len(seen) == 2
    [refusal] = task_report(task)["refusedByBridge"]
    assert refusal["reason"] == "this policy keeps reads inside the root"
    assert refusal["action"] == f"Read {outside}/secret.txt"
