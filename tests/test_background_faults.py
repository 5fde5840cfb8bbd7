"""Faults in the bridge's own background work never bring the server down: a warm start
that fails (here, a sandbox parent that cannot be made) is retried until its cause is gone,
/healthz keeps telling the truth, and a task whose sandbox cannot be made ends FAILED with
the cause named, releasing everything it held."""

from __future__ import annotations

from pathlib import Path

import anyio
import httpx
import pytest

from tests.support.server import make_settings, serve_bridge
from tests.support.wire import answer_text, send, status_text

pytestmark = pytest.mark.anyio

# How long the test waits for the pool to refill once the disk is fixed (retries back off
# from 1 s).
RECOVERY_S = 20.0


def block_sandboxes(parent: Path) -> None:
    parent.write_text("a file where the sandboxes' directory should be")


async def test_a_failing_warm_start_leaves_the_server_serving_and_it_recovers(
    tmp_path: Path,
) -> None:
    parent = tmp_path / "sandboxes"
    block_sandboxes(parent)
    settings = make_settings(tmp_path, {"ACP_POOL_SIZE": "1", "ACP_SANDBOX_DIR": str(parent)})
    async with serve_bridge(settings) as running, httpx.AsyncClient(timeout=60) as client:
        bridge = running.bridge
        failed = await send(client, running.rpc_url, "write a.txt: never")
        health_while_broken = (await client.get(running.url + "/healthz")).status_code
        metrics = (await client.get(running.url + "/metrics")).text
        queued_gauge = bridge.metrics.registry.get_sample_value(
            "a2a_acp_bridge_tasks_in_progress", {"phase": "queued"}
        )
        parent.unlink()  # the operator fixes the cause
        with anyio.fail_after(RECOVERY_S):
            # Nothing to wait on but the pool's size: a poll, bounded by the deadline.
            while not len(bridge.pool):  # noqa: ASYNC110
                await anyio.sleep(0.1)
        done = await send(client, running.rpc_url, "write b.txt: after the fix\nread b.txt")
        health_after = (await client.get(running.url + "/healthz")).status_code
    assert failed["status"]["state"] == "TASK_STATE_FAILED"
    reason = status_text(failed["status"])
    assert "could not create the conversation's sandbox" in reason
    assert "File exists" in reason
    assert str(tmp_path) not in reason  # the caller never sees the bridge's layout
    assert health_while_broken == 200
    assert 'a2a_acp_bridge_background_failures_total{task="warm_start"}' in metrics
    assert queued_gauge == 0
    assert done["status"]["state"] == "TASK_STATE_COMPLETED", status_text(done["status"])
    assert "after the fix" in answer_text(done)
    assert health_after == 200


async def test_healthz_turns_503_once_the_bridge_can_no_longer_serve(tmp_path: Path) -> None:
    settings = make_settings(tmp_path)
    async with serve_bridge(settings) as running, httpx.AsyncClient(timeout=60) as client:
        before = (await client.get(running.url + "/healthz")).status_code
        await running.bridge.shutdown()  # what a failure that ends its task group leaves
        after = await client.get(running.url + "/healthz")
    assert before == 200
    assert after.status_code == 503
    assert "cannot serve" in after.json()["status"]
