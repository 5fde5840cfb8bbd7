"""Run the app under uvicorn: learn the bound port, shut down cleanly on SIGTERM/SIGINT.

uvicorn stops accepting on a signal and runs the app's lifespan shutdown, which cancels
running tasks (CANCELED, "the bridge is shutting down") and stops every adapter tree;
then the process exits 0.
"""

from __future__ import annotations

import logging
import socket
from typing import Any

import uvicorn

from a2a_acp_bridge.a2a.app import build_app
from a2a_acp_bridge.config import Settings

logger = logging.getLogger(__name__)

# Seconds uvicorn waits for open connections (SSE streams included) when stopping.
GRACEFUL_SHUTDOWN_S = 15


class BridgeServer(uvicorn.Server):
    """A uvicorn server that tells the app which port it bound (for PORT=0)."""

    def __init__(self, config: uvicorn.Config, app: Any) -> None:
        super().__init__(config)
        self.app = app

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        port = self.bound_port()
        if port is not None:
            self.app.state.server.bound_port = port
        settings: Settings = self.app.state.bridge.settings
        logger.info(
            "listening",
            extra={"url": settings.advertised_url(port), "agent": settings.agent.label},
        )

    def bound_port(self) -> int | None:
        for server in getattr(self, "servers", []):
            for sock in server.sockets:
                address = sock.getsockname()
                return int(address[1])
        return None


def make_server(settings: Settings) -> BridgeServer:
    app = build_app(settings)
    config = uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        log_config=None,
        lifespan="on",
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S,
        access_log=False,
    )
    return BridgeServer(config, app)


def run_server(settings: Settings) -> int:
    server = make_server(settings)
    server.run()
    return 0 if server.started else 1
