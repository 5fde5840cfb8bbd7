"""gemini-cli (`gemini --acp`) through the bridge over HTTP, against a fake Gemini API.

Each test runs the pinned adapter as a real subprocess of a real bridge, with its own
HOME, and checks both what the A2A client is told and what is on disk.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.fakes.gemini import FakeGemini
from tests.fakes.script import Call, Script
from tests.support.real_adapters import (
    HTTP_TIMEOUT_S,
    Rig,
    decisions,
    gemini_rig,
    log_events,
    running_fake,
    watch_logs,
)
from tests.support.server import serve_bridge
from tests.support.wire import answer_text, send, status_text, task_report

pytestmark = [pytest.mark.anyio, pytest.mark.adapters]


@pytest.fixture(scope="module")
def gemini() -> Iterator[FakeGemini]:
    yield from running_fake(FakeGemini())


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
