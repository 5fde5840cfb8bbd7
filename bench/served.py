"""A bridge served as its own process for the benchmarks: started, waited for, stopped."""

from __future__ import annotations

import signal
import subprocess
import time
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path

# How long a bridge may take to answer /healthz after its start.
START_TIMEOUT_S = 60.0
# How long a stopped bridge may take to end its turns and exit before it is killed.
STOP_TIMEOUT_S = 30.0


def serve(
    command: Sequence[str], cwd: str | Path, env: Mapping[str, str], port: int
) -> subprocess.Popen[bytes]:
    """Start the bridge and return once it answers /healthz (RuntimeError if it cannot)."""
    proc = subprocess.Popen(
        list(command), cwd=cwd, env=dict(env), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1).read()
            return proc
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                stop(proc)
                raise RuntimeError(f"the bridge on port {port} did not start") from None
            time.sleep(0.05)


def stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM, then SIGKILL past STOP_TIMEOUT_S."""
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
