"""The HTTP application: a2a-sdk's route builders mounted in our own Starlette app.

    GET  /.well-known/agent-card.json   the card (Cache-Control and ETag)
    POST /                               JSON-RPC, A2A 1.0
    *    /rest/...                       HTTP+JSON, A2A 1.0
    GET  /healthz                        alive

The lifespan owns the bridge (its adapters and background tasks) and the SDK's request
handler, and shuts both down in order: running tasks are cancelled first, then every
adapter tree is stopped.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator

from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes, create_rest_routes
from a2a.server.tasks import InMemoryTaskStore
from a2a.types.a2a_pb2 import AgentCard
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from a2a_acp_bridge.a2a.card import build_card
from a2a_acp_bridge.a2a.executor import BridgeExecutor
from a2a_acp_bridge.bridge import Bridge
from a2a_acp_bridge.config import Settings

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
        *create_jsonrpc_routes(handler, rpc_url="/"),
        *create_rest_routes(handler, path_prefix="/rest"),
    ]
    app = Starlette(routes=routes, lifespan=lifespan)
    app.state.bridge = bridge
    app.state.server = state
    return app
