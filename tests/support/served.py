"""The bridge as an operator runs it: `python -m a2a_acp_bridge serve` in a working
directory of its own (its `.env`, its token file), a child process of the test.

The attack tests need the real thing: a bridge process distinct from the test's, whose
`/proc/<pid>/environ` holds its secrets, whose working directory holds its `.env`, and
whose death an attack could cause without taking the test down with it.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import anyio.abc

# How long the bridge gets to say it is listening, and to stop after SIGTERM.
LISTEN_WITHIN_S = 30.0
STOP_WITHIN_S = 30.0
# Variables of the test's own environment that would configure the bridge under test.
FOREIGN_PREFIXES = ("ACP_", "A2A_", "PORT", "HOST", "PUBLIC_URL", "AGENT_NAME", "LOG_")


@dataclass
class ServedBridge:
    """A running `serve`: its pid, its URL and every JSON line it logged so far."""

    process: anyio.abc.Process
    lines: list[dict[str, Any]] = field(default_factory=list)
    url: str | None = None
    listening: anyio.Event = field(default_factory=anyio.Event)
    ended: anyio.Event = field(default_factory=anyio.Event)

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def port(self) -> int:
        assert self.url is not None
        return int(self.url.rsplit(":", 1)[1])

    async def read_stderr(self) -> None:
        assert self.process.stderr is not None
        buffer = b""
        try:
            async for chunk in self.process.stderr:
                buffer += chunk
                *complete, buffer = buffer.split(b"\n")
                for raw in complete:
                    try:
                        entry = json.loads(raw)
                    except ValueError:
                        continue
                    self.lines.append(entry)
                    if entry.get("event") == "listening":
                        self.url = entry["url"]
                        self.listening.set()
        finally:
            self.ended.set()

    def events(self, name: str) -> list[dict[str, Any]]:
        return [line for line in self.lines if line.get("event") == name]


def bridge_environment(extra: Mapping[str, str]) -> dict[str, str]:
    """The test's environment without any bridge setting, plus `extra`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(FOREIGN_PREFIXES)}
    env.update({"PORT": "0", "LOG_FORMAT": "json", "ACP_POOL_SIZE": "0"})
    env.update(extra)
    return env


@contextlib.asynccontextmanager
async def served_bridge(
    workdir: Path, env: Mapping[str, str], *, launcher: Sequence[str] = ()
) -> AsyncIterator[ServedBridge]:
    """`serve` in `workdir` (launched through `launcher`, if any) until the block ends."""
    command = [*launcher, sys.executable, "-m", "a2a_acp_bridge", "serve"]
    process = await anyio.open_process(
        command, cwd=workdir, env=dict(env), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL
    )
    served = ServedBridge(process)
    try:
        async with anyio.create_task_group() as group:
            group.start_soon(served.read_stderr)
            with anyio.fail_after(LISTEN_WITHIN_S):
                await _first(served.listening, served.ended)
            if not served.listening.is_set():
                raise AssertionError(f"the bridge did not start: {served.lines}")
            try:
                yield served
            finally:
                if process.returncode is None:
                    process.send_signal(signal.SIGTERM)
                with anyio.fail_after(STOP_WITHIN_S):
                    await process.wait()
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


async def _first(*events: anyio.Event) -> None:
    async with anyio.create_task_group() as group:

        async def wait(event: anyio.Event) -> None:
            await event.wait()
            group.cancel_scope.cancel()

        for event in events:
            group.start_soon(wait, event)


def run_serve(
    workdir: Path, env: Mapping[str, str], *, launcher: Sequence[str] = (), timeout_s: float = 30
) -> subprocess.CompletedProcess[str]:
    """`serve` expected to stop on its own (a refused start)."""
    command = [*launcher, sys.executable, "-m", "a2a_acp_bridge", "serve"]
    return subprocess.run(
        command,
        cwd=workdir,
        env=dict(env),
        capture_output=True,
        text=True,
        timeout=timeout_s,
        stdin=subprocess.DEVNULL,
    )
