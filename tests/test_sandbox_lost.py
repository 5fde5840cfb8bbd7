"""A sandbox deleted or replaced under a live conversation is noticed at the next message:
the adapter is stopped, the caller is told that the conversation's files and the agent's
memory are lost, and the conversation goes on in a new directory; it is never swapped
silently, also after the adapter's idle stop."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from tests.support.server import make_settings, serve_bridge
from tests.support.wire import answer_text, send, status_text

pytestmark = pytest.mark.anyio

LOST = "working directory was deleted or replaced"
# How long the test waits for the idle adapter (ACP_IDLE_TIMEOUT_MS=100) to be stopped.
IDLE_STOP_S = 10.0


def status_lines(task: dict[str, Any]) -> list[str]:
    texts = [
        "".join(part.get("text", "") for part in message.get("parts", []))
        for message in task.get("history", [])
        if message.get("role") == "ROLE_AGENT"
    ]
    return [*texts, status_text(task["status"])]


def replace_with_a_planted_copy(root: Path) -> None:
    shutil.rmtree(root)
    root.mkdir()
    (root / "planted.txt").write_text("not the bridge's")


@pytest.mark.parametrize("idle_stop", [False, True], ids=["live", "after-idle-stop"])
async def test_a_replaced_sandbox_stops_the_adapter_and_the_caller_is_told(
    tmp_path: Path, idle_stop: bool
) -> None:
    env = {"ACP_IDLE_TIMEOUT_MS": "100"} if idle_stop else {}
    settings = make_settings(tmp_path, env)
    async with serve_bridge(settings) as running, httpx.AsyncClient(timeout=60) as client:
        bridge = running.bridge
        first = await send(client, running.rpc_url, "write kept.txt: before")
        context_id = first["contextId"]
        old_root = bridge.root_of(context_id)
        assert old_root is not None
        old = bridge._conversations[context_id].session
        assert old is not None
        old_pid = old.process.pid
        replace_with_a_planted_copy(old_root)
        if idle_stop:
            with anyio.fail_after(IDLE_STOP_S):
                await old.process.exited.wait()
        second = await send(client, running.rpc_url, "list", context_id=context_id)
        new_root = bridge.root_of(context_id)
        session = bridge._conversations[context_id].session
        new_pid = session.process.pid if session is not None else None
    assert second["status"]["state"] == "TASK_STATE_COMPLETED", status_text(second["status"])
    assert any(LOST in line for line in status_lines(second)), status_lines(second)
    assert new_root != old_root
    assert new_pid != old_pid
    assert "planted.txt" not in answer_text(second)
