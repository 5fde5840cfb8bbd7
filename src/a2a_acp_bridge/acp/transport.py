"""The NDJSON transport between the bridge and an adapter, with a fast path for updates.

The ACP SDK's own stdio transport hands every message to its router, which validates it
with pydantic, wraps it in a tracing span and runs it as a task of its own: about 25 µs
of CPU per streamed chunk, most of the bridge's cost on a fast agent. This transport
gives the SDK only requests and responses: every `session/update` notification of a
session the bridge knows is handed to `on_update` synchronously, in wire order, before
the next message is read. The answer to `session/prompt` is returned to the SDK only
after every update sent before it, so a turn's events are complete when it ends.

It also closes two traps of the SDK's transport: a JSON value that is not an object is
logged and skipped (the SDK's receive loop dies on it), and a failed write raises on
every later send instead of hanging.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from typing import Any

logger = logging.getLogger(__name__)

UpdateHandler = Callable[[dict[str, Any]], bool]


class StdioTransport:
    """Messages over an adapter's stdin and stdout (the SDK's `Transport` protocol)."""

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        on_update: UpdateHandler,
    ) -> None:
        self._reader = reader
        self._writer = writer
        self._on_update = on_update
        self._write_lock = asyncio.Lock()
        self._broken: BaseException | None = None

    async def send(self, message: dict[str, Any]) -> None:
        if self._broken is not None:
            raise ConnectionError("the adapter's stdin is closed") from self._broken
        data = json.dumps(message, separators=(",", ":"), ensure_ascii=False).encode() + b"\n"
        async with self._write_lock:
            try:
                self._writer.write(data)
                await self._writer.drain()
            except (ConnectionError, OSError, RuntimeError) as exc:
                self._broken = exc
                raise ConnectionError("the adapter's stdin is closed") from exc

    async def receive(self) -> dict[str, Any] | None:
        while True:
            line = await self._read_line()
            if not line:
                return None
            line = line.strip()
            if not line:
                continue
            try:
                message = json.loads(line)
            except ValueError:
                logger.warning("adapter wrote a line that is not JSON", extra={"bytes": len(line)})
                continue
            if not isinstance(message, dict):
                logger.warning("adapter wrote JSON that is not an object; skipped")
                continue
            if message.get("method") == "session/update" and "id" not in message:
                params = message.get("params")
                if isinstance(params, dict) and self._on_update(params):
                    continue
            return message

    async def close(self) -> None:
        async with self._write_lock:
            try:
                if not self._writer.is_closing():
                    self._writer.close()
            except (ConnectionError, OSError, RuntimeError):
                pass

    async def _read_line(self) -> bytes:
        pieces: list[bytes] = []
        try:
            while True:
                try:
                    pieces.append(await self._reader.readuntil(b"\n"))
                    return b"".join(pieces)
                except asyncio.LimitOverrunError as exc:
                    # A line longer than the reader's buffer: take what is there, go on.
                    pieces.append(await self._reader.readexactly(exc.consumed))
        except asyncio.IncompleteReadError as exc:
            pieces.append(exc.partial)
            return b"".join(pieces)
        except (ConnectionError, OSError):
            return b""
