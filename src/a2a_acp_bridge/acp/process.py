"""An adapter subprocess: spawned in its own process group, watched, and stopped whole.

The bridge spawns adapters itself instead of using the ACP SDK's spawn helper, which
leaks grandchildren, never reads stderr and trims the environment. Here:

- the adapter gets its own process group (and session), so the whole tree can be signalled;
- stdin stays open (adapters exit on EOF) until `stop` closes it on purpose;
- stderr is read continuously: a bounded tail is kept for error messages, every line goes
  to the log at DEBUG, so a chatty adapter never blocks on a full pipe;
- a watchdog polls the exit status, because a grandchild holding stdout open means the
  pipe never reaches EOF when the adapter itself dies;
- `stop` closes stdin, waits, then signals the group (TERM, then KILL) and sweeps any
  descendant that left the group, so no process of the tree survives.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import os
import signal
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import anyio

from a2a_acp_bridge.errors import AdapterStartError

logger = logging.getLogger(__name__)

# How often the watchdog looks at the exit status. 50 ms keeps "the task fails within a
# second of a crash" with a wide margin and costs nothing measurable.
EXIT_POLL_S = 0.05
# Bytes of stderr kept for error messages: enough for a stack trace, bounded for a flood.
STDERR_TAIL_BYTES = 16 * 1024
# Longest line the NDJSON reader takes in one piece before reassembling (big diffs).
STDOUT_LINE_LIMIT = 8 * 1024 * 1024
# After stdin closes, how long an adapter gets to exit on its own (claude: 0.05 s; codex
# 2.6 needs 3.5-4.7 s to wind down its app-server, so its tree is signalled at this point).
STOP_GRACE_S = 2.0
# After SIGTERM, how long the group gets before SIGKILL.
TERM_GRACE_S = 2.0

# Environment variables handed to adapters when set, by exact name or by prefix.
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
        while self._size > self._limit and len(self._chunks) > 1:
            self._size -= len(self._chunks.popleft())

    def text(self, max_lines: int = 8) -> str:
        data = b"".join(self._chunks)[-self._limit :]
        lines = data.decode("utf-8", "replace").splitlines()
        return "\n".join(line.rstrip() for line in lines[-max_lines:] if line.strip())


class AdapterProcess:
    """One running adapter and the tasks that watch it."""

    def __init__(self, proc: asyncio.subprocess.Process, label: str) -> None:
        self.proc = proc
        self.label = label
        self.stderr_tail = StderrTail()
        self.exited = asyncio.Event()
        self._exit_callbacks: list[Callable[[ExitStatus], None]] = []
        self._watchers: list[asyncio.Task[None]] = []
        self._stopping = False
        # Ids the process serves (session_id, context_id), added to its exit log line.
        self.log_fields: dict[str, str] = {}

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

    def on_exit(self, callback: Callable[[ExitStatus], None]) -> None:
        """Call `callback` (synchronously, once) when the process exits."""
        status = self.exit_status
        if status is not None and self.exited.is_set():
            callback(status)
        else:
            self._exit_callbacks.append(callback)

    def describe_exit(self) -> str:
        status = self.exit_status
        what = status.describe() if status is not None else "closed its connection"
        tail = self.stderr_tail.text()
        message = f"{self.label} (pid {self.pid}) {what}"
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
        if stream is None:
            return
        with contextlib.suppress(Exception):
            while True:
                line = await stream.readline()
                if not line:
                    return
                self.stderr_tail.add(line)
                if logger.isEnabledFor(logging.DEBUG):
                    logger.debug(
                        "adapter stderr",
                        extra={"pid": self.pid, "line": line.decode("utf-8", "replace").rstrip()},
                    )

    async def _watch_exit(self) -> None:
        # Process.wait() would not return while a grandchild holds the pipes open;
        # the returncode set by the child watcher does, so poll it.
        while self.proc.returncode is None:  # noqa: ASYNC110
            await asyncio.sleep(EXIT_POLL_S)
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
        self._stopping = True
        with anyio.CancelScope(shield=True):
            descendants = _descendants(self.pid)
            with contextlib.suppress(Exception):
                if self.proc.stdin is not None and not self.proc.stdin.is_closing():
                    self.proc.stdin.close()
            with anyio.move_on_after(grace):
                await self.exited.wait()
            if _group_alive(self.pid):
                _signal_group(self.pid, signal.SIGTERM)
                with anyio.move_on_after(term_grace):
                    while _group_alive(self.pid):  # noqa: ASYNC110 - no event tells of a group
                        await asyncio.sleep(EXIT_POLL_S)
            if _group_alive(self.pid):
                _signal_group(self.pid, signal.SIGKILL)
            # Descendants that moved to a session of their own escape the group signal.
            for pid, start in descendants:
                if _same_process(pid, start):
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.kill(pid, signal.SIGKILL)
            with anyio.move_on_after(term_grace):
                await self.exited.wait()
            for watcher in self._watchers:
                watcher.cancel()
            for watcher in self._watchers:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await watcher
            # Reap the leader so no zombie is left behind.
            with contextlib.suppress(Exception), anyio.move_on_after(1.0):
                await self.proc.wait()


async def spawn(
    command: Sequence[str],
    *,
    cwd: Path,
    env: Mapping[str, str],
    label: str,
) -> AdapterProcess:
    """Start the adapter in its own process group with pipes on all three streams."""
    try:
        proc = await asyncio.create_subprocess_exec(
            *command,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            cwd=str(cwd),
            env=dict(env),
            start_new_session=True,
            limit=STDOUT_LINE_LIMIT,
        )
    except FileNotFoundError:
        raise AdapterStartError(f"cannot start {label}: {command[0]!r} was not found") from None
    except PermissionError:
        raise AdapterStartError(f"cannot start {label}: {command[0]!r} is not executable") from None
    except OSError as exc:
        raise AdapterStartError(f"cannot start {label}: {exc.strerror}") from None
    process = AdapterProcess(proc, label)
    process._start_watchers()
    logger.info("adapter spawned", extra={"pid": proc.pid, "agent": label, "cwd": str(cwd)})
    return process


# --- process tree helpers (Linux /proc; elsewhere only the group signal applies) ---------


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie leader still counts as a member: look for a live one.
    return (
        any(_state(pid) not in ("Z", "X", None) for pid in _group_members(pgid))
        or not Path("/proc").is_dir()
    )


def _stat_fields(pid: int) -> list[str] | None:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name is in parentheses and may contain spaces.
    return raw[raw.rfind(")") + 2 :].split()


def _state(pid: int) -> str | None:
    fields = _stat_fields(pid)
    return fields[0] if fields else None


def _group_members(pgid: int) -> list[int]:
    members = []
    for entry in _proc_pids():
        fields = _stat_fields(entry)
        if fields and len(fields) > 2 and int(fields[2]) == pgid:
            members.append(entry)
    return members


def _proc_pids() -> list[int]:
    try:
        return [int(name) for name in os.listdir("/proc") if name.isdigit()]
    except OSError:
        return []


def _descendants(root: int) -> list[tuple[int, str]]:
    """Every descendant of `root`, with its start time (to recognise pid reuse later)."""
    children: dict[int, list[int]] = {}
    starts: dict[int, str] = {}
    for pid in _proc_pids():
        fields = _stat_fields(pid)
        if not fields or len(fields) < 20:
            continue
        children.setdefault(int(fields[1]), []).append(pid)
        starts[pid] = fields[19]
    found: list[tuple[int, str]] = []
    stack = list(children.get(root, []))
    while stack:
        pid = stack.pop()
        found.append((pid, starts.get(pid, "")))
        stack.extend(children.get(pid, []))
    return found


def _same_process(pid: int, start: str) -> bool:
    fields = _stat_fields(pid)
    if fields is None or len(fields) < 20:
        return False
    return fields[19] == start and fields[0] not in ("Z", "X")
