#!/usr/bin/env python3
"""Replicas on one PostgreSQL (docs/scaling.md), measured: a warm turn through a replica
that does not run the conversation against one through the replica that does, and the
aggregate throughput of 3 replicas against 1 with the demo agent.

    .venv/bin/python bench/replicas.py [--turns 30] [--clients 6] [--seconds 20]

It starts a throw-away PostgreSQL as the tests do (tests/support/postgres.py, Debian's
`postgresql` package) and real `a2a-acp-bridge serve` processes on 127.0.0.1, and writes
the figures to bench/out/replicas.json. On a 2-core machine the replicas, the database, the
agents and the client share the CPU: the throughput ratio says more about that than about
the design.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))
import served  # noqa: E402
from bridge_client import send_streaming  # noqa: E402
from measure import median, percentile  # noqa: E402
from stream_agent import expected_text  # noqa: E402
from tests.support.postgres import PostgresCluster, postgres_binaries  # noqa: E402

PYTHON = sys.executable
STREAM_AGENT = f"{PYTHON} {HERE / 'stream_agent.py'}"
OUT = HERE / "out"
PUSH_KEY = "a" * 43 + "="


class Replica:
    def __init__(self, scratch: Path, name: str, url: str, agent: str | None) -> None:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        workdir = scratch / name
        workdir.mkdir()
        env = {
            **os.environ,
            "A2A_DATABASE_URL": url,
            "A2A_PUSH_KEY": PUSH_KEY,
            "ACP_POOL_SIZE": "1",
            "ACP_MAX_SESSIONS": "32",
            "LOG_LEVEL": "WARNING",
            "ACP_SANDBOX_DIR": str(scratch / "sandboxes"),
            "ACP_STATE_DIR": str(scratch / "state"),
        }
        command = [PYTHON, "-m", "a2a_acp_bridge", "serve", "--port", str(self.port)]
        if agent:
            command += ["--agent", agent]
        self.proc = served.serve(command, workdir, env, self.port)

    def stop(self) -> None:
        served.stop(self.proc)


def start(cluster: PostgresCluster, scratch: Path, count: int, agent: str | None) -> list[Replica]:
    url = cluster.url(cluster.create_database())
    replicas = [Replica(scratch, f"r{i}", url, agent) for i in range(count)]
    time.sleep(1.0)  # the warm pools fill
    return replicas


def warm_turns(replicas: list[Replica], turns: int) -> dict[str, Any]:
    owner, other = replicas[0], replicas[1]
    context = send_streaming(owner.port, "sleep 0").context_id
    times: dict[str, list[float]] = {"owner": [], "other": []}
    ok = True
    for i in range(turns * 2):
        replica, side = (owner, "owner") if i % 2 == 0 else (other, "other")
        stream = send_streaming(replica.port, "stream 20 64 0", context)
        ok = ok and stream.text == expected_text(20, 64) and stream.state == "TASK_STATE_COMPLETED"
        times[side].append(stream.total_ms)
    return {
        "owner_ms": median(times["owner"]),
        "other_ms": median(times["other"]),
        "owner_p90_ms": percentile(times["owner"], 90),
        "other_p90_ms": percentile(times["other"], 90),
        "extra_ms": median(times["other"]) - median(times["owner"]),
        "ok": ok,
    }


def throughput(replicas: list[Replica], clients: int, seconds: float) -> dict[str, Any]:
    """Clients each run new conversations (one short turn) round-robin over the replicas."""
    done = [0] * clients
    failed = [0] * clients
    stop_at = time.monotonic() + seconds

    def client(index: int) -> None:
        turn = index
        while time.monotonic() < stop_at:
            replica = replicas[turn % len(replicas)]
            turn += 1
            stream = send_streaming(replica.port, "think a short turn")
            if stream.state == "TASK_STATE_COMPLETED":
                done[index] += 1
            else:
                failed[index] += 1

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    wall = time.monotonic() - started
    return {"turns_per_s": sum(done) / wall, "failed": sum(failed), "turns": sum(done)}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--turns", type=int, default=30)
    parser.add_argument("--clients", type=int, default=6)
    parser.add_argument("--seconds", type=float, default=20.0)
    args = parser.parse_args()
    bin_dir = postgres_binaries()
    if bin_dir is None:
        print("PostgreSQL is not installed (apt-get install postgresql)", file=sys.stderr)
        return 1
    cluster = PostgresCluster(bin_dir)
    cluster.start()
    results: dict[str, Any] = {}
    try:
        with tempfile.TemporaryDirectory(prefix="bench-replicas-") as scratch_name:
            scratch = Path(scratch_name)
            (scratch / "one").mkdir()
            (scratch / "three").mkdir()
            three = start(cluster, scratch / "three", 3, STREAM_AGENT)
            try:
                results["warm_turn"] = warm_turns(three, args.turns)
            finally:
                for replica in three:
                    replica.stop()
            for count, name in ((1, "one"), (3, "three")):
                directory = scratch / name / "demo"
                directory.mkdir()
                running = start(cluster, directory, count, None)
                try:
                    results[f"throughput_{count}"] = throughput(running, args.clients, args.seconds)
                finally:
                    for replica in running:
                        replica.stop()
    finally:
        cluster.stop()
    one, three_tp = results["throughput_1"]["turns_per_s"], results["throughput_3"]["turns_per_s"]
    results["throughput_ratio"] = three_tp / one if one else None
    warm = results["warm_turn"]
    print(
        f"warm turn (20 chunks): owner {warm['owner_ms']:.1f} ms, through another replica "
        f"{warm['other_ms']:.1f} ms (+{warm['extra_ms']:.1f} ms; target +20 ms), ok={warm['ok']}"
    )
    print(
        f"throughput, demo agent, {args.clients} clients: 1 replica {one:.1f} turns/s, "
        f"3 replicas {three_tp:.1f} turns/s (x{results['throughput_ratio']:.2f})"
    )
    OUT.mkdir(exist_ok=True)
    (OUT / "replicas.json").write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
