"""gemini-cli (`gemini --acp`) through the bridge over HTTP, against a fake Gemini API.

Each test runs the pinned adapter as a real subprocess of a real bridge, with its own
HOME, and checks both what the A2A client is told and what is on disk.
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from tests.fakes.gemini import FakeGemini
from tests.fakes.script import Call, Say, Script
from tests.support.real_adapters import (
    HTTP_TIMEOUT_S,
    Rig,
    decisions,
    gemini_rig,
    log_events,
    watch_logs,
)
from tests.support.server import serve_bridge
from tests.support.wire import answer_text, send, status_text, task_report

pytestmark = [pytest.mark.anyio, pytest.mark.adapters]

# A Vertex AI express-mode key, as the operator would give it (the fake accepts any).
VERTEX_KEY = "AIza-operator-vertex-key-for-the-fake"


@pytest.fixture
def rig(gemini: FakeGemini, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> Rig:
    watch_logs(caplog)
    return gemini_rig(gemini, tmp_path)


async def test_gemini_opens_its_session_in_default_mode_and_asks_before_writing(
    rig: Rig, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    script = rig.fake.add(
        Script([Call("write_file", {"file_path": "hello.txt", "content": "hello\n"})])
    )
    async with (
        serve_bridge(rig.settings(tmp_path), environ=rig.environ) as bridge,
        httpx.AsyncClient(timeout=HTTP_TIMEOUT_S) as client,
    ):
        task = await send(client, bridge.rpc_url, f"Write the file. {script.marker}")
        root = bridge.bridge.root_of(task["contextId"])
    assert task["status"]["state"] == "TASK_STATE_COMPLETED", status_text(task["status"])
    # In autoEdit or yolo, gemini-cli writes without asking.
    assert decisions(caplog) == [("edit", "allow", "change-inside-root", "proceed_once")]
    opened = log_events(caplog, "session opened")
    assert [(o["agent"], o["profile"], o["mode"]) for o in opened] == [
        ("gemini-cli", "gemini", "default")
    ]
    assert root is not None
    assert (root / "hello.txt").read_text() == "hello\n"
    assert rig.outside() == []


async def test_a_shell_command_in_a_handed_root_is_refused_and_the_task_completes(
    rig: Rig, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    handed = tmp_path / "project"
    handed.mkdir()
    command = "touch made-by-shell.txt && echo touched"
    script = rig.fake.add(
        Script([Call("run_shell_command", {"command": command, "description": "Touch a file"})])
    )
    settings = rig.settings(tmp_path, ACP_CWD=str(handed))
    async with (
        serve_bridge(settings, environ=rig.environ) as bridge,
        httpx.AsyncClient(timeout=HTTP_TIMEOUT_S) as client,
    ):
        task = await send(client, bridge.rpc_url, f"Run it. {script.marker}")
    assert not (handed / "made-by-shell.txt").exists()
    assert decisions(caplog) == [("execute", "deny", "unverifiable-handed-root", "cancel")]
    # gemini-cli's `cancel` refuses this call only: the turn goes on and completes.
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    note = status_text(task["status"])
    assert "1 action(s) refused by the bridge" in note
    assert command in note
    report = task_report(task)
    assert report["stopReason"] == "end_turn"
    assert [(r["rule"], r["turn"]) for r in report["refusedByBridge"]] == [
        ("unverifiable-handed-root", "continues")
    ]
    assert "was canceled by the user" in answer_text(task)
    assert rig.outside() == []


def vertex_rig(gemini: FakeGemini, tmp_path: Path) -> Rig:
    """gemini-cli with only a Vertex AI express-mode key (GOOGLE_API_KEY), its Vertex endpoint
    at the fake: no GEMINI_API_KEY, no gateway URL, no auth type in its settings."""
    rig = gemini_rig(gemini, tmp_path)
    del rig.environ["GEMINI_API_KEY"]
    del rig.environ["GOOGLE_GEMINI_BASE_URL"]
    rig.environ["GOOGLE_API_KEY"] = VERTEX_KEY
    rig.environ["GOOGLE_VERTEX_BASE_URL"] = gemini.url
    return rig


async def test_gemini_with_only_a_vertex_key_is_logged_in_with_vertex_ai_and_answers(
    gemini: FakeGemini, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # gemini-cli's session/new defaults to `gemini-api-key` and refuses without GEMINI_API_KEY;
    # the bridge calls authenticate `vertex-ai`, which its GOOGLE_API_KEY satisfies.
    watch_logs(caplog)
    rig = vertex_rig(gemini, tmp_path)
    seen_before = len(gemini.credentials_seen())
    script = rig.fake.add(Script([Say("Answered through Vertex AI.")]))
    settings = rig.settings(tmp_path)
    async with (
        serve_bridge(settings, environ=rig.environ) as bridge,
        httpx.AsyncClient(timeout=HTTP_TIMEOUT_S) as client,
    ):
        task = await send(client, bridge.rpc_url, f"Hello? {script.marker}")
    assert task["status"]["state"] == "TASK_STATE_COMPLETED", status_text(task["status"])
    assert answer_text(task) == "Answered through Vertex AI."
    assert [(e["method"], e["source"]) for e in log_events(caplog, "adapter authenticated")] == [
        ("vertex-ai", "GOOGLE_API_KEY")
    ]
    # The requests went to Vertex AI's paths, with that key.
    main = gemini.main_requests()
    assert main[-1].path.startswith("/v1beta1/publishers/google/models/")
    sent = gemini.credentials_seen()[seen_before:]
    assert sent
    assert set(sent) == {VERTEX_KEY}
    # gemini-cli remembers the choice in its own settings, as its own menu would: in the
    # conversation's own HOME (homes.py), never the operator's.
    [stored] = (settings.state_dir / "homes").glob("*/.gemini/settings.json")
    remembered = json.loads(stored.read_text())
    assert remembered["security"]["auth"]["selectedType"] == "vertex-ai"
    operator = rig.home / ".gemini" / "settings.json"
    assert not operator.exists() or "vertex-ai" not in operator.read_text()
    assert rig.outside() == []


@pytest.mark.parametrize(
    ("method", "expected"),
    [
        (
            "oauth-personal",
            "gemini-cli's authentication method 'oauth-personal' (ACP_AUTH_METHOD) is an "
            "interactive login, which the bridge never starts; log in once with `",
        ),
        (
            "api-key",
            "gemini-cli does not offer the authentication method 'api-key' named by "
            "ACP_AUTH_METHOD; it offers: 'oauth-personal', 'gemini-api-key', 'vertex-ai', "
            "'gateway'",
        ),
    ],
)
async def test_a_method_named_by_the_operator_that_gemini_cannot_use_is_a_clear_error(
    rig: Rig, tmp_path: Path, method: str, expected: str
) -> None:
    async with (
        serve_bridge(rig.settings(tmp_path, ACP_AUTH_METHOD=method), environ=rig.environ) as bridge,
        httpx.AsyncClient(timeout=HTTP_TIMEOUT_S) as client,
    ):
        task = await send(client, bridge.rpc_url, "Hello?")
    assert task["status"]["state"] == "TASK_STATE_FAILED"
    text = status_text(task["status"])
    assert text.startswith(expected)
    if method == "oauth-personal":
        assert "which stores it in ~/.gemini/oauth_creds.json" in text
        assert "--acp" not in text  # the interactive CLI, not the ACP server
    assert rig.outside() == []
