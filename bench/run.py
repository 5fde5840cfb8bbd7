#!/usr/bin/env python3
"""The bridge's overhead, measured against a direct ACP SDK client on the same agent.

    ./scripts/bench                  # full run (a few minutes); --quick for a smoke run

Both sides drive `stream_agent.py` (standard library, starts in milliseconds). The direct
reference is a plain `agent-client-protocol` client; the bridge is started as a user
would start it (`a2a-acp-bridge serve --agent ...`) and driven over real HTTP with SSE.
Every answer is rebuilt and compared with the exact expected text. It prints a table per
measure with the ratio to the reference, checks the targets, and writes the numbers to
bench/out/results.json.

Run it on a quiet machine: on 2 cores the client, the bridge and the agent already
share the CPU.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import served  # noqa: E402
from bridge_client import send_streaming  # noqa: E402
from measure import cpu_seconds, descendants, median, percentile, rss_mib  # noqa: E402
from stream_agent import expected_text  # noqa: E402

PYTHON = sys.executable
# The reference runs in its own venv with only agent-client-protocol (see direct.py).
DIRECT_PYTHON = os.environ.get("BENCH_DIRECT_PYTHON", sys.executable)
AGENT = f"{PYTHON} {HERE / 'stream_agent.py'}"
OUT = HERE / "out"


class Bridge:
    """The bridge as a user runs it, on a free port, in a scratch directory."""

    def __init__(self, pool: int = 1) -> None:
        self.scratch = tempfile.TemporaryDirectory(prefix="bench-bridge-")
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        env = {
            **os.environ,
            "ACP_POOL_SIZE": str(pool),
            # The concurrent phase holds 10 conversations; the default cap is 8.
            "ACP_MAX_SESSIONS": "32",
            "LOG_LEVEL": "WARNING",
            "ACP_SANDBOX_DIR": str(Path(self.scratch.name) / "sandboxes"),
        }
        command = [
            PYTHON,
            "-m",
            "a2a_acp_bridge",
            "serve",
            "--agent",
            AGENT,
            "--port",
            str(self.port),
        ]
        self.proc = served.serve(command, self.scratch.name, env, self.port)
        # Let the warm pool fill before measuring.
        time.sleep(1.0 if pool else 0.1)

    def stop(self) -> None:
        served.stop(self.proc)
        self.scratch.cleanup()

    def cpu(self) -> float:
        return cpu_seconds(self.proc.pid)


def bridge_turn(
    bridge: Bridge, n: int, size: int, delay_us: int = 0, *, warm: bool
) -> dict[str, Any]:
    context = None
    if warm:
        context = send_streaming(bridge.port, "sleep 0").context_id
    cpu_before = bridge.cpu()
    stream = send_streaming(bridge.port, f"stream {n} {size} {delay_us}", context)
    cpu = bridge.cpu() - cpu_before
    return {
        "total_ms": stream.total_ms,
        "first_text_ms": stream.first_text_ms,
        "first_event_ms": stream.first_event_ms,
        "frames": stream.frames,
        "ok": stream.text == expected_text(n, size) and stream.state == "TASK_STATE_COMPLETED",
        "cpu_us_per_chunk": cpu / n * 1e6,
    }


def run_direct(*args: object) -> Any:
    """One measure of the reference client, in its own interpreter."""
    done = subprocess.run(
        [DIRECT_PYTHON, str(HERE / "direct.py"), *map(str, args)],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(done.stdout)


def direct_turns(n: int, size: int, delay_us: int, reps: int) -> dict[str, list[dict[str, Any]]]:
    runs: dict[str, list[dict[str, Any]]] = run_direct("turns", n, size, delay_us, reps)
    return runs


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "total_ms": median([r["total_ms"] for r in runs]),
        "first_text_ms": median([r["first_text_ms"] for r in runs]),
        "cpu_us_per_chunk": median([r["cpu_us_per_chunk"] for r in runs]),
        "frames": median([r.get("frames", 0) for r in runs]),
        "ok": all(r["ok"] for r in runs),
    }


def bridge_concurrent(
    bridge: Bridge, streams: int, n: int, size: int
) -> tuple[list[float], float, bool]:
    contexts = [send_streaming(bridge.port, "sleep 0").context_id for _ in range(streams)]
    results: list[tuple[float, bool]] = [(0.0, False)] * streams
    barrier = threading.Barrier(streams + 1)
    started = [0.0]

    def worker(index: int) -> None:
        barrier.wait()
        stream = send_streaming(bridge.port, f"stream {n} {size}", contexts[index])
        results[index] = (
            (time.perf_counter() - started[0]) * 1000,
            stream.text == expected_text(n, size) and stream.state == "TASK_STATE_COMPLETED",
        )

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(streams)]
    for thread in threads:
        thread.start()
    started[0] = time.perf_counter()
    barrier.wait()
    for thread in threads:
        thread.join()
    wall = max(r[0] for r in results) / 1000
    return [r[0] for r in results], streams * n / wall, all(r[1] for r in results)


def memory_per_context(contexts: int) -> dict[str, float]:
    bridge = Bridge(pool=0)
    try:
        send_streaming(bridge.port, "sleep 0")  # imports and first-use caches, not per context
        time.sleep(0.5)
        fresh = rss_mib(bridge.proc.pid)
        for _ in range(contexts):
            send_streaming(bridge.port, "sleep 0")
        time.sleep(1.0)
        after = rss_mib(bridge.proc.pid)
        agents = sum(rss_mib(pid) for pid in descendants(bridge.proc.pid))
        return {
            "server_fresh_mib": fresh,
            "server_after_mib": after,
            "server_per_context_mib": (after - fresh) / contexts,
            "agent_rss_per_context_mib": agents / (contexts + 1),
        }
    finally:
        bridge.stop()


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument(
        "--quick", action="store_true", help="one repetition, a tenth of the chunks"
    )
    args = parser.parse_args()
    reps = 1 if args.quick else args.reps
    scale = 10 if args.quick else 1
    workloads = [(20000 // scale, 20), (2000 // scale, 1000)]
    results: dict[str, Any] = {"reps": reps, "quick": args.quick, "workloads": {}}
    checks: list[tuple[str, bool, str]] = []

    print(f"bench: {reps} repetition(s); python {sys.version.split()[0]}; {os.cpu_count()} cores")
    print(f"reference client: {DIRECT_PYTHON}\n")
    bridge = Bridge()
    try:
        for n, size in workloads:
            name = f"{n}x{size}"
            ref = direct_turns(n, size, 0, reps)
            ours = {
                "cold": [bridge_turn(bridge, n, size, warm=False) for _ in range(reps)],
                "warm": [bridge_turn(bridge, n, size, warm=True) for _ in range(reps)],
            }
            row = {
                mode: {"direct": summarize(ref[mode]), "bridge": summarize(ours[mode])}
                for mode in ("cold", "warm")
            }
            results["workloads"][name] = row
            print(f"== single stream {name} (median of {reps})")
            print(
                f"{'':6} {'direct ms':>10} {'bridge ms':>10} {'ratio':>6} {'chunks/s':>10} {'1st text +ms':>12} {'frames':>7} {'ok':>3}"
            )
            for mode in ("cold", "warm"):
                d, b = row[mode]["direct"], row[mode]["bridge"]
                ratio = b["total_ms"] / d["total_ms"]
                print(
                    f"{mode:6} {d['total_ms']:10.1f} {b['total_ms']:10.1f} {ratio:5.2f}x "
                    f"{n / b['total_ms'] * 1000:10,.0f} {b['first_text_ms'] - d['first_text_ms']:+12.1f} "
                    f"{b['frames']:7.0f} {'yes' if b['ok'] and d['ok'] else 'NO':>3}"
                )
            warm_ratio = row["warm"]["bridge"]["total_ms"] / row["warm"]["direct"]["total_ms"]
            checks.append(
                (f"{name} warm within 2x of direct", warm_ratio <= 2.0, f"{warm_ratio:.2f}x")
            )
            checks.append(
                (
                    f"{name} every byte in order",
                    row["cold"]["bridge"]["ok"] and row["warm"]["bridge"]["ok"],
                    "",
                )
            )
            print()

        print("== paced agent: 200 chunks of 20 characters, 5 ms apart (warm)")
        ref = direct_turns(200, 20, 5000, reps)
        ours_paced = [bridge_turn(bridge, 200, 20, 5000, warm=True) for _ in range(reps)]
        d, b = summarize(ref["warm"]), summarize(ours_paced)
        lag = b["first_text_ms"] - d["first_text_ms"]
        print(
            f"first answer text: direct {d['first_text_ms']:.1f} ms, bridge {b['first_text_ms']:.1f} ms ({lag:+.1f} ms); "
            f"total {d['total_ms']:.0f} vs {b['total_ms']:.0f} ms\n"
        )
        results["paced"] = {"direct": d, "bridge": b}
        checks.append(("paced first text within 10 ms of direct", lag <= 10.0, f"{lag:+.1f} ms"))

        print("== scaling: bridge CPU per chunk as the answer grows (warm, S=20)")
        scaling = {}
        for n in (1000 // scale, 5000 // scale, 20000 // scale):
            runs = [bridge_turn(bridge, n, 20, warm=True) for _ in range(max(3, reps))]
            scaling[n] = median([r["cpu_us_per_chunk"] for r in runs])
            print(f"N={n:6}: {scaling[n]:7.1f} us/chunk of bridge CPU")
        ns = sorted(scaling)
        growth = scaling[ns[-1]] / scaling[ns[0]] if scaling[ns[0]] else float("nan")
        print(f"growth N={ns[-1]} / N={ns[0]}: {growth:.2f}x\n")
        results["scaling"] = {str(k): v for k, v in scaling.items()}
        checks.append(("CPU per chunk flat in N (within 1.3x)", growth <= 1.3, f"{growth:.2f}x"))

        print(f"== 10 concurrent streams of {2000 // scale}x20 (warm contexts)")
        reference = run_direct("concurrent", 10, 2000 // scale, 20)
        d_times, d_rate, d_ok = reference["times_ms"], reference["chunks_per_s"], reference["ok"]
        b_times, b_rate, b_ok = bridge_concurrent(bridge, 10, 2000 // scale, 20)
        print(
            f"direct: p50 {percentile(d_times, 0.5):.0f} ms, p95 {percentile(d_times, 0.95):.0f} ms, {d_rate:,.0f} chunks/s"
        )
        print(
            f"bridge: p50 {percentile(b_times, 0.5):.0f} ms, p95 {percentile(b_times, 0.95):.0f} ms, {b_rate:,.0f} chunks/s "
            f"({b_rate / d_rate:.2f}x of direct)\n"
        )
        results["concurrent"] = {
            "direct": {
                "p50_ms": percentile(d_times, 0.5),
                "p95_ms": percentile(d_times, 0.95),
                "chunks_per_s": d_rate,
                "ok": d_ok,
            },
            "bridge": {
                "p50_ms": percentile(b_times, 0.5),
                "p95_ms": percentile(b_times, 0.95),
                "chunks_per_s": b_rate,
                "ok": b_ok,
            },
        }
        checks.append(
            (
                "10 streams: at least half the direct throughput",
                b_rate >= 0.5 * d_rate,
                f"{b_rate / d_rate:.2f}x",
            )
        )
        checks.append(("10 streams: every byte in order", b_ok, ""))
    finally:
        bridge.stop()

    print("== memory per idle context (10 contexts)")
    memory = memory_per_context(10)
    results["memory"] = memory
    print(
        f"server RSS {memory['server_fresh_mib']:.1f} MiB fresh, {memory['server_after_mib']:.1f} MiB after; "
        f"{memory['server_per_context_mib'] * 1024:.0f} KiB per context; "
        f"each context's agent {memory['agent_rss_per_context_mib']:.1f} MiB\n"
    )

    print("== targets")
    for label, passed, detail in checks:
        print(f"{'PASS' if passed else 'FAIL'}  {label}  {detail}")
    OUT.mkdir(exist_ok=True)
    results["checks"] = [{"check": c[0], "passed": c[1], "value": c[2]} for c in checks]
    (OUT / "results.json").write_text(json.dumps(results, indent=2))
    print(f"\nnumbers: {OUT / 'results.json'}")
    return 0 if all(c[1] for c in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
