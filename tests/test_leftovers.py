"""Orphans after a crash: real bridge processes, real process groups, real signals.

A bridge killed with SIGKILL takes its adapters with it (PR_SET_PDEATHSIG), and the next
bridge on the same state directory stops what the adapters had started (their process
group is on record in ACP_STATE_DIR/processes). A record whose pid now names another
process (the start time differs) is left alone, and so is a member of a dead adapter's
group that does not carry the bridge's marker.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import anyio
import httpx
import pytest

from a2a_acp_bridge.acp.process import ProcessEntry, read_entry
from a2a_acp_bridge.leftovers import (
    MARKER_NAME,
    Decision,
    ProcessBook,
    ProcessRecord,
    leftover_processes,
    records_directory,
)
from tests.support.agents import AGENTS_DIR, agent_io, logged_agent
from tests.support.bridge_process import BridgeProcess
from tests.support.procs import Proc, events, wait_for_event
from tests.support.server import make_settings, serve_bridge
from tests.support.wire import send

pytestmark = pytest.mark.anyio

# How long a test waits for a process to be gone (the next start's SIGTERM grace is 2 s).
GONE_WITHIN_S = 15.0
SLEEP_S = "300"


def environment(tmp_path: Path, agent: str) -> dict[str, str]:
    return {
        "ACP_AGENT": agent,
        "ACP_SANDBOX_DIR": str(tmp_path / "sandboxes"),
        "ACP_STATE_DIR": str(tmp_path / "state"),
        "ACP_ISOLATION_WRITE": str(agent_io(tmp_path)),
        "ACP_ISOLATION_READ": str(AGENTS_DIR),
    }


async def gone(proc: Proc, within_s: float = GONE_WITHIN_S) -> bool:
    with anyio.move_on_after(within_s):
        while proc.alive():  # noqa: ASYNC110 - nothing signals another process's end
            await anyio.sleep(0.05)
    return not proc.alive()


@contextlib.contextmanager
def reaped(*procs: subprocess.Popen[bytes]) -> Iterator[None]:
    """End the test's own processes whatever happens (by pid, each still ours)."""
    try:
        yield
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait(timeout=10)


async def test_a_sigkilled_bridge_takes_its_adapter_along_and_the_next_start_stops_its_command(
    tmp_path: Path,
) -> None:
    # An adapter that keeps running once stdin closes (codex-acp did): only PDEATHSIG ends it.
    script = {
        "ignore_eof": True,
        "turns": [[{"op": "child", "seconds": int(SLEEP_S)}, {"op": "say", "text": "on"}]],
    }
    agent, log = logged_agent(tmp_path, script)
    first = BridgeProcess(tmp_path, environment(tmp_path, agent), name="first")
    second = BridgeProcess(tmp_path, environment(tmp_path, agent), name="second")
    try:
        await first.start()
        async with httpx.AsyncClient(timeout=30) as client:
            task = await send(client, first.rpc_url, "start your command")
        assert task["status"]["state"] == "TASK_STATE_COMPLETED"
        await wait_for_event(log, "child")
        adapter = next(Proc(e["pid"], e["start"], "start") for e in events(log, "start"))
        command = next(Proc(e["pid"], e["start"], "child") for e in events(log, "child"))
        records = list((records_directory(tmp_path / "state")).glob("*.json"))
        assert [json.loads(r.read_text())["pid"] for r in records] == [adapter.pid]

        await first.stop(signal.SIGKILL)
        # The kernel kills the adapter with the bridge; its command is not reached.
        assert await gone(adapter), "the adapter outlived the SIGKILLed bridge"
        assert command.alive()

        await second.start()
        assert await gone(command), "the next start did not stop the command left running"
        stopped = second.events("stopped what a previous bridge left running")
        assert [entry["processes"] for entry in stopped] == [[command.pid]]
        assert list((records_directory(tmp_path / "state")).glob("*.json")) == []
    finally:
        first.close()
        second.close()


def _start_group(env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        ["sleep", SLEEP_S],
        env=env,
        start_new_session=True,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
    )


def _write_record(
    directory: Path, pid: int, start: str, marker: str = "m" * 32, name: str = ""
) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name or pid}.json"
    # The bridge that wrote it is gone: pid 0 is never a process.
    record = {"pid": pid, "start": start, "marker": marker, "label": "test"}
    path.write_text(json.dumps({**record, "bridge_pid": 0, "bridge_start": "0"}))
    return path


def _start_of(pid: int) -> str:
    entry = read_entry(pid)
    assert entry is not None
    return entry.start


async def test_the_next_start_stops_a_recorded_group_that_outlived_and_spares_a_reused_pid(
    tmp_path: Path,
) -> None:
    marker = "a" * 32
    env = {**os.environ, MARKER_NAME: marker}
    survivor = _start_group(env)  # an adapter PDEATHSIG could not reach
    stranger = _start_group(dict(os.environ))  # holds a recorded pid, not the recorded process
    with reaped(survivor, stranger):
        directory = records_directory(tmp_path / "state")
        _write_record(directory, survivor.pid, _start_of(survivor.pid), marker)
        # The stranger's pid, recorded with another start time: a pid reused since.
        reused_start = str(int(_start_of(stranger.pid)) - 1)
        _write_record(directory, stranger.pid, reused_start, marker)
        settings = make_settings(tmp_path, {"ACP_STATE_DIR": str(tmp_path / "state")})
        async with serve_bridge(settings):
            pass
        assert await gone(Proc(survivor.pid, _start_of_or(survivor), "survivor"))
        assert survivor.wait(timeout=10) == -signal.SIGTERM
        assert stranger.poll() is None, "a process holding a reused pid was signalled"
        assert list(directory.glob("*.json")) == []


def _start_of_or(proc: subprocess.Popen[bytes]) -> str:
    entry = read_entry(proc.pid)
    return entry.start if entry is not None else "gone"


async def test_a_dead_adapter_s_group_is_stopped_only_where_it_carries_the_marker(
    tmp_path: Path,
) -> None:
    marker = "b" * 32
    # A shell that leads its group, starts two sleeps (one without the marker), then exits
    # when its stdin closes: the adapter gone, its group's members left.
    leader = subprocess.Popen(  # noqa: ASYNC220 - its pipes are read at once, line by line
        [
            "sh",
            "-c",
            f"sleep {SLEEP_S} & echo $!; env -u {MARKER_NAME} sleep {SLEEP_S} & echo $!; read x",
        ],
        env={**os.environ, MARKER_NAME: marker},
        start_new_session=True,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    assert leader.stdout is not None
    assert leader.stdin is not None
    marked_pid = int(leader.stdout.readline())
    unmarked_pid = int(leader.stdout.readline())
    leader_start = _start_of(leader.pid)
    marked = Proc(marked_pid, _start_of(marked_pid), "marked")
    unmarked = Proc(unmarked_pid, _start_of(unmarked_pid), "unmarked")
    try:
        leader.stdin.close()
        leader.wait(timeout=10)
        directory = records_directory(tmp_path / "state")
        _write_record(directory, leader.pid, leader_start, marker)
        settings = make_settings(tmp_path, {"ACP_STATE_DIR": str(tmp_path / "state")})
        async with serve_bridge(settings):
            pass
        assert await gone(marked)
        assert unmarked.alive(), "a process without the bridge's marker was signalled"
    finally:
        leader.stdout.close()
        for proc in (marked, unmarked):
            if proc.alive():
                os.kill(proc.pid, signal.SIGKILL)


async def test_a_record_naming_a_live_process_without_the_marker_leaves_it_alone(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Any process's start time is in /proc/<pid>/stat: a forged record can name it truly.
    stranger = _start_group(dict(os.environ))
    with reaped(stranger):
        directory = records_directory(tmp_path / "state")
        _write_record(directory, stranger.pid, _start_of(stranger.pid), "c" * 32)
        await ProcessBook(directory).stop_leftovers()
        assert stranger.poll() is None, "a process without the bridge's marker was signalled"
        spared = [r for r in caplog.records if r.getMessage().startswith("left running")]
        assert [getattr(r, "processes", None) for r in spared] == [[stranger.pid]]
        assert list(directory.glob("*.json")) == []


@contextlib.contextmanager
def _orphaned_group(marker: str) -> Iterator[tuple[int, str, Proc]]:
    """A group whose leader (a shell) has exited, leaving a marked `sleep` in it: the
    leader's pid and start time, and the sleep."""
    leader = subprocess.Popen(
        ["sh", "-c", f"sleep {SLEEP_S} & echo $!; read x"],
        env={**os.environ, MARKER_NAME: marker},
        start_new_session=True,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    assert leader.stdout is not None
    assert leader.stdin is not None
    child_pid = int(leader.stdout.readline())
    leader_start = _start_of(leader.pid)
    child = Proc(child_pid, _start_of(child_pid), "child")
    try:
        leader.stdin.close()
        leader.wait(timeout=10)
        yield leader.pid, leader_start, child
    finally:
        leader.stdout.close()
        if child.alive():
            os.kill(child.pid, signal.SIGKILL)


async def test_a_malformed_record_is_removed_and_the_records_after_it_are_still_judged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    marker = "d" * 32
    with _orphaned_group(marker) as (leader_pid, leader_start, child):
        directory = records_directory(tmp_path / "state")
        _write_record(directory, leader_pid, leader_start, marker)
        # Read first (the names sort before the pid's): a start time that is not one.
        bad = [
            _write_record(directory, leader_pid, "", marker, name="0"),
            _write_record(directory, 0, "1", marker, name="00"),
        ]
        stopped = await ProcessBook(directory).stop_leftovers()
        assert stopped == 1
        assert await gone(child), "the valid record after the malformed ones was not judged"
        assert list(directory.glob("*.json")) == []
        removed = [r for r in caplog.records if "unreadable process record" in r.getMessage()]
        assert sorted(getattr(r, "path", "") for r in removed) == sorted(map(str, bad))


@contextlib.contextmanager
def _deaf_to_sigterm(env: dict[str, str]) -> Iterator[subprocess.Popen[bytes]]:
    """A group leader that ignores SIGTERM (the disposition survives the exec), so only
    the SIGKILL after the grace period ends it; yielded once it ignores it."""
    proc = subprocess.Popen(
        ["sh", "-c", f"trap '' TERM; echo ready; exec sleep {SLEEP_S}"],
        env=env,
        start_new_session=True,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
    )
    assert proc.stdout is not None
    with reaped(proc), proc.stdout:
        assert proc.stdout.readline() == b"ready\n"
        yield proc


async def test_the_leftovers_of_every_record_are_stopped_in_one_round(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Two adapters a crash left, both deaf to SIGTERM: in one round both get SIGTERM, then,
    # after one grace period, both SIGKILL; one after the other, the first would be killed
    # (after its own grace) before the second heard of anything.
    marker = "e" * 32
    env = {**os.environ, MARKER_NAME: marker}
    sent: list[tuple[int, int]] = []

    def kill(pid: int, sig: int) -> None:
        sent.append((pid, sig))
        os.kill(pid, sig)

    with _deaf_to_sigterm(env) as first, _deaf_to_sigterm(env) as second:
        directory = records_directory(tmp_path / "state")
        for proc in (first, second):
            _write_record(directory, proc.pid, _start_of(proc.pid), marker)
        stopped = await ProcessBook(directory).stop_leftovers(kill)
        assert stopped == 2
        assert first.wait(timeout=10) == second.wait(timeout=10) == -signal.SIGKILL
        both = {first.pid, second.pid}
        terms, kills = sent[:2], sent[2:]
        assert {pid for pid, _sig in terms} == both
        assert {sig for _pid, sig in terms} == {signal.SIGTERM}
        assert {pid for pid, _sig in kills} == both
        assert {sig for _pid, sig in kills} == {signal.SIGKILL}
        logged = [r for r in caplog.records if r.getMessage().startswith("stopped what")]
        assert sorted(r.__dict__["processes"] for r in logged) == sorted(
            [[first.pid], [second.pid]]
        )
        assert list(directory.glob("*.json")) == []


def _member(pgid: int, start: str, state: str = "S") -> ProcessEntry:
    return ProcessEntry(ppid=1, pgid=pgid, sid=pgid, state=state, start=start)


def test_the_stop_decision_never_names_a_process_that_is_not_certainly_the_adapter_s() -> None:
    record = ProcessRecord(
        pid=100, start="5000", marker="m", label="x", bridge_pid=1, bridge_start="1"
    )
    ours = {100, 101, 102}

    def marked(pid: int) -> bool:
        return pid in ours

    alive = {100: _member(100, "5000"), 101: _member(100, "5001")}
    assert leftover_processes(record, alive, marked).stop == ((100, "5000"), (101, "5001"))
    # The recorded start time, but not the marker: the record may be forged.
    assert leftover_processes(record, alive, lambda pid: pid == 101).stop == ()
    reused = {100: _member(100, "9000"), 101: _member(100, "9001")}
    assert leftover_processes(record, reused, marked) == Decision(
        (), (), "the pid was reused by another process", pid_reused=True
    )
    orphans = {
        101: _member(100, "5001"),
        102: _member(100, "4000"),  # started before the adapter: not its child
        103: _member(100, "5002"),  # no marker
        104: _member(100, "5003", state="Z"),
        200: _member(200, "5004"),
    }
    decision = leftover_processes(record, orphans, marked)
    assert decision.stop == ((101, "5001"),)
    assert sorted(decision.spared) == [102, 103]
