#!/usr/bin/env python3
"""The large fuzz of the A2A surface: many hostile requests, counted by status class.

    .venv/bin/python bench/fuzz.py [--examples N] [--seed S]

The same probes and judge as the suite's bounded fuzz (tests/test_fuzz.py,
tests/support/fuzz.py), against the real server over HTTP with the scripted agent, but
thousands of them with a random seed, and nothing stops at the first fault: at the end it
prints how many answers fell in each status class, the faults found by kind (5xx,
exception text, cut streams, internal errors), the first few in full, how many log
records carried a traceback or were ERRORs, and whether the server still served a normal
request. Exit status 1 when anything was found.
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import anyio
import anyio.from_thread
import httpx
from hypothesis import HealthCheck, given, seed, settings

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from tests.support.agents import scripted_agent  # noqa: E402
from tests.support.fuzz import Probe, Tally, deliver, judge, probes  # noqa: E402
from tests.support.server import make_settings, serve_bridge  # noqa: E402
from tests.support.wire import send  # noqa: E402

SCRIPT = {"turns": [[{"op": "say", "text": "fuzzed"}]]}
SHOWN = int(__import__("os").environ.get("FUZZ_SHOWN", "8"))


class Counted(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.tracebacks = 0
        self.errors = 0

    def emit(self, record: logging.LogRecord) -> None:
        self.tracebacks += bool(record.exc_info or record.exc_text)
        self.errors += record.levelno >= logging.ERROR


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--examples", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=None)
    args = parser.parse_args()
    logging.basicConfig(level=logging.CRITICAL)
    counted = Counted()
    logging.getLogger().addHandler(counted)
    logging.getLogger().setLevel(logging.INFO)
    tally = Tally()
    kinds: Counter[str] = Counter()
    hung = 0
    with tempfile.TemporaryDirectory() as tmp, anyio.from_thread.start_blocking_portal() as portal:
        tmp_path = Path(tmp)
        env = {"ACP_AGENT": scripted_agent(tmp_path, SCRIPT), "ACP_MAX_SESSIONS": "4"}
        with portal.wrap_async_context_manager(serve_bridge(make_settings(tmp_path, env))) as run:
            client = portal.call(_client)
            task: dict[str, Any] = portal.call(send, client, run.rpc_url, "seed")
            task_id = str(task["id"])

            @settings(
                max_examples=args.examples,
                deadline=None,
                database=None,
                suppress_health_check=list(HealthCheck),
            )
            @given(probe=probes(task_id))
            def one(probe: Probe) -> None:
                nonlocal hung
                try:
                    answer = portal.call(deliver, client, run.url, probe)
                except TimeoutError:
                    hung += 1
                    tally.faults.append(f"{probe.operation}/{probe.mutation}: no answer")
                    kinds["hang"] += 1
                    return
                fault = judge(probe, answer.status, answer.body, stream_cut=answer.stream_cut)
                tally.add(answer.status, fault, probe)
                if fault is not None:
                    kinds[fault.split(" ", 2)[0] + " " + fault.split(" ", 2)[1]] += 1

            if args.seed is not None:
                one = seed(args.seed)(one)
            one()
            after: dict[str, Any] = portal.call(send, client, run.rpc_url, "after the fuzz")
            portal.call(client.aclose)
    alive = after["status"]["state"] == "TASK_STATE_COMPLETED"
    total = sum(tally.by_status.values()) + hung
    print(f"requests: {total}")
    print("by status class: " + ", ".join(f"{k} {v}" for k, v in sorted(tally.by_status.items())))
    print(f"faults: {len(tally.faults)} " + ", ".join(f"{k}: {v}" for k, v in kinds.most_common()))
    for fault in tally.faults[:SHOWN]:
        print(f"  {fault[:300]}")
    print(f"log records with a traceback: {counted.tracebacks}; ERROR records: {counted.errors}")
    print(f"a normal request afterwards: {'served' if alive else 'NOT served'}")
    return 1 if tally.faults or not alive else 0


async def _client() -> httpx.AsyncClient:
    return httpx.AsyncClient(timeout=httpx.Timeout(20.0))


if __name__ == "__main__":
    sys.exit(main())
