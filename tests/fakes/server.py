"""The common part of the fake model servers: HTTP on 127.0.0.1, a proxy trap, a request log.

A `FakeModelServer` runs a threading HTTP/1.1 server on 127.0.0.1 (port 0) in a thread of
its own, so it answers whatever the test's event loop is doing. Adapters are pointed at
it twice: as their model API (a base URL) and as their HTTP(S) proxy. Every `CONNECT` (an
HTTPS request to anywhere else) and every request for an absolute URL (plain HTTP through
the proxy) is refused with 403 and recorded in `outside`, so a test sees any attempt to
leave the machine, and none succeeds.

Subclasses (anthropic, openai, gemini) turn a request into a `View`, render the script's
step in their wire format, and answer side requests.
"""

from __future__ import annotations

import json
import logging
import os
import select
import socket
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from tests.fakes.script import Script

logger = logging.getLogger(__name__)

# How often a stalled request looks whether its client went away.
STALL_POLL_S = 0.05
# Bound on how long a test waits for the server's thread to stop.
STOP_S = 5.0
# Set to a directory to keep every request body there (to see what an adapter sends).
DUMP_VARIABLE = "FAKE_MODEL_DUMP"


@dataclass(frozen=True)
class Seen:
    """One request the server answered."""

    method: str
    path: str
    model: str | None
    role: str  # "main", "side", "other" or "outside"
    step: str | None = None
    # The request's system instructions (gemini's systemInstruction), where the adapter
    # puts its memory files: what a test reads to see what context reached the model.
    system: str = ""


class Exchange:
    """One request and the means to answer it."""

    def __init__(self, handler: _Handler, body: bytes) -> None:
        self.handler = handler
        parts = urlsplit(handler.path)
        self.path = parts.path
        self.query = {key: values[-1] for key, values in parse_qs(parts.query).items()}
        self.headers = handler.headers
        self.raw = body
        self._chunked = False

    def json_body(self) -> dict[str, Any]:
        try:
            data = json.loads(self.raw or b"{}")
        except ValueError:
            return {}
        return data if isinstance(data, dict) else {}

    def send_json(self, payload: Any, status: int = 200) -> None:
        data = json.dumps(payload).encode()
        self.handler.send_response(status)
        self.handler.send_header("Content-Type", "application/json")
        self.handler.send_header("Content-Length", str(len(data)))
        self.handler.end_headers()
        self.handler.wfile.write(data)
        self.handler.wfile.flush()

    def start_stream(self) -> None:
        self.handler.send_response(200)
        self.handler.send_header("Content-Type", "text/event-stream")
        self.handler.send_header("Cache-Control", "no-cache")
        self.handler.send_header("Transfer-Encoding", "chunked")
        self.handler.end_headers()
        self._chunked = True

    def event(self, data: Mapping[str, Any], name: str | None = None) -> None:
        """One SSE event (`event:` line only when named)."""
        text = (f"event: {name}\n" if name else "") + f"data: {json.dumps(data)}\n\n"
        self._write_chunk(text.encode())

    def end_stream(self) -> None:
        self._write_chunk(b"")

    def _write_chunk(self, data: bytes) -> None:
        self.handler.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.handler.wfile.flush()

    def hold(self, stop: threading.Event) -> None:
        """Keep the request open, answering nothing, until the client closes or the server stops."""
        sock: socket.socket = self.handler.connection
        while not stop.is_set():
            ready, _, _ = select.select([sock], [], [], STALL_POLL_S)
            if ready:
                try:
                    if sock.recv(1, socket.MSG_PEEK) == b"":
                        break
                except OSError:
                    break
        self.handler.close_connection = True


class FakeModelServer:
    """A model API on 127.0.0.1 that plays scripts and refuses all outside traffic."""

    label = "fake"

    def __init__(self) -> None:
        self.scripts: dict[str, Script] = {}
        self.seen: list[Seen] = []
        self.outside: list[str] = []
        # The credential each API request carried (a key, a bearer token), in order.
        self.credentials: list[str | None] = []
        self._lock = threading.Lock()
        self._stalls = threading.Condition(self._lock)
        self._stalled = 0
        self._dumped = 0
        self._stop = threading.Event()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # --- lifecycle ---------------------------------------------------------------------

    def start(self) -> FakeModelServer:
        server = self

        class Handler(_Handler):
            owner = server

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(STOP_S)

    @property
    def port(self) -> int:
        assert self._httpd is not None
        return int(self._httpd.server_address[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def proxy_env(self) -> dict[str, str]:
        """Proxy variables that send every outside request into this server's trap."""
        proxy = self.url
        return {
            "HTTP_PROXY": proxy,
            "HTTPS_PROXY": proxy,
            "http_proxy": proxy,
            "https_proxy": proxy,
            "NO_PROXY": "127.0.0.1,localhost",
            "no_proxy": "127.0.0.1,localhost",
        }

    # --- scripts and records -----------------------------------------------------------

    def add(self, script: Script) -> Script:
        with self._lock:
            self.scripts[script.key] = script
        return script

    def script(self, key: str | None) -> Script | None:
        if key is None:
            return None
        with self._lock:
            return self.scripts.get(key)

    def record(self, seen: Seen) -> None:
        with self._lock:
            self.seen.append(seen)

    def main_requests(self) -> list[Seen]:
        with self._lock:
            return [seen for seen in self.seen if seen.role == "main"]

    def credentials_seen(self) -> list[str | None]:
        """The credential of every API request so far (None: the request carried none)."""
        with self._lock:
            return list(self.credentials)

    def outside_attempts(self) -> list[str]:
        with self._lock:
            return list(self.outside)

    def stalled(self) -> int:
        """How many requests have stalled so far."""
        with self._lock:
            return self._stalled

    def wait_stalled(self, count: int, timeout_s: float) -> bool:
        """Block until `count` requests in total have stalled (False on timeout)."""
        deadline = time.monotonic() + timeout_s
        with self._stalls:
            while self._stalled < count:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._stalls.wait(left)
            return True

    def stall(self, exchange: Exchange) -> None:
        with self._stalls:
            self._stalled += 1
            self._stalls.notify_all()
        exchange.hold(self._stop)

    def dump(self, method: str, exchange: Exchange) -> None:
        folder = os.environ.get(DUMP_VARIABLE)
        if not folder:
            return
        with self._lock:
            self._dumped += 1
            number = self._dumped
        name = f"{self.label}-{number:04d}-{method}-{exchange.path.strip('/').replace('/', '_')}"
        path = os.path.join(folder, name[:150] + ".json")
        os.makedirs(folder, exist_ok=True)
        with open(path, "wb") as handle:
            handle.write(exchange.raw)

    # --- subclass hooks ----------------------------------------------------------------

    def handle(self, method: str, exchange: Exchange) -> None:
        """Answer one request to the API."""
        raise NotImplementedError

    def not_found(self, method: str, exchange: Exchange) -> None:
        self.record(Seen(method, exchange.path, None, "other"))
        logger.warning("%s: no route for %s %s", self.label, method, exchange.path)
        exchange.send_json({"error": {"message": f"no route for {exchange.path}"}}, status=404)


def request_credential(exchange: Exchange) -> str | None:
    """The key a model request carries, wherever its API puts it: `Authorization: Bearer`
    (OpenAI, gateways), `x-api-key` (Anthropic), `x-goog-api-key` or `?key=` (Gemini)."""
    bearer = exchange.headers.get("Authorization") or ""
    if bearer.lower().startswith("bearer "):
        return bearer[len("bearer ") :].strip() or None
    for header in ("x-api-key", "x-goog-api-key"):
        value = exchange.headers.get(header)
        if value:
            return str(value)
    return exchange.query.get("key") or None


class _Handler(BaseHTTPRequestHandler):
    owner: FakeModelServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        return None

    def _refuse_outside(self, target: str) -> None:
        with self.owner._lock:
            self.owner.outside.append(target)
        self.owner.record(Seen(self.command, target, None, "outside"))
        self.send_response(403, "Outside traffic is refused in tests")
        self.send_header("Content-Length", "0")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True

    def do_CONNECT(self) -> None:
        self._refuse_outside(self.path)

    def _dispatch(self) -> None:
        if not self.path.startswith("/"):
            self._refuse_outside(self.path)
            return
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        exchange = Exchange(self, body)
        with self.owner._lock:
            self.owner.credentials.append(request_credential(exchange))
        self.owner.dump(self.command, exchange)
        try:
            self.owner.handle(self.command, exchange)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def do_GET(self) -> None:
        self._dispatch()

    def do_POST(self) -> None:
        self._dispatch()

    def do_HEAD(self) -> None:
        self._dispatch()
