#!/usr/bin/env python3
"""What the decision chain adds to a permission request: a 200-rule policy's decision, and
the ledger row's write (awaited before the answer leaves).

    .venv/bin/python bench/decisions.py [--reps N]

The policy has 200 rules over every kind (commands, globs, hosts, tools), in a handed root
on the real filesystem; each request (a compound command, a command with a redirection, an
edit of three paths, a fetch, a read of a secret) goes through `decisions.judge`, which is
what the chain runs before any supervisor: the floor, the policy, and the table where the
policy leaves it. The ledger part writes one decision's rows through the state writer into
a real SQLite database (WAL, synchronous=FULL) and times `DecisionLedger.record`, which
returns once the batch is committed. Numbers are printed, never asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from a2a_acp_bridge.boundary import Boundary
from a2a_acp_bridge.decisions import DecisionChain, Outcome, Where, judge
from a2a_acp_bridge.ledger import DecisionLedger
from a2a_acp_bridge.permissions import PermissionRequest, Supervision, decide
from a2a_acp_bridge.policy import parse_policy
from a2a_acp_bridge.state import StateDatabase

RULES = 200


def policy_text() -> str:
    rules = []
    for n in range(RULES):
        kind = ("execute", "edit", "read", "fetch", "other")[n % 5]
        decision = ("allow", "deny", "ask")[n % 3]
        if kind == "execute":
            spec = f'commands = ["tool{n} run", "tool{n} check --all"]'
        elif kind in ("edit", "read"):
            spec = f'paths = ["pkg{n}/**", "**/*.ext{n}", "docs/{n}/*.md"]'
        elif kind == "fetch":
            spec = f'hosts = ["host{n}.example.com", "*.domain{n}.org"]'
        else:
            spec = f'tools = ["mcp__server{n}__*"]'
        rules.append(f'[[rule]]\nid = "r{n}"\nkind = "{kind}"\ndecision = "{decision}"\n{spec}\n')
    rules.append(
        '[[rule]]\nid = "tests"\nkind = "execute"\ndecision = "allow"\ncommands = ["npm test", "git status"]\n'
    )
    rules.append('[[rule]]\nid = "src"\nkind = "edit"\ndecision = "allow"\npaths = ["src/**"]\n')
    return "\n".join(rules)


def requests(root: Path) -> dict[str, PermissionRequest]:
    def run(command: str) -> PermissionRequest:
        return PermissionRequest("c", title=command, kind="execute", raw_input={"command": command})

    return {
        "execute compound": run("npm test && git status && tool7 run x | tool13 check --all"),
        "execute redirect": run("npm test > out.log 2>&1"),
        "edit 3 paths": PermissionRequest(
            "e", kind="edit", locations=("src/a.py", "src/b/c.py", str(root / "src" / "d.py"))
        ),
        "fetch": PermissionRequest("f", kind="fetch", raw_input={"url": "https://x.domain7.org/a"}),
        "read secret": PermissionRequest("r", kind="read", locations=("pkg12/.env",)),
    }


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def bench_policy(reps: int) -> None:
    policy = parse_policy(policy_text())
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch).resolve() / "repo"
        (root / "src" / "b").mkdir(parents=True)
        boundary = Boundary(root, owned=False)
        print(
            f"policy: {len(policy.rules)} rules, {reps} reps, µs per request: the policy alone "
            "(Policy.evaluate: what a policy adds), the whole judge() (floor, policy, table "
            "where the policy leaves it), and the built-in table alone (decide) for comparison"
        )
        print(
            f"{'request':<18} {'verdict':<18} {'policy p50':>10} {'p99':>7} "
            f"{'judge p50':>10} {'p99':>7} {'table p50':>10} {'p99':>7}"
        )
        for name, request in requests(root).items():
            ruling = judge(request, boundary, Supervision(), policy).ruling
            columns = []
            for call in (
                lambda r=request: policy.evaluate(r, boundary),
                lambda r=request: judge(r, boundary, Supervision(), policy),
                lambda r=request: decide(r, boundary, Supervision()),
            ):
                times = []
                for _ in range(reps):
                    start = time.perf_counter()
                    call()
                    times.append((time.perf_counter() - start) * 1e6)
                columns.append(f"{statistics.median(times):10.1f} {percentile(times, 0.99):7.1f}")
            shown = f"{ruling.verdict} {ruling.rule}"[:18]
            print(f"{name:<18} {shown:<18} {' '.join(columns)}")


async def bench_ledger(reps: int, scratch: str) -> None:
    async with StateDatabase(Path(scratch) / "state") as database:
        ledger = DecisionLedger(database)
        chain = DecisionChain(ledger=ledger)
        request = PermissionRequest("c", title="npm test", kind="execute")
        where = Where(adapter="bench", session_id="s", context_id="ctx", task_id="t")
        judgement = judge(request, Boundary(Path("/"), owned=True), Supervision(), None)
        assert judgement.decision is not None
        outcome = Outcome(judgement.decision, (judgement.ruling,))
        times = []
        for _ in range(reps):
            rows = chain.entries(outcome, request, where, chosen="allow-once", allowed=True)
            start = time.perf_counter()
            await ledger.record(rows)
            times.append((time.perf_counter() - start) * 1e3)
        print(f"\nledger: one decision's row, awaited until committed, {reps} reps")
        print(
            f"record()  p50 {statistics.median(times):.2f} ms  p99 "
            f"{percentile(times, 0.99):.2f} ms  max {max(times):.2f} ms"
        )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--reps", type=int, default=2000)
    args = parser.parse_args()
    bench_policy(args.reps)
    with tempfile.TemporaryDirectory() as scratch:
        asyncio.run(bench_ledger(max(50, args.reps // 10), scratch))


if __name__ == "__main__":
    main()
