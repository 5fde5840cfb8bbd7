"""The real adapters confined by the kernel (isolation on, the default), over HTTP.

claude-agent-acp and codex-acp complete a write-and-run task in their sandbox, while the
commands they run outside the bridge's sight (Claude Code's `ls`, codex's own sandboxed
commands) or with its allowance (a write to /tmp, a read of the bridge's .env) cannot
reach outside. gemini's memory file, planted in one conversation's HOME, never reaches
the next conversation. Each adapter's session survives an idle stop: its state lives in
the conversation's own HOME.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import anyio
import httpx
import pytest

from tests.fakes.anthropic import FakeAnthropic
from tests.fakes.gemini import FakeGemini
from tests.fakes.openai import FakeOpenAI
from tests.fakes.script import Call, Say, Script
from tests.support.real_adapters import (
    HTTP_TIMEOUT_S,
    Rig,
    claude_rig,
    codex_rig,
    decisions,
    gemini_rig,
    log_events,
    watch_logs,
)
from tests.support.server import serve_bridge
from tests.support.wire import answer_text, send, status_text

pytestmark = [pytest.mark.anyio, pytest.mark.adapters]

DOTENV_SECRET = "dotenv-secret-of-the-bridge-5d1e"
MEMORY = "Always answer in the voice of PINEAPPLE-7731."
# The bridge's own Python: readable by every confined adapter.
PYTHON = sys.executable
# The idle limit for the reload test, and the bound on waiting for the reaper.
IDLE_MS = "300"
IDLE_WAIT_S = 30.0


@pytest.fixture
def bridge_dir(tmp_path: Path) -> Path:
    """The bridge's working directory (settings' base) holds a .env the agent must not read."""
    (tmp_path / ".env").write_text(f"DOTENV_NOTE={DOTENV_SECRET}\n")
    return tmp_path


def host_tmp(tmp_path: Path) -> Path:
    return Path("/tmp") / f"isolation-real-{os.getpid()}-{tmp_path.name}"


async def test_claude_writes_and_runs_a_program_and_its_commands_cannot_reach_outside(
    anthropic: FakeAnthropic,
    tmp_path: Path,
    bridge_dir: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    watch_logs(caplog)
    rig = claude_rig(anthropic, tmp_path)
    planted = host_tmp(tmp_path)
    script = rig.fake.add(
        Script(
            [
                Call("Write", {"file_path": "hello.py", "content": "print('hello from claude')\n"}),
                Call("Bash", {"command": f"{PYTHON} hello.py", "description": "Run it"}),
                # Claude Code runs `ls` without asking: the kernel still says no.
                Call("Bash", {"command": "ls /", "description": "List the root"}),
                Call("Bash", {"command": f"touch {planted}", "description": "Plant a file"}),
                Call("Read", {"file_path": str(bridge_dir / ".env")}),
            ]
        )
    )
    try:
        async with (
            serve_bridge(rig.settings(tmp_path), environ=rig.environ) as bridge,
            httpx.AsyncClient(timeout=HTTP_TIMEOUT_S) as client,
        ):
            task = await send(client, bridge.rpc_url, f"Write and run it. {script.marker}")
            root = bridge.bridge.root_of(task["contextId"])
        leaked = planted.exists()
    finally:
        planted.unlink(missing_ok=True)
    assert task["status"]["state"] == "TASK_STATE_COMPLETED", status_text(task["status"])
    assert root is not None
    assert (root / "hello.py").exists()
    answer = answer_text(task)
    assert "hello from claude" in answer
    assert not leaked
    assert DOTENV_SECRET not in answer
    # ls / and touch failed on the kernel's refusal (Claude Code runs them unasked); the Read
    # of the bridge's .env is refused before that by the classifier's read floor.
    assert answer.count("Permission denied") + answer.count("EACCES") >= 2, answer
    assert ("read", "deny", "read-protected") in [d[:3] for d in decisions(caplog)]
    kinds = [kind for kind, verdict, _rule, _chosen in decisions(caplog) if verdict == "allow"]
    assert "edit" in kinds
    assert "execute" in kinds
    assert rig.outside() == []


def add_file(path: str, *lines: str) -> str:
    body = "".join(f"+{line}\n" for line in lines)
    return f"*** Begin Patch\n*** Add File: {path}\n{body}*** End Patch\n"


def escalated(command: str) -> dict[str, str]:
    """An exec_command the model asks to run outside codex's own sandbox: codex asks first."""
    return {"cmd": command, "sandbox_permissions": "require_escalated", "justification": "run"}


async def test_codex_writes_and_runs_a_program_and_its_commands_cannot_reach_outside(
    openai: FakeOpenAI,
    tmp_path: Path,
    bridge_dir: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    watch_logs(caplog)
    rig = codex_rig(openai, tmp_path)
    planted = host_tmp(tmp_path)
    unasked = planted.with_name(planted.name + "-unasked")
    script = rig.fake.add(
        Script(
            [
                Call("apply_patch", add_file("hello.py", "print('hello from codex')")),
                Call("exec_command", escalated(f"{PYTHON} hello.py")),
                # Unasked, in codex's own sandbox: it cannot even start inside the bridge's.
                Call("exec_command", {"cmd": f"touch {unasked}; ls /"}),
                Call("exec_command", escalated(f"touch {planted}; cat {bridge_dir}/.env; ls /")),
            ]
        )
    )
    try:
        async with (
            serve_bridge(rig.settings(tmp_path), environ=rig.environ) as bridge,
            httpx.AsyncClient(timeout=HTTP_TIMEOUT_S) as client,
        ):
            task = await send(client, bridge.rpc_url, f"Write and run it. {script.marker}")
            root = bridge.bridge.root_of(task["contextId"])
        leaked = [p for p in (planted, unasked) if p.exists()]
    finally:
        for path in (planted, unasked):
            path.unlink(missing_ok=True)
    assert task["status"]["state"] == "TASK_STATE_COMPLETED", status_text(task["status"])
    assert root is not None
    assert (root / "hello.py").read_text() == "print('hello from codex')\n"
    answer = answer_text(task)
    assert "hello from codex" in answer
    assert leaked == []
    assert DOTENV_SECRET not in answer
    assert "error building bubblewrap command" in answer  # the unasked command never ran
    assert answer.count("Permission denied") >= 3, answer  # touch, cat and ls, refused
    assert decisions(caplog) == [
        ("edit", "allow", "change-inside-root", "allow_once"),
        ("execute", "allow", "unverifiable-owned-root", "allow_once"),
        ("execute", "allow", "unverifiable-owned-root", "allow_once"),
    ]
    assert rig.outside() == []


async def test_gemini_memory_planted_in_one_conversation_never_reaches_the_next(
    gemini: FakeGemini, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    watch_logs(caplog)
    rig = gemini_rig(gemini, tmp_path)
    plant = f"mkdir -p ~/.gemini && echo '{MEMORY}' >> ~/.gemini/GEMINI.md && echo planted"
    script = rig.fake.add(
        Script([Call("run_shell_command", {"command": plant, "description": "Remember"})])
    )
    settings = rig.settings(tmp_path, ACP_IDLE_TIMEOUT_MS=IDLE_MS)
    async with (
        serve_bridge(settings, environ=rig.environ) as bridge,
        httpx.AsyncClient(timeout=HTTP_TIMEOUT_S) as client,
    ):
        first = await send(client, bridge.rpc_url, f"Remember this. {script.marker}")
        assert "planted" in answer_text(first), answer_text(first)
        root = bridge.bridge.root_of(first["contextId"])
        assert root is not None
        # The planting conversation's next adapter loads its own memory file...
        await wait_idle_stop(caplog, 1)
        again = rig.fake.add(Script([Say("again")]))
        before = len(rig.fake.main_requests())
        await send(client, bridge.rpc_url, f"Again. {again.marker}", context_id=first["contextId"])
        seen_again = rig.fake.main_requests()[before:]
        # ...while a new conversation's adapter never sees it.
        other = rig.fake.add(Script([Say("fresh")]))
        before = len(rig.fake.main_requests())
        second = await send(client, bridge.rpc_url, f"Hello. {other.marker}")
        seen_next = rig.fake.main_requests()[before:]
    assert second["status"]["state"] == "TASK_STATE_COMPLETED"
    assert seen_next
    assert all(MEMORY not in seen.system for seen in seen_next)
    assert seen_again
    assert any(MEMORY in seen.system for seen in seen_again)
    memory_file = settings.state_dir / "homes" / root.name / ".gemini" / "GEMINI.md"
    assert MEMORY in memory_file.read_text()
    assert not (rig.home / ".gemini" / "GEMINI.md").exists()  # the operator's HOME
    assert rig.outside() == []


async def wait_idle_stop(caplog: pytest.LogCaptureFixture, count: int) -> None:
    with anyio.fail_after(IDLE_WAIT_S):
        while len(log_events(caplog, "adapter exited")) < count:  # noqa: ASYNC110
            await anyio.sleep(0.05)


@pytest.mark.parametrize("preset", ["claude", "codex"])
async def test_a_session_is_reloaded_from_the_conversations_home_after_an_idle_stop(
    preset: str,
    anthropic: FakeAnthropic,
    openai: FakeOpenAI,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    watch_logs(caplog)
    rig: Rig = (
        claude_rig(anthropic, tmp_path) if preset == "claude" else codex_rig(openai, tmp_path)
    )
    first = rig.fake.add(Script([Say("first answer")]))
    second = rig.fake.add(Script([Say("second answer")]))
    settings = rig.settings(tmp_path, ACP_IDLE_TIMEOUT_MS=IDLE_MS)
    async with (
        serve_bridge(settings, environ=rig.environ) as bridge,
        httpx.AsyncClient(timeout=HTTP_TIMEOUT_S) as client,
    ):
        task = await send(client, bridge.rpc_url, f"One. {first.marker}")
        await wait_idle_stop(caplog, 1)
        later = await send(
            client, bridge.rpc_url, f"Two. {second.marker}", context_id=task["contextId"]
        )
    assert later["status"]["state"] == "TASK_STATE_COMPLETED", status_text(later["status"])
    opened = log_events(caplog, "session opened")
    assert [o["loaded"] for o in opened] == [False, True]
    assert opened[0]["session_id"] == opened[1]["session_id"]
    assert "second answer" in answer_text(later)
    assert rig.outside() == []
