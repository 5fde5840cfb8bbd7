"""Finished tasks are kept up to A2A_TASK_RETENTION; the oldest finished ones go first."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from a2a_acp_bridge.config import Settings
from a2a_acp_bridge.errors import ConfigError
from tests.support.server import make_settings, serve_bridge
from tests.support.wire import rpc, send

pytestmark = pytest.mark.anyio


async def test_beyond_the_retention_the_oldest_finished_task_is_forgotten(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, {"A2A_TASK_RETENTION": "2"})
    async with serve_bridge(settings) as bridge, httpx.AsyncClient() as client:
        tasks = [await send(client, bridge.rpc_url, f"message {i}") for i in range(3)]
        found = [await rpc(client, bridge.rpc_url, "GetTask", {"id": t["id"]}) for t in tasks]
        listed = await rpc(client, bridge.rpc_url, "ListTasks", {})
    assert all(t["status"]["state"] == "TASK_STATE_COMPLETED" for t in tasks)
    assert found[0]["error"]["code"] == -32001
    assert [f["result"]["id"] for f in found[1:]] == [t["id"] for t in tasks[1:]]
    assert {t["id"] for t in listed["result"]["tasks"]} == {t["id"] for t in tasks[1:]}


def test_the_retention_must_be_a_positive_count(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="A2A_TASK_RETENTION"):
        Settings.from_env({"A2A_TASK_RETENTION": "0"}, cwd=tmp_path)
