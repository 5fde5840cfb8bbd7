"""Run the app under uvicorn: learn the bound port, shut down cleanly on SIGTERM/SIGINT.

On SIGTERM or SIGINT the server stops accepting connections, then cancels every running
task (each ends CANCELED, "the bridge is shutting down", while its stream is still open
so the caller sees it), then lets uvicorn close the connections and run the lifespan
shutdown, which stops every adapter tree; then the process exits 0. A second SIGINT
forces the exit.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import socket
import threading
from collections.abc import Awaitable, Callable, Iterator
from types import FrameType
from typing import Any

import anyio
import uvicorn

try:  # the SSE responses of the a2a-sdk's routes
    from sse_starlette.sse import AppStatus as SseStatus
except ImportError:  # pragma: no cover - a2a-sdk[http-server] brings it
    SseStatus = None  # type: ignore[assignment,misc]

from a2a_acp_bridge.a2a.app import build_app
from a2a_acp_bridge.a2a.discovery import card_policy
from a2a_acp_bridge.config import Settings
from a2a_acp_bridge.errors import StateError
from a2a_acp_bridge.http_protocol import ClientLimits, protocol_class
from a2a_acp_bridge.landlock import forbid_same_user_inspection

logger = logging.getLogger(__name__)

# Seconds uvicorn waits for open connections (SSE streams included) when stopping; the
# running tasks have already ended CANCELED by then.
GRACEFUL_SHUTDOWN_S = 15
SHUTDOWN_SIGNALS = (signal.SIGINT, signal.SIGTERM)
# Once running tasks have ended, how long their streams get to deliver the final events
# before every stream still open (a subscription to an idle task) is ended.
STREAM_DRAIN_S = 2.0
# While the start waits (for the state database): how often it looks for a SIGTERM.
EXIT_POLL_S = 0.1


class BridgeServer(uvicorn.Server):
    """A uvicorn server that tells the app which port it bound (for PORT=0)."""

    def __init__(self, config: uvicorn.Config, app: Any) -> None:
        super().__init__(config)
        self.app = app
        # Told to stop (a signal) before it could start: a clean exit, not a failed start.
        self.stopped_before_start = False
        # No adapter starts before the bridge's own port is known and kept from it.
        app.state.bridge.isolation.expect_ports()
        if SseStatus is not None:
            # sse-starlette ends every stream the moment the server is told to exit, so
            # callers would never see their running task end CANCELED: the shutdown below
            # ends the streams itself, once the tasks have.
            SseStatus.disable_automatic_graceful_drain()  # type: ignore[no-untyped-call]

    async def _unless_told_to_exit(self, step: Callable[[], Awaitable[None]]) -> bool:
        """Run `step`, unless a SIGTERM comes first (uvicorn sets `should_exit`): a replica
        waiting for its database (A2A_DATABASE_WAIT_MS) stops when told to. True: it ran."""
        done = False
        failure: BaseException | None = None
        async with anyio.create_task_group() as group:

            async def run() -> None:
                nonlocal done, failure
                try:
                    await step()
                    done = True
                except Exception as exc:  # raised below, as itself, not in a group
                    failure = exc
                group.cancel_scope.cancel()

            group.start_soon(run)
            while not self.should_exit:  # noqa: ASYNC110 - uvicorn's flag, set by a signal
                await anyio.sleep(EXIT_POLL_S)
            group.cancel_scope.cancel()
        if failure is not None:
            raise failure
        return done

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        # The state directory first: one that cannot be used stops the start with one
        # line saying why, before the port is bound (a2a/persistence.py).
        persistence = getattr(self.app.state, "persistence", None)
        if persistence is not None:
            try:
                opened = await self._unless_told_to_exit(persistence.open)
            except StateError as exc:
                logger.error("the state directory cannot be used", extra={"error": str(exc)})
                self.should_exit = True
                return
            if not opened:
                logger.info("stopped before the state database could be opened")
                self.stopped_before_start = True
                return
        # Same-user processes (an unconfined adapter included) can no longer read this
        # process's /proc entries (environ holds A2A_TOKEN) or ptrace it.
        forbid_same_user_inspection()
        await super().startup(sockets)
        port = self.bound_port()
        if port is not None:
            self.app.state.server.bound_port = port
        bridge = self.app.state.bridge
        # Kept from every adapter: the bridge's own ports, and a shared state database's.
        denied = self.bound_ports()
        if persistence is not None and persistence.database.tcp_port is not None:
            denied.add(persistence.database.tcp_port)
        bridge.isolation.deny_ports(denied)
        settings: Settings = bridge.settings
        logger.info(
            "listening",
            extra={
                "url": settings.advertised_url(port),
                "agent": settings.agent.label,
                "card": card_policy(settings.card_v03),
                "isolation": bridge.isolation.status.label,
            },
        )

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        # Stop accepting first, then end the running tasks while their streams are open,
        # then let uvicorn wait for the connections and run the lifespan shutdown.
        for server in getattr(self, "servers", []):
            server.close()
        await self.app.state.bridge.cancel_all()
        if SseStatus is None:
            await super().shutdown(sockets)
            return
        end_streams = asyncio.get_running_loop().call_later(
            STREAM_DRAIN_S, setattr, SseStatus, "should_exit", True
        )
        try:
            await super().shutdown(sockets)
        finally:
            end_streams.cancel()
            # The flag is global to the process: the next server must not start with it.
            SseStatus.should_exit = False

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        # uvicorn's own version raises the captured signal again once shut down, so the
        # process would die of SIGTERM (or KeyboardInterrupt) instead of exiting 0.
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        originals = {sig: signal.signal(sig, self._on_signal) for sig in SHUTDOWN_SIGNALS}
        try:
            yield
        finally:
            for sig, handler in originals.items():
                signal.signal(sig, handler)

    def _on_signal(self, sig: int, frame: FrameType | None) -> None:
        if not self.should_exit:
            logger.info("shutting down", extra={"signal": signal.Signals(sig).name})
        self.handle_exit(sig, frame)

    def bound_ports(self) -> set[int]:
        """Every TCP port the server listens on."""
        return {
            int(sock.getsockname()[1])
            for server in getattr(self, "servers", [])
            for sock in server.sockets
            if sock.family in (socket.AF_INET, socket.AF_INET6)
        }

    def bound_port(self) -> int | None:
        for server in getattr(self, "servers", []):
            for sock in server.sockets:
                address = sock.getsockname()
                return int(address[1])
        return None


def uvicorn_config(app: Any, settings: Settings, *, host: str, port: int) -> uvicorn.Config:
    """How uvicorn runs the app: the bridge's own HTTP protocol (client deadlines, the cap
    on connections), its lifespan, no logging set-up of uvicorn's own."""
    limits = ClientLimits(
        header_timeout_s=settings.header_timeout_s,
        body_timeout_s=settings.body_timeout_s,
        max_connections=settings.max_connections,
    )
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        http=protocol_class(limits),
        log_config=None,
        lifespan="on",
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S,
        access_log=False,
    )


def make_server(settings: Settings) -> BridgeServer:
    app = build_app(settings)
    return BridgeServer(uvicorn_config(app, settings, host=settings.host, port=settings.port), app)


def run_server(settings: Settings) -> int:
    server = make_server(settings)
    server.run()
    return 0 if server.started or server.stopped_before_start else 1
