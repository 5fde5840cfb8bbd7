"""What the scripted agents logged, and whether the processes they started still run.

Each scripted agent started with a `log` path appends one JSON line per event; the
processes it starts are logged with their pid and start time, so a reused pid is never
mistaken for a survivor. Only processes the test's own agents started are looked at.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio

PROCESS_EVENTS = ("start", "grandchild", "child", "daemon", "wrapper")
# How long a test waits for a stopped tree to be gone (the bridge gives a tree up to
# about 6 s: stdin close, SIGTERM, SIGKILL).
GONE_WITHIN_S = 15.0


@dataclass(frozen=True)
class Proc:
    pid: int
    start: str
    event: str

    def alive(self) -> bool:
        """Running (a zombie is not) and still the same process."""
        try:
            raw = Path(f"/proc/{self.pid}/stat").read_bytes()
        except OSError:
            return False
        fields = raw[raw.rfind(b")") + 2 :].split()
        return fields[19].decode() == self.start and fields[0] not in (b"Z", b"X")


def read_log(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def events(path: Path, name: str) -> list[dict[str, Any]]:
    return [entry for entry in read_log(path) if entry["event"] == name]


def processes(path: Path) -> list[Proc]:
    return [
        Proc(int(entry["pid"]), str(entry["start"]), entry["event"])
        for entry in read_log(path)
        if entry["event"] in PROCESS_EVENTS
    ]


def living(path: Path) -> list[Proc]:
    return [proc for proc in processes(path) if proc.alive()]


async def wait_until_gone(path: Path, within_s: float = GONE_WITHIN_S) -> list[Proc]:
    """Poll (bounded) until no process the agents logged runs; return the survivors."""
    with anyio.move_on_after(within_s):
        while living(path):  # noqa: ASYNC110 - nothing signals another process's end
            await anyio.sleep(0.05)
    return living(path)


async def wait_for_event(path: Path, name: str, count: int = 1, within_s: float = 15.0) -> None:
    """Poll (bounded) until the agents logged `count` events called `name`."""
    with anyio.fail_after(within_s):
        while len(events(path, name)) < count:  # noqa: ASYNC110 - another process's file
            await anyio.sleep(0.02)
