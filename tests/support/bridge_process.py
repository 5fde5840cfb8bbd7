"""The bridge as a real process (`python -m a2a_acp_bridge serve`), for restart tests.

It listens on 127.0.0.1 with PORT=0 and logs JSON lines to a file; the bound URL is read
from its `listening` line. `stop(signal)` sends a real signal and waits (bounded) for the
exit. The adapters it started are read from its log (`adapter spawned`), so a test can end
those a SIGKILLed bridge left behind, by pid, after checking each is still that process.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import anyio

# How long a bridge process may take to listen, and to exit after a signal.
PROCESS_START_S = 30.0
PROCESS_EXIT_S = 40.0


class BridgeProcess:
    def __init__(self, workdir: Path, env: Mapping[str, str], name: str = "bridge") -> None:
        self.workdir = workdir
        self.log_path = workdir / f"{name}.log.jsonl"
        base = {k: v for k, v in os.environ.items() if not k.startswith(("ACP_", "A2A_"))}
        self.env = {
            **base,
            "HOST": "127.0.0.1",
            "PORT": "0",
            "LOG_FORMAT": "json",
            "LOG_LEVEL": "DEBUG",
            "ACP_POOL_SIZE": "0",
            **env,
        }
        self.proc: subprocess.Popen[bytes] | None = None
        self.url = ""

    @property
    def rpc_url(self) -> str:
        return self.url + "/"

    def _spawn(self) -> subprocess.Popen[bytes]:
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "a2a_acp_bridge", "serve"],
                cwd=self.workdir,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=log,
            )
        return self.proc

    async def start(self) -> BridgeProcess:
        """Start it and wait (bounded) until it listens."""
        proc = self._spawn()
        with anyio.fail_after(PROCESS_START_S):
            while not self.url:  # polled: another process's log file
                for entry in self.events("listening"):
                    self.url = str(entry["url"])
                if not self.url and proc.poll() is not None:
                    raise AssertionError(
                        f"the bridge exited with {proc.returncode}: {self.log_text()[-2000:]}"
                    )
                await anyio.sleep(0.02)
        return self

    async def run_to_exit(self) -> int:
        """Start it and wait (bounded) for it to exit on its own: for refused starts."""
        self._spawn()
        return await self.wait_exit()

    async def wait_exit(self) -> int:
        assert self.proc is not None
        with anyio.fail_after(PROCESS_EXIT_S):
            while self.proc.poll() is None:  # noqa: ASYNC110 - a child process's exit
                await anyio.sleep(0.02)
        return self.proc.returncode

    async def stop(self, sig: signal.Signals = signal.SIGTERM) -> int:
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        return await self.wait_exit()

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def entries(self) -> list[dict[str, Any]]:
        found = []
        for line in self.log_text().splitlines():
            with contextlib.suppress(ValueError):
                found.append(json.loads(line))
        return found

    def events(self, name: str) -> list[dict[str, Any]]:
        return [entry for entry in self.entries() if entry.get("event") == name]

    def end_leftover_adapters(self) -> None:
        """SIGKILL the adapters this bridge spawned that still run (their process groups:
        each adapter leads one), checking each pid is still a test agent."""
        for entry in self.events("adapter spawned"):
            pid = int(entry["pid"])
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            except OSError:
                continue
            if b"a2a_acp_bridge.demo_agent" not in cmdline and b"scripted_agent" not in cmdline:
                continue
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=PROCESS_EXIT_S)
        self.end_leftover_adapters()
