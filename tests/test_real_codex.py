"""codex-acp (codex app-server) through the bridge over HTTP, against a fake Responses API.

Each test runs the pinned adapter as a real subprocess of a real bridge, with its own HOME
and CODEX_HOME, and checks both what the A2A client is told and what is on disk.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from tests.fakes.openai import FakeOpenAI
from tests.fakes.script import Call, Say, Script
from tests.support.real_adapters import (
    HTTP_TIMEOUT_S,
    Rig,
    codex_key_rig,
    codex_rig,
    decisions,
    log_events,
    watch_logs,
)
from tests.support.server import serve_bridge
from tests.support.wire import answer_text, artifact, send, status_text, task_report

pytestmark = [pytest.mark.anyio, pytest.mark.adapters]

# The operator's key, as a bridge would get it from its environment (the fake accepts any).
OPERATOR_KEY = "sk-operator-openai-key-for-the-fake"


@pytest.fixture
def rig(openai: FakeOpenAI, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> Rig:
    watch_logs(caplog)
    return codex_rig(openai, tmp_path)


def add_file(path: str, *lines: str) -> str:
    """An apply_patch input that creates `path` with `lines`."""
    body = "".join(f"+{line}\n" for line in lines)
    return f"*** Begin Patch\n*** Add File: {path}\n{body}*** End Patch\n"


@pytest.mark.parametrize(
    ("isolation", "refusal"),
    [
        # codex's own read-only sandbox refuses the write (in `agent` mode it would run).
        pytest.param("off", "Read-only file system", id="isolation-off"),
        # Inside the bridge's Landlock domain codex's sandbox (bubblewrap) cannot start at
        # all, so an unasked command never runs (docs/isolation.md).
        pytest.param("on", "error building bubblewrap command", id="isolation-on"),
    ],
)
async def test_codex_opens_its_session_read_only_and_asks_before_patching_inside(
    rig: Rig, tmp_path: Path, caplog: pytest.LogCaptureFixture, isolation: str, refusal: str
) -> None:
    script = rig.fake.add(
        Script(
            [
                Call("exec_command", {"cmd": "touch by-shell.txt"}),
                Call("apply_patch", add_file("hello.txt", "hello")),
            ]
        )
    )
    async with (
        serve_bridge(
            rig.settings(tmp_path, ACP_ISOLATION=isolation), environ=rig.environ
        ) as bridge,
        httpx.AsyncClient(timeout=HTTP_TIMEOUT_S) as client,
    ):
        task = await send(client, bridge.rpc_url, f"Create the files. {script.marker}")
        root = bridge.bridge.root_of(task["contextId"])
    assert task["status"]["state"] == "TASK_STATE_COMPLETED", status_text(task["status"])
    assert root is not None
    # The shell's write ran nowhere without asking, and the patch was asked about.
    assert not (root / "by-shell.txt").exists()
    assert refusal in answer_text(task)
    assert decisions(caplog) == [("edit", "allow", "change-inside-root", "allow_once")]
    opened = log_events(caplog, "session opened")
    assert [(o["agent"], o["profile"], o["mode"]) for o in opened] == [
        ("@agentclientprotocol/codex-acp", "codex", "read-only")
    ]
    assert (root / "hello.txt").read_text() == "hello\n"
    # The diff came with the tool call before the request, not with its completion.
    changes = artifact(task, "changes")
    assert changes is not None
    assert "+hello" in changes["parts"][0]["text"]
    assert rig.outside() == []


async def test_an_edit_outside_the_root_is_refused_and_cancels_the_turn_with_the_reason(
    rig: Rig, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    target = outside / "escape.txt"
    target.write_text("untouched\n")
    patch = (
        f"*** Begin Patch\n*** Update File: {target}\n@@\n-untouched\n+overwritten\n*** End Patch\n"
    )
    script = rig.fake.add(Script([Call("apply_patch", patch), Say("not reached")]))
    # Readable (not writable) for the confined adapter: codex reads a file before it asks
    # to patch it, and an unreadable one it never asks about (the kernel stops it first).
    settings = rig.settings(tmp_path, ACP_ISOLATION_READ=str(outside))
    async with (
        serve_bridge(settings, environ=rig.environ) as bridge,
        httpx.AsyncClient(timeout=HTTP_TIMEOUT_S) as client,
    ):
        task = await send(client, bridge.rpc_url, f"Edit that file. {script.marker}")
    assert target.read_text() == "untouched\n"
    # codex-acp 2.6 offers `cancel` as its only refusal, which aborts the whole turn.
    assert decisions(caplog) == [("edit", "deny", "change-outside-root", "cancel")]
    assert task["status"]["state"] == "TASK_STATE_CANCELED"
    note = status_text(task["status"])
    assert note.startswith("Refused by the bridge: ")
    assert "reaches outside the working directory" in note
    assert str(target) in note
    report = task_report(task)
    assert report["stopReason"] == "cancelled"
    assert [(r["answer"], r["turn"]) for r in report["refusedByBridge"]] == [("cancel", "ends")]
    assert "not reached" not in answer_text(task)
    assert rig.outside() == []


async def test_a_plan_review_is_answered_implement_plan_and_the_edits_are_still_asked(
    rig: Rig, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    plan = "<proposed_plan>\n# Plan\n\n1. Create planned.txt\n</proposed_plan>"
    script = rig.fake.add(
        Script([Say(plan), Call("apply_patch", add_file("planned.txt", "implemented"))])
    )
    async with (
        serve_bridge(rig.settings(tmp_path), environ=rig.environ) as bridge,
        httpx.AsyncClient(timeout=HTTP_TIMEOUT_S) as client,
    ):
        # codex-acp's own command: turns its collaboration mode to `plan`.
        toggle = await send(client, bridge.rpc_url, "/plan")
        context_id = toggle["contextId"]
        task = await send(
            client, bridge.rpc_url, f"Plan the file. {script.marker}", context_id=context_id
        )
        root = bridge.bridge.root_of(context_id)
    assert toggle["status"]["state"] == "TASK_STATE_COMPLETED", status_text(toggle["status"])
    assert task["status"]["state"] == "TASK_STATE_COMPLETED", status_text(task["status"])
    assert decisions(caplog) == [
        ("switch_mode", "allow", "mode-keeps-supervision", "implement_plan"),
        ("edit", "allow", "change-inside-root", "allow_once"),
    ]
    assert root is not None
    assert (root / "planned.txt").read_text() == "implemented\n"
    assert rig.outside() == []


async def test_codex_with_only_openai_api_key_logs_itself_in_and_completes_a_task(
    openai: FakeOpenAI, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # codex's built-in OpenAI provider (at the fake), no stored login, no DEFAULT_AUTH_REQUEST:
    # codex-acp refuses session/new, the bridge calls authenticate `api-key`, codex logs in.
    watch_logs(caplog)
    rig = codex_key_rig(openai, tmp_path, OPENAI_API_KEY=OPERATOR_KEY)
    assert not (rig.home / ".codex" / "auth.json").exists()
    assert "DEFAULT_AUTH_REQUEST" not in rig.environ
    seen_before = len(openai.credentials_seen())
    script = rig.fake.add(Script([Say("Logged in by the bridge.")]))
    async with (
        serve_bridge(rig.settings(tmp_path), environ=rig.environ) as bridge,
        httpx.AsyncClient(timeout=HTTP_TIMEOUT_S) as client,
    ):
        task = await send(client, bridge.rpc_url, f"Hello? {script.marker}")
    assert task["status"]["state"] == "TASK_STATE_COMPLETED", status_text(task["status"])
    # The built-in provider tries WebSockets first; codex says so when it falls back to HTTP.
    assert answer_text(task).endswith("Logged in by the bridge.")
    assert [(e["method"], e["source"]) for e in log_events(caplog, "adapter authenticated")] == [
        ("api-key", "OPENAI_API_KEY")
    ]
    # The model got that key: codex used the credential the bridge chose for it.
    sent = openai.credentials_seen()[seen_before:]
    assert sent
    assert set(sent) == {OPERATOR_KEY}
    assert rig.outside() == []


async def test_codex_without_credentials_fails_the_task_naming_the_key_and_the_login(
    openai: FakeOpenAI, tmp_path: Path
) -> None:
    # The default OpenAI provider with no key and no login: codex-acp refuses session/new.
    rig = codex_key_rig(openai, tmp_path)
    async with (
        serve_bridge(rig.settings(tmp_path), environ=rig.environ) as bridge,
        httpx.AsyncClient(timeout=HTTP_TIMEOUT_S) as client,
    ):
        task = await send(client, bridge.rpc_url, "Hello?")
    assert task["status"]["state"] == "TASK_STATE_FAILED"
    note = status_text(task["status"])
    assert note.startswith(
        "codex-acp is not authenticated: set CODEX_API_KEY or OPENAI_API_KEY (its 'api-key' "
        "method) in the bridge's environment, or log in once with `"
    )
    assert "codex-acp cli login` (a ChatGPT login)" in note
    assert note.endswith("which stores it in ~/.codex/auth.json")
    assert rig.outside() == []


@pytest.mark.parametrize(
    ("method", "expected"),
    [
        (
            "gemini-api-key",
            "codex-acp does not offer the authentication method 'gemini-api-key' named by "
            "ACP_AUTH_METHOD; it offers: 'api-key', 'chat-gpt'",
        ),
        (
            "chat-gpt",
            "codex-acp's authentication method 'chat-gpt' (ACP_AUTH_METHOD) is an interactive "
            "login, which the bridge never starts; log in once with `",
        ),
    ],
)
async def test_a_method_named_by_the_operator_that_codex_cannot_use_is_a_clear_error(
    openai: FakeOpenAI, tmp_path: Path, method: str, expected: str
) -> None:
    rig = codex_key_rig(openai, tmp_path, OPENAI_API_KEY=OPERATOR_KEY)
    async with (
        serve_bridge(rig.settings(tmp_path, ACP_AUTH_METHOD=method), environ=rig.environ) as bridge,
        httpx.AsyncClient(timeout=HTTP_TIMEOUT_S) as client,
    ):
        task = await send(client, bridge.rpc_url, "Hello?")
    assert task["status"]["state"] == "TASK_STATE_FAILED"
    assert status_text(task["status"]).startswith(expected)
    assert OPERATOR_KEY not in str(task)
    assert not (rig.home / ".codex" / "auth.json").exists()  # no login was made
    assert rig.outside() == []
