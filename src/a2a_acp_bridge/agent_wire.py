"""The agent side of ACP's wire, standard library only: NDJSON JSON-RPC 2.0 over stdio.

Used by the embedded demo agent and by the test suite's scripted agents. It starts in
milliseconds (the ACP SDK alone takes ~0.6 s to import) and can write byte-exact frames,
broken ones included, which fault injection needs.

`AgentPeer.serve(handler)` reads requests and notifications from stdin and hands each to
`handler(method, params)` in its own task; `request()` sends a request to the client and
awaits its answer; `notify()` sends a notification. Ids of our own requests can be ints or
UUID strings (codex uses strings).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import sys
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

Handler = Callable[[str, dict[str, Any]], Awaitable[Any]]
# A method whose handler wants to answer with a JSON-RPC error raises this.
LINE_LIMIT = 64 * 1024 * 1024


class RpcError(Exception):
    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data


class AgentPeer:
    """One ACP connection seen from the agent."""

    def __init__(self, *, string_ids: bool = False) -> None:
        self._writer: asyncio.StreamWriter | None = None
        self._reader: asyncio.StreamReader | None = None
        self._pending: dict[Any, asyncio.Future[Any]] = {}
        self._counter = itertools.count()
        self._string_ids = string_ids
        self._tasks: set[asyncio.Task[Any]] = set()
        self._write_lock = asyncio.Lock()
        self._read_transport: asyncio.BaseTransport | None = None
        # When the agent closes its own input on purpose, its running handlers go on.
        self.keep_handlers = False

    async def open(self) -> None:
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader(limit=LINE_LIMIT)
        self._read_transport, _ = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader), sys.stdin
        )
        transport, protocol = await loop.connect_write_pipe(
            asyncio.streams.FlowControlMixin, sys.stdout
        )
        self._reader = reader
        self._writer = asyncio.StreamWriter(transport, protocol, reader, loop)

    async def write_raw(self, line: bytes) -> None:
        """Write bytes as they are (a frame, or something broken on purpose)."""
        assert self._writer is not None
        async with self._write_lock:
            self._writer.write(line)
            await self._writer.drain()

    async def send(self, message: dict[str, Any]) -> None:
        await self.write_raw(json.dumps(message, separators=(",", ":")).encode() + b"\n")

    async def notify(self, method: str, params: dict[str, Any]) -> None:
        await self.send({"jsonrpc": "2.0", "method": method, "params": params})

    async def request(self, method: str, params: dict[str, Any]) -> Any:
        request_id: Any = str(uuid.uuid4()) if self._string_ids else next(self._counter)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[request_id] = future
        try:
            await self.send(
                {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
            )
            return await future
        finally:
            self._pending.pop(request_id, None)

    def close_input(self) -> None:
        """Close stdin (the client's writes then fail) while handlers keep running."""
        self.keep_handlers = True
        if self._read_transport is not None:
            self._read_transport.close()
        # sys.stdin does not own fd 0 (closefd=False): close the descriptor itself.
        with contextlib.suppress(OSError):
            os.close(0)

    async def serve(self, handler: Handler) -> None:
        """Dispatch until stdin closes."""
        assert self._reader is not None
        while True:
            try:
                line = await self._reader.readline()
            except (ValueError, asyncio.LimitOverrunError):
                continue
            if not line:
                break
            try:
                message = json.loads(line)
            except ValueError:
                continue
            if not isinstance(message, dict):
                continue
            if "method" in message:
                task = asyncio.create_task(self._dispatch(handler, message))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
            elif "id" in message:
                future = self._pending.get(message["id"])
                if future is not None and not future.done():
                    if "error" in message:
                        error = message["error"] or {}
                        future.set_exception(
                            RpcError(
                                error.get("code", -32603),
                                error.get("message", ""),
                                error.get("data"),
                            )
                        )
                    else:
                        future.set_result(message.get("result"))
        if self.keep_handlers:
            return
        for future in self._pending.values():
            if not future.done():
                future.set_exception(ConnectionError("stdin closed"))
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(BaseException):
                await task

    async def _dispatch(self, handler: Handler, message: dict[str, Any]) -> None:
        method = message["method"]
        params = message.get("params") or {}
        request_id = message.get("id")
        try:
            result = await handler(method, params)
        except RpcError as exc:
            if request_id is not None:
                error: dict[str, Any] = {"code": exc.code, "message": exc.message}
                if exc.data is not None:
                    error["data"] = exc.data
                await self.send({"jsonrpc": "2.0", "id": request_id, "error": error})
            return
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # an agent answers every request, even after a bug
            if request_id is not None:
                await self.send(
                    {
                        "jsonrpc": "2.0",
                        "id": request_id,
                        "error": {
                            "code": -32603,
                            "message": f"internal error: {type(exc).__name__}",
                        },
                    }
                )
            return
        if request_id is not None:
            await self.send({"jsonrpc": "2.0", "id": request_id, "result": result})


def method_not_found(method: str) -> RpcError:
    return RpcError(-32601, f"Method not found: {method}")
