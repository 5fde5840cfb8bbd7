"""What a bridge killed with SIGKILL left running: each adapter's process group on record,
and the stop of what a previous instance left alive.

A bridge that is killed outright (`kill -9`, the OOM killer) cannot stop its adapters. The
kernel kills each adapter with it (PR_SET_PDEATHSIG, acp/process.py), but not what the
adapter started: the agent's commands stay in the adapter's process group and session,
re-parented to PID 1. So the bridge keeps, for every adapter it runs, a record in
`<ACP_STATE_DIR>/processes/<host name>/` (one directory per machine or container: replicas
sharing a state directory never judge each other's process ids): one small file per adapter
naming its process group (the adapter's pid), the adapter's start time (field 22 of
/proc/<pid>/stat, clock ticks since boot), the marker the bridge put in its environment, and
the bridge's own pid and start time. At start, before any adapter runs,
`ProcessBook.stop_leftovers` reads every record whose bridge is gone, judges them all on one
read of the process table (acp/process.py, `process_table`), and stops what is left of all
of them in one round: SIGTERM, then SIGKILL after LEFTOVER_TERM_GRACE_S (one grace in all,
however many adapters the crash left), and logs what it stopped, record by record.

Why files and not the state database: the state writer batches its writes (state_writer.py),
so a record still queued when the bridge is killed would be lost with it; a file written
with one `write` and renamed into place (`os.replace`) is in the kernel's page cache the
moment the call returns, whatever happens to the process after, and is never seen half
written. (A machine crash loses nothing worth stopping: every process is gone then.) The
window between fork and the record is covered by PR_SET_PDEATHSIG, set before exec.

What is stopped is decided by `leftover_processes`, which never touches a process that is
not certainly the adapter's:

- the recorded pid lives with the recorded start time and carries the record's marker: the
  adapter itself survived (no PDEATHSIG: another OS, a setuid adapter). Its group and
  session are its own, so every member of them is stopped. Without the marker nothing is
  touched and it is logged: any process's start time is readable in /proc/<pid>/stat, so a
  forged record could name one;
- the recorded pid lives with another start time: the pid was reused; nothing is touched;
- the adapter is gone: Linux gives no new process the pid while a group or session of
  that id has a member, so members of that group or session are the adapter's children,
  unless the whole group died and the pid was reused and left since. So a member is
  stopped only if it started after the adapter and carries the bridge's marker in its
  environment (/proc/<pid>/environ); one that does not is left alone and logged.

Only members of the adapter's group or session are ever stopped. Not covered: a process
that left both the group and the session (`setsid`, a daemon), whether or not it kept the
marker; processes of another user. A record that is not one the bridge writes (a pid not
above 0, a start time that is not digits) is removed unread.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import secrets
import signal
import socket
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import anyio

from a2a_acp_bridge.acp.process import (
    ProcessEntry,
    is_running,
    matches,
    process_table,
    read_entry,
)

logger = logging.getLogger(__name__)

DIRECTORY = "processes"


def records_directory(state_dir: Path) -> Path:
    """Where this machine's (or container's) records go: pids mean nothing elsewhere."""
    return state_dir / DIRECTORY / (socket.gethostname() or "localhost")


# The environment variable every adapter (and so, normally, its descendants) carries.
MARKER_NAME = "A2A_ACP_BRIDGE_RUN"
# After SIGTERM, how long what a previous bridge left gets before SIGKILL.
LEFTOVER_TERM_GRACE_S = 2.0
# After SIGKILL, how long the kernel gets to take them away.
LEFTOVER_KILL_WAIT_S = 2.0
POLL_S = 0.05

# How a signal is sent (os.kill; a test passes one that also notes the order of signals).
Kill = Callable[[int, int], None]


@dataclass(frozen=True)
class ProcessRecord:
    """One adapter as recorded: its pid (= its process group and session id), its start
    time, the marker in its environment, and the bridge that ran it."""

    pid: int
    start: str
    marker: str
    label: str
    bridge_pid: int
    bridge_start: str


@dataclass(frozen=True)
class Decision:
    """What to do with a record: the processes to stop, those left alone, and why."""

    stop: tuple[tuple[int, str], ...]
    spared: tuple[int, ...]
    reason: str
    # The recorded pid now names another process: nothing of the record is left.
    pid_reused: bool = False


def leftover_processes(
    record: ProcessRecord,
    table: Mapping[int, ProcessEntry],
    marked: Callable[[int], bool],
) -> Decision:
    """Which processes of `record`'s adapter are left (pure but for `marked`, which says
    whether a process carries the record's marker)."""
    leader = table.get(record.pid)
    members = [
        (pid, entry)
        for pid, entry in table.items()
        if (entry.pgid == record.pid or entry.sid == record.pid) and not entry.ended
    ]
    if leader is not None and not leader.ended:
        if leader.start != record.start:
            return Decision((), (), "the pid was reused by another process", pid_reused=True)
        if not marked(record.pid):
            # The start time alone proves nothing: /proc/<pid>/stat tells it for any process,
            # so a forged record could name one. Only the marker ties the leader to us.
            return Decision((), (record.pid,), "the recorded process does not carry the marker")
        return Decision(
            tuple((pid, entry.start) for pid, entry in members), (), "the adapter survived"
        )
    stop: list[tuple[int, str]] = []
    spared: list[int] = []
    for pid, entry in members:
        if int(entry.start) >= int(record.start) and marked(pid):
            stop.append((pid, entry.start))
        else:
            spared.append(pid)
    return Decision(tuple(stop), tuple(spared), "the adapter's processes outlived it")


class ProcessBook:
    """The records of the adapters this bridge runs (`directory`: ACP_STATE_DIR/processes)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.marker = secrets.token_hex(16)
        me = read_entry(os.getpid())
        self._me = (os.getpid(), me.start if me is not None else "")

    @property
    def environment(self) -> dict[str, str]:
        """What every adapter's environment gets."""
        return {MARKER_NAME: self.marker}

    def written(self, pid: int, start: str, label: str) -> None:
        """Record a running adapter (atomically: one write, then a rename)."""
        record = {
            "pid": pid,
            "start": start,
            "marker": self.marker,
            "label": label,
            "bridge_pid": self._me[0],
            "bridge_start": self._me[1],
        }
        try:
            self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
            final = self.directory / f"{pid}.json"
            partial = self.directory / f".{pid}.json.partial"
            partial.write_text(json.dumps(record))
            os.replace(partial, final)
        except OSError as exc:
            # The adapter runs anyway: only a crash's clean-up is lost (PDEATHSIG remains).
            logger.warning(
                "the adapter's process record could not be written",
                extra={"pid": pid, "error": exc.strerror or str(exc)},
            )

    def forget(self, pid: int) -> None:
        """The adapter and its tree are stopped: its record goes."""
        with contextlib.suppress(OSError):
            (self.directory / f"{pid}.json").unlink()

    def records(self) -> list[tuple[Path, ProcessRecord | None]]:
        """Every record file and what it says (None: unreadable)."""
        try:
            paths = sorted(self.directory.glob("*.json"))
        except OSError:
            return []
        return [(path, _read_record(path)) for path in paths]

    async def stop_leftovers(self, kill: Kill = os.kill) -> int:
        """Stop what previous bridges left running, the processes of every record in one
        round (one grace period in all); returns how many processes got a signal."""
        for partial in _glob(self.directory, ".*.partial"):
            with contextlib.suppress(OSError):
                partial.unlink()
        # Every record is judged before any signal, so one read of the table serves them all.
        judged = self._judged(process_table())
        # A process named by two records (a forged one, say) gets each signal once.
        wanted = sorted(
            {process for _path, _record, decision in judged for process in decision.stop}
        )
        if wanted:
            await _terminate(wanted, kill)
        for path, record, decision in judged:
            _log_decision(record, decision)
            # Gone only now: a bridge killed during the stop leaves the records to the next.
            with contextlib.suppress(OSError):
                path.unlink()
        return len(wanted)

    def _judged(
        self, table: Mapping[int, ProcessEntry]
    ) -> list[tuple[Path, ProcessRecord, Decision]]:
        """Each record of a bridge that is gone, with what to do about it (an unreadable
        record is removed; a live bridge's records are its own business)."""
        judged: list[tuple[Path, ProcessRecord, Decision]] = []
        for path, record in self.records():
            if record is None:
                logger.warning(
                    "an unreadable process record was removed", extra={"path": str(path)}
                )
                with contextlib.suppress(OSError):
                    path.unlink()
                continue
            if matches(table, record.bridge_pid, record.bridge_start):
                continue  # a bridge still running on this state directory (doctor, a test)
            decision = leftover_processes(record, table, _marked(record.marker))
            judged.append((path, record, decision))
        return judged


def _log_decision(record: ProcessRecord, decision: Decision) -> None:
    if decision.stop:
        logger.warning(
            "stopped what a previous bridge left running",
            extra={
                "agent": record.label,
                "adapter_pid": record.pid,
                "processes": sorted(pid for pid, _start in decision.stop),
                "why": decision.reason,
            },
        )
    if decision.spared:
        logger.warning(
            "left running: not certainly a previous bridge's adapter",
            extra={"adapter_pid": record.pid, "processes": list(decision.spared)},
        )
    if decision.pid_reused:
        logger.info(
            "a process record names a reused pid: nothing was touched",
            extra={"adapter_pid": record.pid},
        )


async def _terminate(processes: Iterable[tuple[int, str]], kill: Kill) -> None:
    wanted = list(processes)
    _signal(wanted, signal.SIGTERM, kill)
    with anyio.move_on_after(LEFTOVER_TERM_GRACE_S):
        while _living(wanted):  # noqa: ASYNC110 - no event tells of another's process
            await anyio.sleep(POLL_S)
    with anyio.move_on_after(LEFTOVER_KILL_WAIT_S):
        while left := _living(wanted):
            _signal(left, signal.SIGKILL, kill)
            await anyio.sleep(POLL_S)


def _signal(processes: Iterable[tuple[int, str]], sig: signal.Signals, kill: Kill) -> None:
    for pid, start in processes:
        # Checked again just before: a process that ended meanwhile may have a successor.
        if is_running(pid, start):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                kill(pid, sig)


def _living(processes: Iterable[tuple[int, str]]) -> list[tuple[int, str]]:
    return [(pid, start) for pid, start in processes if is_running(pid, start)]


def _marked(marker: str) -> Callable[[int], bool]:
    needle = f"{MARKER_NAME}={marker}".encode()

    def marked(pid: int) -> bool:
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes()
        except OSError:
            return False
        return needle in environ.split(b"\0")

    return marked


def _glob(directory: Path, pattern: str) -> list[Path]:
    try:
        return list(directory.glob(pattern))
    except OSError:
        return []


def _read_record(path: Path) -> ProcessRecord | None:
    """The record in `path`, or None when it is not one the bridge writes: a record is
    judged only when every field it is judged by has the form the bridge gives it."""
    try:
        raw = json.loads(path.read_text())
        record = ProcessRecord(
            pid=raw["pid"],
            start=raw["start"],
            marker=raw["marker"],
            label=str(raw.get("label", "")),
            bridge_pid=raw["bridge_pid"],
            bridge_start=raw["bridge_start"],
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None
    well_formed = (
        _is_int(record.pid)
        and record.pid > 0
        and _is_int(record.bridge_pid)
        and _is_ticks(record.start)
        and _is_ticks(record.bridge_start)
        and isinstance(record.marker, str)
        and record.marker != ""
    )
    return record if well_formed else None


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_ticks(value: object) -> bool:
    """A start time as /proc/<pid>/stat gives it: ASCII digits."""
    return isinstance(value, str) and value.isascii() and value.isdigit()
