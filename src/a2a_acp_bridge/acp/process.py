"""An adapter subprocess: spawned in its own process group, watched, and stopped whole.

The bridge spawns adapters itself instead of using the ACP SDK's spawn helper, which
leaks grandchildren, never reads stderr and trims the environment. Here:

- the adapter gets its own session and process group (`start_new_session`), so the whole
  tree can be signalled at once, also when the command is a shim (npx, node, a shell
  script) around the real binary;
- the environment is explicit: an allowlist of the caller's variables (`adapter_environment`);
- stdin stays open (adapters exit on EOF) until `stop` closes it on purpose;
- stderr is read continuously in chunks: a bounded tail is kept for error messages and
  every line goes to the log at DEBUG, so a chatty adapter never blocks on a full pipe,
  whatever the length of its lines;
- a watchdog polls the exit status, because a grandchild holding stdout open means the
  pipe never reaches EOF when the adapter itself dies;
- `stop` closes stdin, waits, then signals the group and every process of the adapter's
  session (TERM, then KILL), and also every descendant that left both (a `setsid`
  daemon), including ones whose parent died first: the watchdog remembers them;
- the child asks the kernel to SIGKILL it when the bridge dies (PR_SET_PDEATHSIG, set
  between fork and exec), so a bridge killed outright does not leave its adapters
  running. The kernel ties this to the *thread* that forked, so spawn is called from the
  event loop's thread, which lives as long as the bridge. It does not reach what the
  adapter starts (the flag is cleared on fork): the record of each adapter's group
  (leftovers.py, `records`) lets the next start stop those;
- with isolation on, the child confines itself (Landlock, `isolation.Confined`) between
  fork and exec, so the adapter's first instruction already runs confined; a child that
  cannot confine itself never execs the adapter.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import ctypes
import logging
import os
import signal
import subprocess
import sys
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import anyio

from a2a_acp_bridge.errors import AdapterStartError
from a2a_acp_bridge.landlock import LandlockError

if TYPE_CHECKING:
    from a2a_acp_bridge.isolation import Confined

logger = logging.getLogger(__name__)

# How often the watchdog looks at the exit status. 50 ms keeps "the task fails within a
# second of a crash" with a wide margin and costs nothing measurable.
EXIT_POLL_S = 0.05
# How often the process table is read to remember descendants that left the adapter's
# group and session: one scan serves all adapters (1.3 ms per 100 processes).
TREE_SCAN_S = 2.0
# Bytes of stderr kept for error messages: enough for a stack trace, bounded for a flood.
STDERR_TAIL_BYTES = 16 * 1024
# Stderr is read in chunks of this size, so a single endless line cannot block the pump.
STDERR_CHUNK = 64 * 1024
# Longest stderr line logged (and quoted in an error message) in one piece.
STDERR_LINE_CHARS = 400
# Longest line the NDJSON reader takes in one piece before reassembling (big diffs).
STDOUT_LINE_LIMIT = 8 * 1024 * 1024
# After stdin closes, how long an adapter gets to exit on its own (claude: 0.05 s; codex
# 2.6 needs 3.5-4.7 s to wind down its app-server, so its tree is signalled at this point).
STOP_GRACE_S = 2.0
# After SIGTERM, how long the tree gets before SIGKILL.
TERM_GRACE_S = 2.0
# After SIGKILL, how long the kernel gets to take the processes away.
KILL_WAIT_S = 2.0
# Once the tree is gone, how long the stderr pump gets to read what is left in the pipe.
STDERR_SETTLE_S = 0.5

# prctl(2): the signal the child gets when its parent thread dies.
PR_SET_PDEATHSIG = 1
# libc, loaded before any fork: the child only calls it.
_LIBC = ctypes.CDLL(None, use_errno=True) if sys.platform.startswith("linux") else None


class SpawnRecords(Protocol):
    """Where the adapters' process groups are recorded (leftovers.ProcessBook)."""

    @property
    def environment(self) -> dict[str, str]: ...

    def written(self, pid: int, start: str, label: str) -> None: ...

    def forget(self, pid: int) -> None: ...


def die_with_parent(parent: int, then: Callable[[], None] | None = None) -> Callable[[], None]:
    """The child's set-up between fork and exec: SIGKILL when the bridge's thread dies
    (and at once if the bridge died before the call), then `then` (the confinement)."""

    def setup() -> None:
        if _LIBC is not None:
            _LIBC.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
            if os.getppid() != parent:
                os.kill(os.getpid(), signal.SIGKILL)
        if then is not None:
            then()

    return setup


# Environment variables handed to adapters when set, by exact name or by prefix. Anything
# else (cloud credentials, tokens of other tools, the bridge's own settings) stays out;
# ACP_AGENT_ENV=NAME,NAME adds more names.
ENV_NAMES = frozenset(
    {
        "PATH",
        "HOME",
        "USER",
        "LOGNAME",
        "SHELL",
        "LANG",
        "LANGUAGE",
        "TZ",
        "TERM",
        "TMPDIR",
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "NO_PROXY",
        "ALL_PROXY",
        "http_proxy",
        "https_proxy",
        "no_proxy",
        "all_proxy",
        "SSL_CERT_FILE",
        "SSL_CERT_DIR",
        "REQUESTS_CA_BUNDLE",
    }
)
ENV_PREFIXES = (
    "LC_",
    "XDG_",
    "NODE_",
    "npm_config_",
    "NPM_CONFIG_",
    "ANTHROPIC_",
    "CLAUDE_",
    "OPENAI_",
    "CODEX_",
    "GEMINI_",
    "GOOGLE_",
)


def adapter_environment(
    source: Mapping[str, str], extra_names: Iterable[str] = ()
) -> dict[str, str]:
    """The environment an adapter sees: the allowlist above plus `extra_names` (ACP_AGENT_ENV)."""
    wanted = set(extra_names)
    return {
        name: value
        for name, value in source.items()
        if name in ENV_NAMES or name in wanted or name.startswith(ENV_PREFIXES)
    }


@dataclass(frozen=True)
class ExitStatus:
    """How the adapter ended: an exit code, or the signal that killed it."""

    returncode: int

    def describe(self) -> str:
        if self.returncode < 0:
            try:
                name = signal.Signals(-self.returncode).name
            except ValueError:
                name = f"signal {-self.returncode}"
            return f"was killed by {name}"
        return f"exited with code {self.returncode}"


class StderrTail:
    """The last bytes an adapter wrote to stderr, for error messages."""

    def __init__(self, limit: int = STDERR_TAIL_BYTES) -> None:
        self._limit = limit
        self._chunks: deque[bytes] = deque()
        self._size = 0

    def add(self, data: bytes) -> None:
        self._chunks.append(data)
        self._size += len(data)
        while self._size - len(self._chunks[0]) >= self._limit and len(self._chunks) > 1:
            self._size -= len(self._chunks.popleft())

    def text(self, max_lines: int = 8) -> str:
        """The last non-blank lines, each cut to a readable length."""
        data = b"".join(self._chunks)[-self._limit :]
        lines = [line.rstrip() for line in data.decode("utf-8", "replace").splitlines()]
        kept = [_shorten(line) for line in lines if line.strip()]
        return "\n".join(kept[-max_lines:])


def _shorten(line: str, limit: int = STDERR_LINE_CHARS) -> str:
    return line if len(line) <= limit else line[: limit - 1] + "…"


class AdapterProcess:
    """One running adapter and the tasks that watch it."""

    def __init__(
        self, proc: asyncio.subprocess.Process, label: str, records: SpawnRecords | None = None
    ) -> None:
        self.proc = proc
        self.label = label
        self._records = records
        self.stderr_tail = StderrTail()
        self.exited = asyncio.Event()
        self.stderr_closed = asyncio.Event()
        # Descendants seen outside the adapter's group and session: (pid, start time).
        self.escapees: set[tuple[int, str]] = set()
        self._exit_callbacks: list[Callable[[ExitStatus], None]] = []
        self._watchers: list[asyncio.Task[None]] = []
        self._stopping = False
        # Ids the process serves (session_id, context_id), added to its exit log line.
        self.log_fields: dict[str, str] = {}
        self._stopped: asyncio.Event | None = None
        # Whether the adapter exited before the bridge decided to stop it (a crash).
        self.exited_on_its_own = False
        entry = read_entry(proc.pid)
        self._start_time = entry.start if entry is not None else None

    @property
    def start_time(self) -> str | None:
        """The start time of /proc/<pid>/stat (clock ticks since boot): tells a reused pid."""
        return self._start_time

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def stdin(self) -> asyncio.StreamWriter:
        assert self.proc.stdin is not None
        return self.proc.stdin

    @property
    def stdout(self) -> asyncio.StreamReader:
        assert self.proc.stdout is not None
        return self.proc.stdout

    @property
    def exit_status(self) -> ExitStatus | None:
        code = self.proc.returncode
        return None if code is None else ExitStatus(code)

    @property
    def stopping(self) -> bool:
        """True once the bridge decided to stop it: an exit after that is not a crash."""
        return self._stopping

    def expect_exit(self) -> None:
        """The bridge is about to end the adapter (closing its connection first, say): an
        exit from now on is expected, not a crash."""
        self._stopping = True

    def on_exit(self, callback: Callable[[ExitStatus], None]) -> None:
        """Call `callback` (synchronously, once) when the process exits."""
        status = self.exit_status
        if status is not None and self.exited.is_set():
            callback(status)
        else:
            self._exit_callbacks.append(callback)

    async def settle(self, within_s: float) -> None:
        """Wait (bounded) for the exit status and the end of stderr, for a full report."""
        with anyio.move_on_after(within_s):
            await self.exited.wait()
            await self.stderr_closed.wait()

    def describe_exit(self, name: str | None = None) -> str:
        """'NAME (pid N) exited with code C; last lines of its stderr: ...'."""
        status = self.exit_status
        what = status.describe() if status is not None else "closed its connection"
        tail = self.stderr_tail.text()
        message = f"{name or self.label} (pid {self.pid}) {what}"
        return f"{message}; last lines of its stderr:\n{tail}" if tail else message

    def _start_watchers(self) -> None:
        # A fresh context: the watchers outlive the task that spawned the adapter, and its
        # bound log ids (logs.log_ids) would be wrong on their lines.
        self._watchers = [
            asyncio.create_task(
                self._pump_stderr(), name=f"stderr:{self.pid}", context=contextvars.Context()
            ),
            asyncio.create_task(
                self._watch_exit(), name=f"exit:{self.pid}", context=contextvars.Context()
            ),
        ]

    async def _pump_stderr(self) -> None:
        stream = self.proc.stderr
        try:
            if stream is None:
                return
            pending = b""
            debug = logger.isEnabledFor(logging.DEBUG)
            while True:
                try:
                    data = await stream.read(STDERR_CHUNK)
                except Exception:
                    return
                if not data:
                    if pending and debug:
                        self._log_stderr(pending)
                    return
                self.stderr_tail.add(data)
                if debug:
                    *lines, pending = (pending + data).split(b"\n")
                    for line in lines:
                        self._log_stderr(line)
                    if len(pending) > STDERR_LINE_CHARS:
                        self._log_stderr(pending)
                        pending = b""
        finally:
            self.stderr_closed.set()

    def _log_stderr(self, line: bytes) -> None:
        text = line.decode("utf-8", "replace").rstrip()
        if text:
            logger.debug("adapter stderr", extra={"pid": self.pid, "line": _shorten(text)})

    async def _watch_exit(self) -> None:
        # Process.wait() would not return while a grandchild holds the pipes open;
        # the returncode set by the child watcher does, so poll it.
        _TREE.watch(self)
        try:
            while self.proc.returncode is None:
                _TREE.maybe_scan()
                await asyncio.sleep(EXIT_POLL_S)
        finally:
            _TREE.forget(self)
        self.exited_on_its_own = not self._stopping
        self.exited.set()
        status = ExitStatus(self.proc.returncode)
        logger.log(
            logging.INFO if self._stopping else logging.WARNING,
            "adapter exited",
            extra={
                "pid": self.pid,
                "agent": self.label,
                "code": status.returncode,
                "exit": status.describe(),
                "expected": self._stopping,
                **self.log_fields,
            },
        )
        callbacks, self._exit_callbacks = self._exit_callbacks, []
        for callback in callbacks:
            try:
                callback(status)
            except Exception:
                logger.exception("adapter exit callback failed", extra={"pid": self.pid})

    async def stop(self, grace: float = STOP_GRACE_S, term_grace: float = TERM_GRACE_S) -> None:
        """Stop the adapter and every process of its tree. Safe to call twice; shielded."""
        if self._stopped is not None:
            with anyio.CancelScope(shield=True):
                await self._stopped.wait()
            return
        self._stopped = asyncio.Event()
        self._stopping = True
        with anyio.CancelScope(shield=True):
            try:
                await self._stop(grace, term_grace)
            finally:
                if self._records is not None:
                    self._records.forget(self.pid)
                self._stopped.set()

    async def _stop(self, grace: float, term_grace: float) -> None:
        # Read the tree before stdin closes: once the adapter exits, its children are
        # re-parented and only their group or session still ties them to it.
        table = process_table()
        remembered = set(self.escapees)
        if self._owns_ids(table):
            remembered |= _descendants(table, self.pid)
        # An adapter that already died (a crash) leaves orphans that no stdin EOF will
        # reach: they get SIGTERM at once, so the conversation's next adapter need not wait.
        crashed = self.exited.is_set() and self.exited_on_its_own
        with contextlib.suppress(Exception):
            if self.proc.stdin is not None and not self.proc.stdin.is_closing():
                self.proc.stdin.close()
        # Otherwise the whole tree gets the grace to wind down on its own (claude's native
        # child outlives its node parent by a moment, saving the session that a later
        # session/load reads).
        with anyio.move_on_after(0 if crashed else grace):
            await self.exited.wait()
            while self._tree(remembered):  # noqa: ASYNC110 - no event tells of a tree
                await asyncio.sleep(EXIT_POLL_S)
        survivors = self._tree(remembered)
        if survivors:
            logger.info(
                "adapter tree still running after stdin closed: terminating it",
                extra={"pid": self.pid, "processes": len(survivors)},
            )
            self._signal(signal.SIGTERM, survivors)
            with anyio.move_on_after(term_grace):
                while self._tree(remembered):  # noqa: ASYNC110 - no event tells of a tree
                    await asyncio.sleep(EXIT_POLL_S)
        # Anything left (and anything forked while terminating) is killed, until none is.
        with anyio.move_on_after(KILL_WAIT_S):
            while True:
                survivors = self._tree(remembered)
                if not survivors:
                    break
                logger.warning(
                    "adapter tree ignored SIGTERM: killing it",
                    extra={"pid": self.pid, "processes": len(survivors)},
                )
                self._signal(signal.SIGKILL, survivors)
                await asyncio.sleep(EXIT_POLL_S)
        with anyio.move_on_after(term_grace):
            await self.exited.wait()
        # The tree is gone, so stderr is at EOF: let the pump read its last lines.
        with anyio.move_on_after(STDERR_SETTLE_S):
            await self.stderr_closed.wait()
        for watcher in self._watchers:
            watcher.cancel()
        for watcher in self._watchers:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await watcher
        # Reap the leader so no zombie is left behind.
        with contextlib.suppress(Exception), anyio.move_on_after(1.0):
            await self.proc.wait()

    def _tree(self, remembered: set[tuple[int, str]]) -> set[tuple[int, str]]:
        """Live processes of the adapter's tree: its session, its group, its descendants,
        and the escapees remembered earlier (with their own descendants)."""
        table = process_table()
        if not table:
            # No /proc: only the group can be asked (signal 0) whether it lives.
            return {(self.pid, "")} if self._owns_ids(table) and _group_alive(self.pid) else set()
        found: set[tuple[int, str]] = set()
        roots = [pid for pid, start in remembered if matches(table, pid, start)]
        if self._owns_ids(table):
            roots.append(self.pid)
            for pid, entry in table.items():
                if entry.ended:
                    continue
                if entry.sid == self.pid or entry.pgid == self.pid:
                    found.add((pid, entry.start))
        for root in roots:
            if root != self.pid:
                found.add((root, table[root].start))
            found |= {
                (pid, start) for pid, start in _descendants(table, root) if not table[pid].ended
            }
        return found

    def _owns_ids(self, table: Mapping[int, ProcessEntry]) -> bool:
        """Whether the adapter's pid still names its own group and session. Linux does not
        reuse a pid while a group or session of that id has a member, so once another
        process holds the pid, nothing of the adapter's group or session is left."""
        entry = table.get(self.pid)
        return entry is None or self._start_time is None or entry.start == self._start_time

    def _signal(self, sig: signal.Signals, processes: Iterable[tuple[int, str]]) -> None:
        table = process_table()
        if self._owns_ids(table):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.pid, sig)
        for pid, start in processes:
            if matches(table, pid, start):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, sig)


async def spawn(
    command: Sequence[str],
    *,
    cwd: Path,
    env: Mapping[str, str],
    label: str,
    confined: Confined | None = None,
    records: SpawnRecords | None = None,
) -> AdapterProcess:
    """Start the adapter in its own session and process group, with pipes on all three
    streams, confined when `confined` says how, dying with the bridge, recorded in
    `records` (with the marker in its environment). Shielded: a cancel during the spawn
    must not leave a process nobody owns."""
    environment = {**env, **(records.environment if records is not None else {})}
    with anyio.CancelScope(shield=True):
        try:
            with (
                confined.preexec() if confined is not None else contextlib.nullcontext()
            ) as preexec:
                proc = await asyncio.create_subprocess_exec(
                    *command,
                    stdin=asyncio.subprocess.PIPE,
                    stdout=asyncio.subprocess.PIPE,
                    stderr=asyncio.subprocess.PIPE,
                    cwd=str(cwd),
                    env=environment,
                    start_new_session=True,
                    limit=STDOUT_LINE_LIMIT,
                    preexec_fn=die_with_parent(os.getpid(), preexec),
                )
        except LandlockError as exc:
            raise AdapterStartError(f"cannot confine {label}: {exc}") from None
        except subprocess.SubprocessError:
            # Raised for an exception in preexec_fn: the kernel refused the confinement.
            raise AdapterStartError(
                f"cannot start {label}: the kernel refused to confine it (Landlock); "
                "the adapter was not run"
            ) from None
        except FileNotFoundError:
            raise AdapterStartError(f"cannot start {label}: {command[0]!r} was not found") from None
        except PermissionError:
            raise AdapterStartError(
                f"cannot start {label}: {command[0]!r} is not executable"
            ) from None
        except OSError as exc:
            raise AdapterStartError(f"cannot start {label}: {exc.strerror}") from None
        process = AdapterProcess(proc, label, records)
        if records is not None and process.start_time is not None:
            # Without a start time (no /proc, or the adapter already gone) a record could
            # never tell the adapter from a successor holding its pid: none is written.
            records.written(proc.pid, process.start_time, label)
        process._start_watchers()
    logger.info(
        "adapter spawned",
        extra={
            "pid": proc.pid,
            "agent": label,
            "cwd": str(cwd),
            "isolation": confined.label if confined is not None else "off",
        },
    )
    return process


# --- the process table (Linux /proc; elsewhere only the group signal applies) ------------
# One reader for the bridge: the adapters' stop here and the stop of a previous bridge's
# leftovers (leftovers.py) both judge processes by these entries.


@dataclass(frozen=True, slots=True)
class ProcessEntry:
    """One process as /proc/<pid>/stat tells it (its pid is the table's key)."""

    ppid: int
    pgid: int
    sid: int
    state: str
    start: str  # start time in clock ticks since boot: tells a reused pid apart

    @property
    def ended(self) -> bool:
        """A zombie (or dead): the process is over, only its entry is left to reap."""
        return self.state in ("Z", "X")


def process_table() -> dict[int, ProcessEntry]:
    """Every process this user can see, by pid (empty without /proc)."""
    table: dict[int, ProcessEntry] = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return table
    for name in names:
        if name.isdigit():
            entry = read_entry(int(name))
            if entry is not None:
                table[int(name)] = entry
    return table


def read_entry(pid: int) -> ProcessEntry | None:
    """The process `pid` from /proc/<pid>/stat, or None when there is none."""
    # os.open/os.read: half the cost of open() per process.
    try:
        fd = os.open(f"/proc/{pid}/stat", os.O_RDONLY)
        try:
            raw = os.read(fd, 4096)
        finally:
            os.close(fd)
    except OSError:
        return None
    # The command name is in parentheses and may itself contain spaces or parentheses.
    fields = raw[raw.rfind(b")") + 2 :].split()
    if len(fields) < 20:
        return None
    return ProcessEntry(
        ppid=int(fields[1]),
        pgid=int(fields[2]),
        sid=int(fields[3]),
        state=fields[0].decode(),
        start=fields[19].decode(),
    )


def _descendants(table: Mapping[int, ProcessEntry], root: int) -> set[tuple[int, str]]:
    children: dict[int, list[int]] = {}
    for pid, entry in table.items():
        children.setdefault(entry.ppid, []).append(pid)
    found: set[tuple[int, str]] = set()
    stack = list(children.get(root, []))
    while stack:
        pid = stack.pop()
        found.add((pid, table[pid].start))
        stack.extend(children.get(pid, []))
    return found


def matches(table: Mapping[int, ProcessEntry], pid: int, start: str) -> bool:
    """Whether `pid` in `table` is the process that started at `start`, still running."""
    return _is_running(table.get(pid), start)


def is_running(pid: int, start: str) -> bool:
    """Whether `pid` is, as of this read, the process that started at `start`, still
    running: the check just before a signal, so a successor holding the pid is spared."""
    return _is_running(read_entry(pid), start)


def _is_running(entry: ProcessEntry | None, start: str) -> bool:
    return entry is not None and entry.start == start and not entry.ended


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class _TreeWatch:
    """Remembers, for every running adapter, the descendants that left its process group
    and session: once their parent dies they are re-parented away, and only this memory
    still ties them to the adapter. One scan of the process table serves all adapters."""

    def __init__(self) -> None:
        self._watched: set[AdapterProcess] = set()
        self._last_scan = 0.0

    def watch(self, process: AdapterProcess) -> None:
        self._watched.add(process)

    def forget(self, process: AdapterProcess) -> None:
        self._watched.discard(process)

    def maybe_scan(self) -> None:
        now = time.monotonic()
        if now - self._last_scan < TREE_SCAN_S or not self._watched:
            return
        self._last_scan = now
        table = process_table()
        for process in self._watched:
            process.escapees = {
                (pid, start) for pid, start in process.escapees if matches(table, pid, start)
            }
            leader = process.pid
            for pid, start in _descendants(table, leader):
                entry = table[pid]
                if entry.pgid != leader and entry.sid != leader:
                    process.escapees.add((pid, start))


_TREE = _TreeWatch()
