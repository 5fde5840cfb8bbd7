"""The reference: a plain ACP SDK client talking to the stream agent, no bridge.

What a caller would get by driving the agent itself with `agent-client-protocol`: the
SDK's own stdio transport, one `session_update` handler that collects text. It runs in a
venv of its own that holds only `agent-client-protocol` (scripts/bench makes it): with
OpenTelemetry importable, as in the bridge's venv, the SDK would trace every message and
the reference would be slower than a user's client.

    python direct.py turns N S D REPS      -> {"cold": [...], "warm": [...]}
    python direct.py concurrent K N S      -> {"times_ms": [...], "chunks_per_s": x, "ok": b}
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from acp import PROTOCOL_VERSION, connect_to_agent, text_block
from acp.schema import AgentMessageChunk, ClientCapabilities

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from measure import cpu_seconds  # noqa: E402
from stream_agent import expected_text  # noqa: E402


@dataclass
class Collector:
    parts: list[str] = field(default_factory=list)
    first_text_at: float | None = None

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        if isinstance(update, AgentMessageChunk) and update.content.type == "text":
            if self.first_text_at is None:
                self.first_text_at = time.perf_counter()
            self.parts.append(update.content.text)

    async def request_permission(self, **kwargs: Any) -> Any:
        raise RuntimeError("the stream agent asks nothing")


@dataclass
class Turn:
    total_ms: float
    first_text_ms: float
    ok: bool
    cpu_us_per_chunk: float


class DirectAgent:
    """One stream agent process and one session, driven by the SDK client."""

    async def start(self, python: str) -> float:
        started = time.perf_counter()
        self.proc = await asyncio.create_subprocess_exec(
            python,
            str(HERE / "stream_agent.py"),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
            limit=8 * 1024 * 1024,
        )
        self.collector = Collector()
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.conn = connect_to_agent(self.collector, self.proc.stdin, self.proc.stdout)  # type: ignore[arg-type]
        await self.conn.initialize(
            protocol_version=PROTOCOL_VERSION, client_capabilities=ClientCapabilities()
        )
        session = await self.conn.new_session(cwd=os.getcwd(), mcp_servers=[])
        self.session_id = session.session_id
        return (time.perf_counter() - started) * 1000

    async def turn(self, n: int, size: int, delay_us: int = 0) -> Turn:
        self.collector.parts.clear()
        self.collector.first_text_at = None
        cpu_before = cpu_seconds(os.getpid())
        started = time.perf_counter()
        await self.conn.prompt(
            session_id=self.session_id, prompt=[text_block(f"stream {n} {size} {delay_us}")]
        )
        ended = time.perf_counter()
        cpu = cpu_seconds(os.getpid()) - cpu_before
        first = self.collector.first_text_at or ended
        ok = "".join(self.collector.parts) == expected_text(n, size)
        return Turn((ended - started) * 1000, (first - started) * 1000, ok, cpu / n * 1e6)

    async def stop(self) -> None:
        await self.conn.close()
        if self.proc.returncode is None:
            self.proc.kill()
        await self.proc.wait()


async def cold_and_warm(python: str, n: int, size: int, delay_us: int = 0) -> tuple[Turn, Turn]:
    agent = DirectAgent()
    started = time.perf_counter()
    spawn_ms = await agent.start(python)
    cold = await agent.turn(n, size, delay_us)
    cold = Turn(
        cold.total_ms + spawn_ms, cold.first_text_ms + spawn_ms, cold.ok, cold.cpu_us_per_chunk
    )
    warm = await agent.turn(n, size, delay_us)
    await agent.stop()
    del started
    return cold, warm


async def concurrent(
    python: str, streams: int, n: int, size: int
) -> tuple[list[float], float, bool]:
    agents = [DirectAgent() for _ in range(streams)]
    for agent in agents:
        await agent.start(python)
    started = time.perf_counter()

    async def one(agent: DirectAgent) -> tuple[float, bool]:
        turn = await agent.turn(n, size)
        return (time.perf_counter() - started) * 1000, turn.ok

    results = await asyncio.gather(*(one(agent) for agent in agents))
    wall = time.perf_counter() - started
    for agent in agents:
        await agent.stop()
    return [r[0] for r in results], streams * n / wall, all(r[1] for r in results)


def main(argv: list[str]) -> None:
    python = sys.executable
    if argv[0] == "turns":
        n, size, delay, reps = (int(x) for x in argv[1:5])
        runs: dict[str, list[dict[str, Any]]] = {"cold": [], "warm": []}
        for _ in range(reps):
            cold, warm = asyncio.run(cold_and_warm(python, n, size, delay))
            runs["cold"].append(vars(cold))
            runs["warm"].append(vars(warm))
        print(json.dumps(runs))
    elif argv[0] == "concurrent":
        streams, n, size = (int(x) for x in argv[1:4])
        times, rate, ok = asyncio.run(concurrent(python, streams, n, size))
        print(json.dumps({"times_ms": times, "chunks_per_s": rate, "ok": ok}))
    else:
        raise SystemExit(f"unknown measure {argv[0]!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
