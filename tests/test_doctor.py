"""`a2a-acp-bridge doctor`: one start of the adapter as serve would, one line per step.

On the demo and the scripted agent (real subprocesses), then on each real adapter against
its fake model server: a missing key is reported on the step that needs it, with what to
set, and the same adapter passes once the key is there. Nothing is sent to the model.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from a2a_acp_bridge.doctor import FAIL, NOT_REACHED, OK, Report, diagnose, render
from tests.fakes.anthropic import FakeAnthropic
from tests.fakes.gemini import FakeGemini
from tests.fakes.openai import FakeOpenAI
from tests.support.agents import CLAUDE_INFO, CLAUDE_MODES, CODEX_INFO, logged_agent
from tests.support.procs import events
from tests.support.real_adapters import (
    Rig,
    alive,
    claude_rig,
    codex_key_rig,
    gemini_rig,
)
from tests.support.server import make_settings

pytestmark = pytest.mark.anyio

# Bounded: doctor starts one adapter and stops it (a real one takes a few seconds).
CLI_TIMEOUT_S = 120
KEY = "sk-S3CR3T-doctor-key-0123456789"
CODEX_LIKE: dict[str, Any] = {
    "agent_info": CODEX_INFO,
    "modes": {"current": "read-only", "available": ["read-only", "agent"]},
    "auth_methods": [{"id": "api-key", "name": "API Key"}],
    "auth": {"api-key": "OPENAI_API_KEY"},
}


def statuses(report: Report) -> list[tuple[str, str]]:
    return [(line.step, line.status) for line in report.lines]


def detail(report: Report, step: str) -> str:
    return next(line.detail for line in report.lines if line.step == step)


def spawned_pid(report: Report) -> int:
    found = re.match(r"pid (\d+);", detail(report, "spawn"))
    assert found is not None
    return int(found.group(1))


def base_environ(tmp_path: Path, **extra: str) -> dict[str, str]:
    return {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "LANG": "C.UTF-8", **extra}


def run_cli(
    tmp_path: Path, environ: dict[str, str], *args: str
) -> subprocess.CompletedProcess[str]:
    env = {"ACP_SANDBOX_DIR": str(tmp_path / "sandboxes"), **environ}
    return subprocess.run(
        [sys.executable, "-m", "a2a_acp_bridge", "doctor", *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT_S,
    )


# --- the demo and the scripted agent ----------------------------------------------------


async def test_the_demo_agent_is_ready_and_doctor_leaves_no_process_and_no_sandbox(
    tmp_path: Path,
) -> None:
    report = await diagnose(make_settings(tmp_path), base_environ(tmp_path))
    assert report.ready
    assert statuses(report) == [
        ("spawn", OK),
        ("initialize", OK),
        ("authenticate", OK),
        ("session", OK),
        ("mode", OK),
    ]
    assert detail(report, "initialize") == (
        "a2a-acp-bridge-demo 0.1.0; offers no authentication method"
    )
    assert detail(report, "authenticate") == "not needed: the adapter accepted session/new"
    assert detail(report, "mode") == "default (supervised)"
    # The spawn line lists the environment's names (never values) the adapter was given.
    # ... its own HOME's layout among them (homes.py), the operator's HOME not.
    assert detail(report, "spawn").endswith(
        "its environment: CODEX_HOME, HOME, LANG, PATH, TMPDIR, XDG_CACHE_HOME, "
        "XDG_CONFIG_HOME, XDG_DATA_HOME, XDG_STATE_HOME"
    )
    assert alive({spawned_pid(report)}) == set()
    assert list((tmp_path / "sandboxes").iterdir()) == []
    homes = tmp_path / ".a2a-acp-bridge" / "homes"
    assert not homes.exists() or list(homes.iterdir()) == []
    assert render(report).endswith("ready: a conversation can start\n")


def test_the_command_exits_0_when_ready_and_2_on_a_bad_setting(tmp_path: Path) -> None:
    ready = run_cli(tmp_path, base_environ(tmp_path), "--agent", "demo")
    assert ready.returncode == 0, ready.stdout + ready.stderr
    lines = ready.stdout.splitlines()
    assert lines[0].startswith("doctor: demo (")
    assert [line.split()[0] for line in lines[1:-1]] == [OK] * 5
    assert lines[-1] == "ready: a conversation can start"
    assert ready.stderr == ""
    unknown = run_cli(tmp_path, base_environ(tmp_path), "--agent", "klaude")
    assert unknown.returncode == 2
    assert "ACP_AGENT: 'klaude' is neither a preset" in unknown.stderr
    bad = run_cli(tmp_path, base_environ(tmp_path, ACP_AUTH_METHOD="api key"), "--agent", "demo")
    assert bad.returncode == 2
    assert "ACP_AUTH_METHOD: 'api key' is not an authentication method id" in bad.stderr


async def test_a_missing_key_fails_the_authenticate_step_and_nothing_after_it_runs(
    tmp_path: Path,
) -> None:
    agent, log = logged_agent(tmp_path, CODEX_LIKE)
    report = await diagnose(make_settings(tmp_path, {"ACP_AGENT": agent}), base_environ(tmp_path))
    assert not report.ready
    assert statuses(report) == [
        ("spawn", OK),
        ("initialize", OK),
        ("authenticate", FAIL),
        ("session", NOT_REACHED),
        ("mode", NOT_REACHED),
    ]
    assert detail(report, "authenticate").startswith(
        "codex-acp is not authenticated: set CODEX_API_KEY or OPENAI_API_KEY (its 'api-key' "
        "method) in the bridge's environment"
    )
    assert events(log, "session/prompt") == []
    assert render(report).endswith(
        "not ready: fix what the FAIL line says, then run doctor again\n"
    )


async def test_with_the_key_doctor_logs_in_and_passes_without_printing_the_key(
    tmp_path: Path,
) -> None:
    agent, log = logged_agent(tmp_path, CODEX_LIKE)
    report = await diagnose(
        make_settings(tmp_path, {"ACP_AGENT": agent}),
        base_environ(tmp_path, OPENAI_API_KEY=KEY),
    )
    assert report.ready, render(report)
    assert detail(report, "authenticate") == "'api-key' with OPENAI_API_KEY"
    assert detail(report, "mode") == "read-only (supervised)"
    assert "OPENAI_API_KEY" in detail(report, "spawn")
    assert KEY not in render(report)
    assert events(log, "session/prompt") == []  # doctor never prompts


async def test_an_adapter_that_cannot_be_supervised_fails_the_mode_step(tmp_path: Path) -> None:
    script = {"agent_info": CLAUDE_INFO, "modes": CLAUDE_MODES, "refuse_modes": ["default"]}
    agent, _log = logged_agent(tmp_path, script)
    report = await diagnose(make_settings(tmp_path, {"ACP_AGENT": agent}), base_environ(tmp_path))
    assert statuses(report)[-1] == ("mode", FAIL)
    assert "could not switch to its 'default' mode" in detail(report, "mode")
    assert not report.ready


async def test_a_command_that_does_not_exist_fails_the_start_step(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, {"ACP_AGENT": str(tmp_path / "no-such-agent")})
    report = await diagnose(settings, base_environ(tmp_path))
    assert statuses(report)[0] == ("spawn", FAIL)
    assert "was not found" in detail(report, "spawn")
    assert [status for _, status in statuses(report)[1:]] == [NOT_REACHED] * 4


# --- the real adapters, against their fake model servers -----------------------------


def preset_rig(
    preset: str,
    tmp_path: Path,
    anthropic: FakeAnthropic,
    openai: FakeOpenAI,
    gemini: FakeGemini,
    *,
    with_key: bool,
) -> tuple[Rig, str]:
    """The adapter's rig with or without its key, and the variable the failure must name."""
    tmp_path.mkdir()
    if preset == "claude":
        rig = claude_rig(anthropic, tmp_path)
        if not with_key:
            del rig.environ["ANTHROPIC_API_KEY"]
        return rig, "ANTHROPIC_API_KEY"
    if preset == "codex":
        keys = {"OPENAI_API_KEY": "sk-doctor-openai"} if with_key else {}
        return codex_key_rig(openai, tmp_path, **keys), "OPENAI_API_KEY"
    rig = gemini_rig(gemini, tmp_path)
    if not with_key:
        del rig.environ["GEMINI_API_KEY"]
        del rig.environ["GOOGLE_GEMINI_BASE_URL"]
    return rig, "GEMINI_API_KEY"


@pytest.mark.adapters
@pytest.mark.parametrize(
    ("preset", "failing_step"),
    [("claude", "credentials"), ("codex", "authenticate"), ("gemini", "authenticate")],
)
async def test_doctor_reports_each_presets_missing_key_and_passes_once_it_is_there(
    preset: str,
    failing_step: str,
    tmp_path: Path,
    anthropic: FakeAnthropic,
    openai: FakeOpenAI,
    gemini: FakeGemini,
) -> None:
    missing_rig, variable = preset_rig(
        preset, tmp_path / "without", anthropic, openai, gemini, with_key=False
    )
    missing = await diagnose(missing_rig.settings(tmp_path / "without"), missing_rig.environ)
    assert not missing.ready, render(missing)
    failed = [line for line in missing.lines if line.status == FAIL]
    assert [line.step for line in failed] == [failing_step]
    assert variable in failed[0].detail
    assert "is not authenticated" in failed[0].detail or "refuse the first prompt" in (
        failed[0].detail
    )
    assert alive({spawned_pid(missing)}) == set()

    present_rig, _ = preset_rig(preset, tmp_path / "with", anthropic, openai, gemini, with_key=True)
    present = await diagnose(present_rig.settings(tmp_path / "with"), present_rig.environ)
    assert present.ready, render(present)
    assert alive({spawned_pid(present)}) == set()
    assert missing_rig.outside() == []
    assert present_rig.outside() == []
    # Nothing is asked of the model: doctor only starts the session.
    assert [seen for seen in present_rig.fake.main_requests() if seen.role == "main"] == []


@pytest.mark.adapters
async def test_doctor_on_codex_names_the_methods_it_offers_and_the_one_it_used(
    tmp_path: Path, openai: FakeOpenAI
) -> None:
    rig = codex_key_rig(openai, tmp_path, OPENAI_API_KEY="sk-doctor-openai")
    result = run_cli(
        tmp_path, {**rig.environ, "ACP_SANDBOX_DIR": str(tmp_path / "sb")}, "--agent", "codex"
    )
    assert result.returncode == 0, result.stdout + result.stderr
    lines = {line.split()[1]: line for line in result.stdout.splitlines()[1:-1]}
    assert "offers authentication: 'api-key', 'chat-gpt'" in lines["initialize"]
    assert lines["authenticate"].endswith("'api-key' with OPENAI_API_KEY")
    assert lines["mode"].endswith("read-only (supervised)")
    assert "sk-doctor-openai" not in result.stdout
    assert rig.outside() == []


@pytest.mark.adapters
async def test_doctor_on_codex_without_a_key_exits_1_with_what_to_set(
    tmp_path: Path, openai: FakeOpenAI
) -> None:
    rig = codex_key_rig(openai, tmp_path)
    result = run_cli(tmp_path, rig.environ, "--agent", "codex")
    assert result.returncode == 1, result.stdout + result.stderr
    failing = [line for line in result.stdout.splitlines() if line.lstrip().startswith(FAIL)]
    assert len(failing) == 1
    assert "authenticate" in failing[0]
    assert "set CODEX_API_KEY or OPENAI_API_KEY" in failing[0]
    assert rig.outside() == []
