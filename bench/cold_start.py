#!/usr/bin/env python3
"""First answer of a new conversation with real adapters: the warm pool, and the cost of
adapter isolation.

    ./scripts/bench --cold-start        (needs the adapters installed by ./scripts/test)

claude-agent-acp and codex-acp run for real against the test suite's fake model servers
(tests/fakes, on 127.0.0.1), each with a throwaway HOME. For each adapter and pool size
(0: the adapter starts when the message arrives; 1: one adapter waits, already started
and supervised), several new contexts send one message whose model answer is plain text;
the time from the POST to the first answer text and to the end is recorded.

Then, for the demo agent and both adapters, with ACP_ISOLATION off and on: the adapter's
spawn-to-session time (spawn, initialize, session/new, the supervised mode), the first
answer of a new conversation without the pool, and a warm turn (a second message in the
same conversation).
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from tests.fakes.anthropic import FakeAnthropic  # noqa: E402
from tests.fakes.openai import FakeOpenAI  # noqa: E402
from tests.fakes.script import Say, Script  # noqa: E402
from tests.support.real_adapters import HTTP_TIMEOUT_S, Rig, claude_rig, codex_rig  # noqa: E402
from tests.support.server import make_settings, serve_bridge  # noqa: E402
from tests.support.wire import user_message  # noqa: E402

from a2a_acp_bridge.bridge import Bridge  # noqa: E402

CONTEXTS = 4
# Adapter starts measured for the spawn-to-session time, per adapter and isolation mode.
STARTS = 10
# A warm adapter is ready once the pool holds it; wait at most this long for the refill.
POOL_FILL_S = 60.0


async def first_answer(
    client: httpx.AsyncClient, url: str, text: str, context_id: str | None = None
) -> tuple[float, float]:
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "SendStreamingMessage",
        "params": {"message": user_message(text, context_id=context_id)},
    }
    started = time.perf_counter()
    first = None
    headers = {"A2A-Version": "1.0", "Content-Type": "application/json"}
    async with client.stream("POST", url, json=body, headers=headers) as response:
        async for line in response.aiter_lines():
            if (
                '"artifactId":"answer"' in line.replace(" ", "")
                and '"text"' in line
                and first is None
            ):
                first = time.perf_counter()
            if "TASK_STATE_COMPLETED" in line or "TASK_STATE_FAILED" in line:
                break
    ended = time.perf_counter()
    return ((first or ended) - started) * 1000, (ended - started) * 1000


async def measure(preset: str, pool: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix=f"bench-cold-{preset}-") as scratch:
        tmp = Path(scratch)
        fake: Any = FakeAnthropic() if preset == "claude" else FakeOpenAI()
        fake.start()
        try:
            rig = claude_rig(fake, tmp) if preset == "claude" else codex_rig(fake, tmp)
            settings = rig.settings(tmp, ACP_POOL_SIZE=str(pool))
            firsts, totals = [], []
            async with (
                serve_bridge(settings, environ=rig.environ) as running,
                httpx.AsyncClient(timeout=HTTP_TIMEOUT_S) as client,
            ):
                for _ in range(CONTEXTS):
                    if pool:
                        with anyio.fail_after(POOL_FILL_S):
                            while running.bridge.warm_adapters < pool:  # noqa: ASYNC110
                                await anyio.sleep(0.05)
                        await anyio.sleep(0.5)  # let the refill's own start-up settle
                    script = fake.add(Script([Say("ready")]))
                    first, total = await first_answer(
                        client, running.rpc_url, f"hello {script.marker}"
                    )
                    firsts.append(first)
                    totals.append(total)
            return {
                "first_text_ms": statistics.median(firsts),
                "total_ms": statistics.median(totals),
                "runs": len(firsts),
            }
        finally:
            fake.stop()


def make_rig(preset: str, fake: Any, tmp: Path) -> Rig | None:
    if preset == "claude":
        return claude_rig(fake, tmp)
    if preset == "codex":
        return codex_rig(fake, tmp)
    return None


def rig_settings(preset: str, fake: Any, tmp: Path, isolation: str) -> tuple[Any, Any]:
    rig = make_rig(preset, fake, tmp)
    env = {"ACP_ISOLATION": isolation, "ACP_POOL_SIZE": "0"}
    if rig is None:
        return make_settings(tmp, env), None
    return rig.settings(tmp, **env), rig.environ


async def start_once(preset: str, fake: Any, tmp: Path, isolation: str) -> float:
    """One adapter start, spawn to supervised session, in a bridge of its own."""
    settings, environ = rig_settings(preset, fake, tmp, isolation)
    bridge = Bridge(settings, environ=environ)
    bridge.isolation.deny_ports([1])  # as a served bridge does for its own port
    async with bridge:
        boundary = bridge.homes.attach(bridge.sandboxes.create())
        started = time.perf_counter()
        session = await bridge._start(boundary, load_session_id=None)
        elapsed = (time.perf_counter() - started) * 1000
        await session.close()
    return elapsed


async def turns(preset: str, fake: Any, tmp: Path, isolation: str) -> tuple[float, float]:
    """Medians of the first answer of new contexts (no pool) and of a warm second turn."""
    settings, environ = rig_settings(preset, fake, tmp, isolation)
    firsts, warms = [], []
    async with (
        serve_bridge(settings, environ=environ) as running,
        httpx.AsyncClient(timeout=HTTP_TIMEOUT_S) as client,
    ):
        for index in range(CONTEXTS):
            context = f"bench-{isolation}-{index}"
            script = fake.add(Script([Say("ready")]))
            first, _ = await first_answer(client, running.rpc_url, f"hi {script.marker}", context)
            again = fake.add(Script([Say("again")]))
            warm, _ = await first_answer(client, running.rpc_url, f"again {again.marker}", context)
            firsts.append(first)
            warms.append(warm)
    return statistics.median(firsts), statistics.median(warms)


async def measure_isolation(preset: str) -> dict[str, dict[str, float]]:
    """Spawn-to-session, first answer (pool 0) and a warm turn, isolation off and on,
    interleaved so that the shared machine's noise falls on both alike."""
    with tempfile.TemporaryDirectory(prefix=f"bench-iso-{preset}-") as scratch:
        fake: Any = FakeOpenAI() if preset == "codex" else FakeAnthropic()
        fake.start()
        try:
            starts: dict[str, list[float]] = {"off": [], "on": []}
            for index in range(STARTS):
                order = ("off", "on") if index % 2 == 0 else ("on", "off")
                for isolation in order:
                    tmp = Path(tempfile.mkdtemp(dir=scratch))
                    starts[isolation].append(await start_once(preset, fake, tmp, isolation))
            rows = {}
            for isolation in ("off", "on"):
                tmp = Path(tempfile.mkdtemp(dir=scratch))
                first, warm = await turns(preset, fake, tmp, isolation)
                rows[isolation] = {
                    "spawn_to_session_ms": statistics.median(starts[isolation]),
                    "first_text_ms": first,
                    "warm_text_ms": warm,
                }
            return rows
        finally:
            fake.stop()


async def main() -> int:
    print(f"== first answer of a new context, real adapters (median of {CONTEXTS} contexts)")
    print(f"{'adapter':8} {'pool':>4} {'1st text ms':>12} {'total ms':>9}")
    results: dict[str, Any] = {}
    for preset in ("claude", "codex"):
        for pool in (0, 1):
            row = await measure(preset, pool)
            results[f"{preset}-pool{pool}"] = row
            print(f"{preset:8} {pool:4} {row['first_text_ms']:12.0f} {row['total_ms']:9.0f}")
    print(
        f"== isolation off vs on (median of {STARTS} starts, {CONTEXTS} contexts; "
        "demo: the embedded agent)"
    )
    print(f"{'adapter':8} {'isolation':>9} {'start ms':>9} {'1st text ms':>12} {'warm ms':>8}")
    for preset in ("demo", "claude", "codex"):
        rows = await measure_isolation(preset)
        for isolation, row in rows.items():
            results[f"{preset}-isolation-{isolation}"] = row
            print(
                f"{preset:8} {isolation:>9} {row['spawn_to_session_ms']:9.0f} "
                f"{row['first_text_ms']:12.0f} {row['warm_text_ms']:8.0f}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
