"""The NDJSON transport between the bridge and an adapter, with a fast path for updates.

The ACP SDK's own stdio transport hands every message to its router, which validates it
with pydantic, wraps it in a tracing span and runs it as a task of its own: about 25 µs
of CPU per streamed chunk, most of the bridge's cost on a fast agent. This transport
gives the SDK only requests and responses: every `session/update` notification of a
session the bridge knows is handed to `on_update` synchronously, in wire order, before
the next message is read. The answer to `session/prompt` is returned to the SDK only
after every update sent before it, so a turn's events are complete when it ends.

A `session/request_permission` the SDK cannot read (an unknown option kind, a missing id)
would be answered with a JSON-RPC error by the SDK, before the classifier sees it; here it
is answered `cancelled` and reported as a refusal (`on_bad_permission`).

It also closes two traps of the SDK's transport:

- after one failed write the SDK's sender task is dead and every later send hangs; here
  a write that fails marks the wire broken, tells the session at once (`on_broken`, so
  the task fails instead of waiting for a deadline), and every later send raises
  `ConnectionError`;
- a line that is JSON but not an object (`[1,2]`, `42`) kills the SDK's receive loop and
  fails every pending request although the agent is alive; here any line that is not a
  JSON object is logged and skipped, and the turn goes on.

One line is at most `max_line_bytes` (ACP_MAX_LINE_BYTES): the SDK's reader would keep a
line of any length, and a 400 MB one took the bridge to 853 MB. A longer line is not
kept: the wire is marked broken ("the agent sent a line over N bytes"), reading stops,
and the session stops the adapter.

Frames are logged at DEBUG, both ways.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from typing import Any

from acp.schema import RequestPermissionRequest
from pydantic import ValidationError

logger = logging.getLogger(__name__)

UpdateHandler = Callable[[dict[str, Any]], bool]
BadPermissionHandler = Callable[[Any, str], None]
PERMISSION_METHOD = "session/request_permission"

# How many skipped lines are logged at WARNING per connection (the rest at DEBUG).
SKIPPED_LINES_LOGGED = 5
# Characters of a skipped line, or of a frame, quoted in the log.
QUOTED_CHARS = 200
FRAME_CHARS = 2000
# The longest line the bridge takes from an adapter: far above any real message (a big
# file's diff, an image), far below what would exhaust a small machine.
DEFAULT_MAX_LINE_BYTES = 64 * 1024 * 1024


class StdioTransport:
    """Messages over an adapter's stdin and stdout (the SDK's `Transport` protocol)."""

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        on_update: UpdateHandler,
        *,
        label: str = "agent",
        on_broken: Callable[[str], None] = lambda _why: None,
        on_bad_permission: BadPermissionHandler = lambda _params, _problem: None,
        max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
    ) -> None:
        self._reader = reader
        self._writer = writer
        self._on_update = on_update
        self._label = label
        self._on_broken = on_broken
        self._on_bad_permission = on_bad_permission
        self._write_lock = asyncio.Lock()
        self.broken: str | None = None
        self.max_line_bytes = max_line_bytes
        # Set when the agent sent a line over the cap (the reason the wire is broken).
        self.overflow: str | None = None
        self.skipped_lines = 0
        # The agentInfo of the initialize answer as sent: the SDK drops one that misses a
        # field (a version, say), and the supervised mode is keyed by its name.
        self.raw_agent_info: dict[str, Any] | None = None
        self._closed = False

    async def send(self, message: dict[str, Any]) -> None:
        # An answer to the agent's own request is awaited by nobody but the SDK, which
        # would log a traceback for a failure the session already knows about.
        is_answer = "method" not in message
        if self.broken is not None or self._closed:
            if is_answer:
                return
            raise ConnectionError(self.broken or "the connection to the agent is closed")
        data = json.dumps(message, separators=(",", ":"), ensure_ascii=False).encode() + b"\n"
        if logger.isEnabledFor(logging.DEBUG):
            logger.debug("acp frame out", extra={"agent": self._label, "frame": data[:FRAME_CHARS]})
        async with self._write_lock:
            try:
                if self._writer.is_closing():
                    raise ConnectionResetError("stdin is closed")
                self._writer.write(data)
                await self._writer.drain()
            except (ConnectionError, OSError, RuntimeError) as exc:
                self._break(f"writing to the agent failed ({type(exc).__name__})")
                if is_answer:
                    return
                raise ConnectionError(self.broken) from None

    async def receive(self) -> dict[str, Any] | None:
        debug = logger.isEnabledFor(logging.DEBUG)
        while True:
            line = await self._read_line()
            if not line:
                return None
            line = line.strip()
            if not line:
                continue
            message = _object(line)
            if message is None:
                self._skip(line)
                continue
            if debug:
                logger.debug(
                    "acp frame in", extra={"agent": self._label, "frame": line[:FRAME_CHARS]}
                )
            if message.get("method") == "session/update" and "id" not in message:
                params = message.get("params")
                if isinstance(params, dict) and self._on_update(params):
                    continue
            elif message.get("method") == PERMISSION_METHOD and "id" in message:
                problem = permission_problem(message.get("params"))
                if problem is not None:
                    # The SDK would answer a JSON-RPC error, which adapters read as an
                    # abort (codex) or a tool failure with no reason: answer `cancelled`,
                    # the one answer every adapter takes, and report the refusal.
                    self._on_bad_permission(message.get("params"), problem)
                    await self.send(
                        {
                            "jsonrpc": "2.0",
                            "id": message["id"],
                            "result": {"outcome": {"outcome": "cancelled"}},
                        }
                    )
                    continue
            elif self.raw_agent_info is None:
                result = message.get("result")
                if isinstance(result, dict) and isinstance(result.get("agentInfo"), dict):
                    self.raw_agent_info = result["agentInfo"]
            return message

    async def close(self) -> None:
        self._closed = True
        async with self._write_lock:
            try:
                if not self._writer.is_closing():
                    self._writer.close()
            except (ConnectionError, OSError, RuntimeError):
                pass

    def _break(self, why: str) -> None:
        if self.broken is None:
            self.broken = why
            logger.warning("acp wire broken", extra={"agent": self._label, "reason": why})
            self._on_broken(why)

    def _skip(self, line: bytes) -> None:
        self.skipped_lines += 1
        level = logging.WARNING if self.skipped_lines <= SKIPPED_LINES_LOGGED else logging.DEBUG
        logger.log(
            level,
            "agent wrote a line that is not a JSON-RPC message; skipped",
            extra={
                "agent": self._label,
                "line": line[:QUOTED_CHARS].decode("utf-8", "replace"),
                "skipped": self.skipped_lines,
            },
        )

    async def _read_line(self) -> bytes:
        """The next line, or b"" at the end (or when the line is over the cap)."""
        pieces: list[bytes] = []
        size = 0
        try:
            while True:
                try:
                    piece = await self._reader.readuntil(b"\n")
                    last = True
                except asyncio.LimitOverrunError as exc:
                    # A line longer than the reader's buffer: take what is there, go on.
                    piece = await self._reader.readexactly(exc.consumed)
                    last = False
                size += len(piece)
                if size > self.max_line_bytes:
                    return self._too_long()
                pieces.append(piece)
                if last:
                    return b"".join(pieces)
        except asyncio.IncompleteReadError as exc:
            if size + len(exc.partial) > self.max_line_bytes:
                return self._too_long()
            pieces.append(exc.partial)
            return b"".join(pieces)
        except (ConnectionError, OSError):
            return b""

    def _too_long(self) -> bytes:
        """Give up on the wire: what was read of the line is dropped, nothing more is read."""
        self.overflow = f"the agent sent a line over {self.max_line_bytes} bytes"
        self._break(self.overflow)
        return b""


def _object(line: bytes) -> dict[str, Any] | None:
    """The line as a JSON object, or None (not JSON, or JSON of another type)."""
    if not line.startswith(b"{"):
        return None
    try:
        value = json.loads(line)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def permission_problem(params: Any) -> str | None:
    """Why a session/request_permission cannot be read, or None when it can."""
    try:
        RequestPermissionRequest.model_validate(params)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "params"
        return f"{where}: {first['msg']}"
    return None
