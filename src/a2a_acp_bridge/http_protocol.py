"""uvicorn's HTTP/1.1 protocol with deadlines on the client, and a cap on connections.

uvicorn waits forever for a request's headers and body: a client that connects and stops
(or trickles one byte a minute) holds a connection and a file descriptor for good, and a
few hundred of them stop the server. Here:

- a request's headers must arrive within A2A_HEADER_TIMEOUT_MS of the connection (or of the
  first byte of the next request on a kept-alive connection), else 408 and the connection
  is closed;
- its body within A2A_BODY_TIMEOUT_MS of the headers, else the connection is closed (the
  app sees the client gone; a response may already have begun, so none is sent);
- beyond A2A_MAX_CONNECTIONS open connections, a new one is answered 503 and closed
  before anything is read from it.

Each of these is logged at most once per client address per LOG_EVERY_S, with a count of
what was not logged, so a flood of bad clients does not flood the log.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from dataclasses import dataclass

from uvicorn.protocols.http.h11_impl import H11Protocol, RequestResponseCycle

logger = logging.getLogger(__name__)

# A client's misbehaviour is logged once per address per this many seconds.
LOG_EVERY_S = 60.0
# Addresses remembered for that (the oldest forgotten first).
LOG_MEMORY = 1024


@dataclass(frozen=True)
class ClientLimits:
    header_timeout_s: float
    body_timeout_s: float
    max_connections: int


class _OncePerClient:
    """Logs one line per (address, what) per LOG_EVERY_S; counts what it held back."""

    def __init__(self) -> None:
        self._last: OrderedDict[tuple[str, str], tuple[float, int]] = OrderedDict()

    def log(self, client: tuple[str, int] | None, what: str, message: str) -> None:
        address = client[0] if client else "unknown"
        key = (address, what)
        now = time.monotonic()
        last, held = self._last.get(key, (-LOG_EVERY_S, 0))
        if now - last < LOG_EVERY_S:
            self._last[key] = (last, held + 1)
            return
        self._last[key] = (now, 0)
        self._last.move_to_end(key)
        while len(self._last) > LOG_MEMORY:
            self._last.popitem(last=False)
        fields: dict[str, object] = {"client": address}
        if held:
            fields["not_logged"] = held
        logger.warning(message, extra=fields)


def _raw_response(status: int, reason: str, text: str) -> bytes:
    body = text.encode("utf-8")
    head = (
        f"HTTP/1.1 {status} {reason}\r\n"
        "content-type: text/plain; charset=utf-8\r\n"
        "connection: close\r\n"
        f"content-length: {len(body)}\r\n\r\n"
    )
    return head.encode("ascii") + body


def protocol_class(limits: ClientLimits) -> type[H11Protocol]:
    """The uvicorn `http` protocol class enforcing `limits` (one per server: it holds the
    server's log limiter)."""
    _log = _OncePerClient()

    class TimedH11Protocol(H11Protocol):
        _deadline: asyncio.TimerHandle | None = None
        _waiting_for: str | None = None

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            if len(self.connections) > limits.max_connections:
                _log.log(
                    self.client,
                    "connections",
                    "connection refused: too many open connections (A2A_MAX_CONNECTIONS)",
                )
                self.connections.discard(self)
                transport.write(
                    _raw_response(503, "Service Unavailable", "Too many open connections.\n")
                )
                transport.close()
                return
            self._arm("headers", limits.header_timeout_s)

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            if self._waiting_for is None and (self.cycle is None or self.cycle.response_complete):
                # The first byte of the next request on a kept-alive connection.
                self._arm("headers", limits.header_timeout_s)
            super().data_received(data)

        def handle_events(self) -> None:
            before = self.cycle
            super().handle_events()
            # None until the first request's headers are parsed (uvicorn types it otherwise).
            cycle: RequestResponseCycle | None = self.cycle
            if cycle is None:
                return
            if cycle is not before and self._waiting_for == "headers":
                self._disarm()
                if cycle.more_body:
                    self._arm("body", limits.body_timeout_s)
            if self._waiting_for == "body" and not cycle.more_body:
                self._disarm()

        def _arm(self, what: str, seconds: float) -> None:
            self._disarm()
            self._waiting_for = what
            self._deadline = self.loop.call_later(seconds, self._expired, what)

        def _disarm(self) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
            self._deadline = None
            self._waiting_for = None

        def _expired(self, what: str) -> None:
            self._deadline = None
            self._waiting_for = None
            if self.transport.is_closing():
                return
            if what == "headers":
                _log.log(
                    self.client,
                    "headers",
                    "connection closed: the request's headers did not arrive in time "
                    "(A2A_HEADER_TIMEOUT_MS)",
                )
                self.transport.write(
                    _raw_response(408, "Request Timeout", "The request did not arrive in time.\n")
                )
            else:
                _log.log(
                    self.client,
                    "body",
                    "connection closed: the request's body did not arrive in time "
                    "(A2A_BODY_TIMEOUT_MS)",
                )
                if self.cycle is not None:
                    self.cycle.disconnected = True
                    self.cycle.message_event.set()
            self.transport.close()

    return TimedH11Protocol
