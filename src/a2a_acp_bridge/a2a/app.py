"""The HTTP application: a2a-sdk's route builders mounted in our own Starlette app.

    GET  /.well-known/agent-card.json   the card (Cache-Control and ETag)
    POST /                               JSON-RPC, A2A 1.0
    *    /rest/...                       HTTP+JSON, A2A 1.0
    GET  /healthz                        alive: the process answers
    GET  /readyz                         ready: a new conversation could get an adapter now
    GET  /metrics                        Prometheus text format (needs the token, if one is set)

Every request passes the guard first (`guard.py`: Host allowlist, bearer token, body
limit). The lifespan owns the bridge (its adapters and background tasks) and the SDK's
request handler, and shuts both down in order: running tasks are cancelled first, then
every adapter tree is stopped.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
from collections.abc import AsyncIterator

from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes, create_rest_routes
from a2a.server.tasks import InMemoryTaskStore
from a2a.types.a2a_pb2 import AgentCard
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from a2a_acp_bridge.a2a.card import build_card
from a2a_acp_bridge.a2a.executor import BridgeExecutor
from a2a_acp_bridge.a2a.guard import Guard, TokenCheck
from a2a_acp_bridge.bridge import Bridge
from a2a_acp_bridge.config import Settings
from a2a_acp_bridge.metrics import CONTENT_TYPE

logger = logging.getLogger(__name__)

CARD_CACHE_CONTROL = "public, max-age=60"


class ServerState:
    """What the app knows about itself once running (the port it actually bound)."""

    def __init__(self) -> None:
        self.bound_port: int | None = None


def build_app(settings: Settings, *, bridge: Bridge | None = None) -> Starlette:
    bridge = bridge or Bridge(settings)
    state = ServerState()

    def current_card() -> AgentCard:
        return build_card(
            base_url=settings.advertised_url(state.bound_port),
            label=settings.agent.label,
            agent_info=bridge.agent_info,
            name=settings.name,
            bearer=bool(settings.tokens),
        )

    async def card_modifier(_card: AgentCard) -> AgentCard:
        return current_card()

    handler = DefaultRequestHandler(
        agent_executor=BridgeExecutor(bridge),
        task_store=InMemoryTaskStore(use_copying=False),
        agent_card=current_card(),
    )

    async def healthz(_request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def readyz(_request: Request) -> Response:
        checks = readiness(settings, bridge)
        ready = all(check["ok"] for check in checks.values())
        body = {"status": "ready" if ready else "not ready", "checks": checks}
        return JSONResponse(body, status_code=200 if ready else 503)

    async def metrics(_request: Request) -> Response:
        return Response(bridge.metrics.exposition(), media_type=CONTENT_TYPE)

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        async with bridge:
            try:
                yield
            finally:
                await bridge.shutdown()
                await handler.aclose()

    routes = [
        *create_agent_card_routes(
            current_card(), card_modifier=card_modifier, cache_control=CARD_CACHE_CONTROL
        ),
        Route("/healthz", healthz, methods=["GET"]),
        Route("/readyz", readyz, methods=["GET"]),
        Route("/metrics", metrics, methods=["GET"]),
        *create_jsonrpc_routes(handler, rpc_url="/"),
        *create_rest_routes(handler, path_prefix="/rest"),
    ]
    guard = Middleware(
        Guard,
        tokens=TokenCheck(settings.tokens),
        allowed_hosts=settings.host_allowlist(),
        max_body_bytes=settings.max_body_bytes,
        on_refusal=bridge.metrics.http_refused,
    )
    app = Starlette(routes=routes, lifespan=lifespan, middleware=[guard])
    app.state.bridge = bridge
    app.state.server = state
    return app


def readiness(settings: Settings, bridge: Bridge) -> dict[str, dict[str, object]]:
    """What /readyz checks: could a new conversation get an adapter now?

    It checks what can be known without starting one: the bridge is serving, the agent's
    program can be found, the working directory can be written, and a slot is free (or a
    warm or idle adapter would give way). It cannot know whether the agent's credentials
    work. The endpoint is public, so it names no path or program: the log does."""
    program = settings.agent.command[0]
    found = shutil.which(program) if os.sep not in program else program
    runnable = found is not None and os.access(found, os.X_OK)
    workdir = settings.acp_cwd or settings.sandbox_parent
    probe = workdir if workdir.exists() else workdir.parent
    writable = os.access(probe, os.W_OK | os.X_OK)
    return {
        "serving": {"ok": bridge.accepting},
        "agent": {"ok": runnable},
        "workdir": {"ok": writable},
        "capacity": {
            "ok": bridge.can_start_adapter(),
            "live": bridge.live_adapters,
            "max": settings.max_sessions,
        },
    }
