"""The runtime's pure pieces: which modes count as unsupervised, what an adapter's
environment holds, how much of its stderr a message quotes, how an agent is named."""

from __future__ import annotations

from pathlib import Path

import pytest

from a2a_acp_bridge.acp.process import StderrTail, adapter_environment
from a2a_acp_bridge.adapters import is_unsupervised_mode
from a2a_acp_bridge.agent import AgentInfo
from a2a_acp_bridge.config import Settings
from a2a_acp_bridge.errors import ConfigError


@pytest.mark.parametrize(
    "mode",
    [
        "bypassPermissions",
        "BypassPermissions",
        "bypass_permissions",
        "yolo",
        "YOLO",
        "full-access",
        "agent-full-access",
        "danger-full-access",
        "dangerously-skip-permissions",
        "auto-approve",
        "autoApprove",
        "auto",
        "agent",
        "smart_approve",
        # modes that edit without asking
        "acceptEdits",
        "accept-edits",
        "accept_edits",
        "autoEdit",
        "auto_edit",
        "auto-edit",
        "workspace-write",
    ],
)
def test_a_mode_that_approves_everything_is_refused_as_the_supervised_mode(
    tmp_path: Path, mode: str
) -> None:
    assert is_unsupervised_mode(mode)
    with pytest.raises(ConfigError, match=r"ACP_SUPERVISED_MODE: .* lets the agent act without"):
        Settings.from_env({"ACP_SUPERVISED_MODE": mode}, cwd=tmp_path)


@pytest.mark.parametrize("mode", ["default", "read-only", "plan", "ask", "approve", "dontAsk"])
def test_a_mode_that_still_asks_may_be_named_by_the_operator(tmp_path: Path, mode: str) -> None:
    assert not is_unsupervised_mode(mode)
    assert Settings.from_env({"ACP_SUPERVISED_MODE": mode}, cwd=tmp_path).supervised_mode == mode


@pytest.mark.parametrize(
    ("mode", "unknown_adapter_refused"),
    [
        ("yolo", True),
        ("bypassPermissions", True),
        ("acceptEdits", True),
        ("autoEdit", True),
        ("auto", False),
        ("agent", False),
    ],
)
def test_an_unknown_adapter_is_judged_only_by_modes_that_bypass_checks_everywhere(
    mode: str, unknown_adapter_refused: bool
) -> None:
    # `auto` and `agent` are bypasses in claude and codex; elsewhere they may be ordinary.
    assert is_unsupervised_mode(mode, known_adapter=False) is unknown_adapter_refused


def test_the_adapter_environment_is_the_allowlist_plus_the_names_asked_for() -> None:
    source = {
        "PATH": "/bin",
        "HOME": "/home/a",
        "LC_CTYPE": "C.UTF-8",
        "no_proxy": "localhost",
        "NODE_EXTRA_CA_CERTS": "/ca.pem",
        "npm_config_cache": "/cache",
        "ANTHROPIC_BASE_URL": "http://127.0.0.1:1",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "OPENAI_API_KEY": "sk",
        "GOOGLE_CLOUD_PROJECT": "p",
        "DISABLE_TELEMETRY": "1",
        "AWS_ACCESS_KEY_ID": "secret",
        "A2A_TOKEN": "secret",
        "ACP_AGENT": "claude",
        "PYTHONPATH": "/x",
    }
    env = adapter_environment(source, ["DISABLE_TELEMETRY"])
    assert set(env) == {
        "PATH",
        "HOME",
        "LC_CTYPE",
        "no_proxy",
        "NODE_EXTRA_CA_CERTS",
        "npm_config_cache",
        "ANTHROPIC_BASE_URL",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC",
        "OPENAI_API_KEY",
        "GOOGLE_CLOUD_PROJECT",
        "DISABLE_TELEMETRY",
    }
    assert env["HOME"] == "/home/a"


def test_the_stderr_tail_keeps_the_last_lines_each_cut_short_within_a_bounded_size() -> None:
    tail = StderrTail(limit=4096)
    for index in range(1000):
        tail.add(f"line {index}\n".encode())
    tail.add(b"x" * 100_000 + b"\n")
    tail.add(b"Error: the last words\n")
    text = tail.text()
    lines = text.splitlines()
    assert lines[-1] == "Error: the last words"
    assert len(lines) <= 8
    assert all(len(line) <= 400 for line in lines)
    assert len(text) < 4000


def test_a_tail_of_invalid_utf8_is_still_text() -> None:
    tail = StderrTail()
    tail.add(b"\xff\xfe broken \xc3\n")
    assert "broken" in tail.text()


@pytest.mark.parametrize(
    ("name", "shown"),
    [
        ("@agentclientprotocol/codex-acp", "codex-acp"),
        ("@zed-industries/claude-code-acp", "claude-code-acp"),
        ("gemini-cli", "gemini-cli"),
        (None, "the-label"),
    ],
)
def test_messages_name_the_agent_without_its_npm_scope(name: str | None, shown: str) -> None:
    assert AgentInfo(name=name).display("the-label") == shown
