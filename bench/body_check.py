#!/usr/bin/env python3
"""How long the body check (a2a/bodies.py `check_body`) holds the event loop on the
largest bodies the bridge takes (A2A_MAX_BODY_BYTES, 32 MiB by default).

    .venv/bin/python bench/body_check.py [--mib N] [--rounds R]

Prints the best of R rounds per body shape, in seconds, beside a plain `json.loads`. The check runs inline on the
event loop for every JSON POST, so a replica's heartbeat (A2A_LEASE_TTL_MS) waits for it.
"""

from __future__ import annotations

import argparse
import base64
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
from a2a_acp_bridge.a2a.bodies import check_body  # noqa: E402


def one_file_part(size: int) -> bytes:
    """A SendMessage whose one part is a base64 file of about `size` bytes."""
    data = base64.b64encode(b"\0" * (size * 3 // 4)).decode()
    part = {"raw": data, "mediaType": "application/octet-stream", "filename": "f"}
    message = {"messageId": "m", "role": "ROLE_USER", "parts": [part]}
    body = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": message}}
    return json.dumps(body).encode()


def integers(size: int) -> bytes:
    """An array of small integers of about `size` bytes (the most tokens per byte)."""
    return b"[" + b",".join([b"1"] * (size // 2)) + b"]"


def small_objects(size: int) -> bytes:
    """An array of one-key objects of about `size` bytes (the most objects per byte)."""
    return b"[" + b",".join([b'{"a":1}'] * (size // 8)) + b"]"


def best(check: Callable[[], object], rounds: int) -> float:
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        check()
        times.append(time.perf_counter() - started)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    size = args.mib * 1024 * 1024
    for shape in (one_file_part, integers, small_objects):
        body = shape(size)
        _value, problem = check_body(body)
        assert problem is None, problem
        took = best(lambda body=body: check_body(body), args.rounds)
        # The floor: what the SDK's own parse of the same body costs anyway.
        floor = best(lambda body=body: json.loads(body), args.rounds)
        print(
            f"{shape.__name__:>14}: {len(body) / 2**20:5.1f} MiB  check {took:6.2f} s"
            f"  (json.loads alone {floor:5.2f} s)"
        )


if __name__ == "__main__":
    main()
