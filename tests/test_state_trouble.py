"""Database trouble is an error, not a crash: with the state directory on a full disk (a
real 2 MiB tmpfs) a write that needs the database fails with a message naming the cause,
a task that cannot be recorded ends FAILED before anything reaches the agent, /readyz
turns 503 naming it, reads go on being served, and writes resume by themselves once the
disk has room again. A real bridge process; mounting needs root (CI runs as root)."""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import signal
import sqlite3
import subprocess
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import anyio
import httpx
import pytest

from tests.support.bridge_process import BridgeProcess
from tests.support.wire import rpc, send, status_text

pytestmark = pytest.mark.anyio

DISK = "2m"
FILL_CHUNK = 64 * 1024
# How long the writer may take to notice that the disk has room again (it retries with a
# pause doubling up to 5 s).
RECOVERY_S = 30.0


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a small tmpfs needs root and mount(8)")
    mount_point = tmp_path / "state"
    mount_point.mkdir()
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={DISK},mode=0700", "tmpfs", str(mount_point)],
        check=True,
        timeout=30,
    )
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False, timeout=30)


@pytest.fixture
async def bridge(tmp_path: Path, small_disk: Path) -> AsyncIterator[BridgeProcess]:
    env = {
        "ACP_SANDBOX_DIR": str(tmp_path / "sandboxes"),
        "ACP_STATE_DIR": str(small_disk),
        "A2A_PUSH_ALLOW_PRIVATE": "true",
    }
    process = BridgeProcess(tmp_path, env)
    try:
        yield await process.start()
    finally:
        process.close()


def fill(disk: Path) -> Path:
    """Write a file until the disk is full (unbuffered: every byte that fits is written)."""
    filler = disk / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        for size in (FILL_CHUNK, 512, 1):
            with contextlib.suppress(OSError):
                while True:
                    os.write(fd, b"\0" * size)
        with pytest.raises(OSError) as full:
            os.write(fd, b"\0")
        assert full.value.errno == errno.ENOSPC
    finally:
        os.close(fd)
    return filler


async def readiness(client: httpx.AsyncClient, process: BridgeProcess) -> httpx.Response:
    return await client.get(process.url + "/readyz")


async def test_a_full_disk_fails_the_writes_that_need_it_and_the_bridge_recovers_by_itself(
    tmp_path: Path, small_disk: Path, bridge: BridgeProcess
) -> None:
    async with httpx.AsyncClient(timeout=60) as client:
        before = await send(client, bridge.rpc_url, "write kept.txt: before the disk filled")
        assert before["status"]["state"] == "TASK_STATE_COMPLETED"
        filler = fill(small_disk)

        # The write that needed the database fails, saying why.
        config = {"taskId": before["id"], "id": "c1", "url": "http://127.0.0.1:9/hook"}
        refused = await rpc(client, bridge.rpc_url, "CreateTaskPushNotificationConfig", config)
        assert "the disk is full" in refused["error"]["message"]
        ready = await readiness(client, bridge)
        assert ready.status_code == 503
        state = ready.json()["checks"]["state"]
        assert state["ok"] is False
        assert state["problem"] == "the state database cannot be written: the disk is full"
        assert str(small_disk) not in ready.text  # a public endpoint names no path

        # Reads go on; a task that cannot be recorded is not run.
        assert (await client.get(bridge.url + "/healthz")).status_code == 200
        got = await rpc(client, bridge.rpc_url, "GetTask", {"id": before["id"]})
        assert got["result"]["status"]["state"] == "TASK_STATE_COMPLETED"
        listed = await rpc(client, bridge.rpc_url, "ListTasks", {})
        assert before["id"] in {t["id"] for t in listed["result"]["tasks"]}
        during = await send(client, bridge.rpc_url, "write lost.txt: during")
        assert during["status"]["state"] == "TASK_STATE_FAILED"
        assert "the disk is full" in status_text(during["status"])
        assert "nothing was sent to the agent" in status_text(during["status"])
        assert not list((tmp_path / "sandboxes").glob("*/lost.txt"))

        # Room again: the writer notices by itself.
        filler.unlink()
        with anyio.fail_after(RECOVERY_S):
            while (await readiness(client, bridge)).status_code != 200:  # noqa: ASYNC110
                await anyio.sleep(0.1)  # polled: the writer retries on its own clock
        after = await send(client, bridge.rpc_url, "write later.txt: after")
        assert after["status"]["state"] == "TASK_STATE_COMPLETED"

    assert await bridge.stop(signal.SIGTERM) == 0
    with sqlite3.connect(small_disk / "state.db") as db:
        stored = dict(db.execute("select id, state from tasks").fetchall())
    assert stored == {
        before["id"]: "TASK_STATE_COMPLETED",
        during["id"]: "TASK_STATE_FAILED",
        after["id"]: "TASK_STATE_COMPLETED",
    }
