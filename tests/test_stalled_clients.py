"""Clients that stall are timed out and cannot exhaust the server: headers and body have
deadlines, connections have a cap, and a flood of them is logged once, not per connection."""

from __future__ import annotations

import logging
from pathlib import Path
from urllib.parse import urlsplit

import anyio
import httpx
import pytest
from anyio.abc import SocketStream

from tests.support.server import make_settings, serve_bridge

pytestmark = pytest.mark.anyio

# Every read of a stalled connection is bounded by this.
READ_S = 10.0
LIMITS = {"A2A_HEADER_TIMEOUT_MS": "300", "A2A_BODY_TIMEOUT_MS": "300", "A2A_MAX_CONNECTIONS": "20"}


async def connect(url: str) -> SocketStream:
    parts = urlsplit(url)
    assert parts.hostname == "127.0.0.1"
    assert parts.port is not None
    return await anyio.connect_tcp(parts.hostname, parts.port)


async def read_until_closed(stream: SocketStream) -> bytes:
    """Everything the server sends until it closes the connection (then ours is closed)."""
    received = b""
    try:
        with anyio.fail_after(READ_S):
            while True:
                received += await stream.receive()
    except (anyio.EndOfStream, anyio.BrokenResourceError, ConnectionResetError):
        pass
    finally:
        await stream.aclose()
    return received


async def test_a_client_that_stops_sending_its_headers_gets_408_and_is_closed(
    tmp_path: Path,
) -> None:
    async with serve_bridge(make_settings(tmp_path, LIMITS)) as running:
        stream = await connect(running.url)
        await stream.send(b"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Ty")
        answer = await read_until_closed(stream)
    assert answer.startswith(b"HTTP/1.1 408 ")


async def test_a_client_that_connects_and_sends_nothing_is_closed(tmp_path: Path) -> None:
    async with serve_bridge(make_settings(tmp_path, LIMITS)) as running:
        stream = await connect(running.url)
        answer = await read_until_closed(stream)
    assert answer.startswith(b"HTTP/1.1 408 ")


async def test_a_client_that_stops_sending_its_body_is_closed(tmp_path: Path) -> None:
    async with serve_bridge(make_settings(tmp_path, LIMITS)) as running:
        stream = await connect(running.url)
        await stream.send(
            b"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b'Content-Length: 100\r\n\r\n{"jsonrpc": '
        )
        answer = await read_until_closed(stream)
    # Closed; whatever it answered, it is not a task.
    assert b"TASK_STATE" not in answer


async def test_stalled_clients_beyond_the_cap_get_503_and_the_server_recovers(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="a2a_acp_bridge")
    async with serve_bridge(make_settings(tmp_path, LIMITS)) as running:
        stalled = [await connect(running.url) for _ in range(20)]
        for stream in stalled:
            await stream.send(b"GET /healthz HTTP/1.1\r\n")
        extra = await connect(running.url)
        refused = await read_until_closed(extra)
        answers = [await read_until_closed(stream) for stream in stalled]
        async with httpx.AsyncClient(timeout=10) as client:
            healthy = (await client.get(running.url + "/healthz")).status_code
    assert refused.startswith(b"HTTP/1.1 503 ")
    assert all(answer.startswith(b"HTTP/1.1 408 ") for answer in answers)
    assert healthy == 200
    lines = [r.getMessage() for r in caplog.records]
    assert sum("headers did not arrive" in line for line in lines) == 1
    assert sum("too many open connections" in line for line in lines) == 1
