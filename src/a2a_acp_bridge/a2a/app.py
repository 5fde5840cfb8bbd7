"""The HTTP application: a2a-sdk's route builders mounted in our own Starlette app.

    GET  /.well-known/agent-card.json   the card, 1.0 or with the 0.3 fields (discovery.py)
    GET  /.well-known/agent.json        the card with the 0.3 fields (the path before 0.3)
    POST /                               JSON-RPC: A2A 1.0, and 0.3 method names
    *    /rest/...                       HTTP+JSON: A2A 1.0, and 0.3 under /rest/v1
    GET  /healthz                        alive: the process can serve (503 once the bridge's
                                         task group or the SDK's request machinery is gone)
    GET  /readyz                         ready: a new conversation could get an adapter now
    GET  /metrics                        Prometheus text format (needs the token, if one is set)
    GET  /decisions                      the decision ledger, JSON (needs the token, if one is
                                         set; a2a/decisions_endpoint.py)
    *    /console/...                    the human console, behind ACP_CONSOLE_TOKEN
                                         (console_web.py), when ACP_SUPERVISOR names it

The state directory (persistence.py) is opened before the port is bound, and closed
last: tasks, push configs and conversations survive a restart.

Every request passes the guard first (`guard.py`: Host allowlist, bearer token, body
limit), then the gate (`gate.py`: the A2A checks the SDK does not make: JSON-RPC
Content-Type, the version query parameter, media types). The lifespan owns the bridge
(its adapters and background tasks), push delivery and the SDK's request handler, and
shuts them down in order: running tasks are cancelled first (server.py does it before
uvicorn closes the connections, so streaming callers see CANCELED), then every adapter tree
is stopped and the SDK's handler closed, then queued push notifications get a moment to go
out (push.py, DRAIN_S), and last the bridge's task group ends.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
from collections.abc import AsyncIterator, Collection
from typing import Any

from a2a.server.context import ServerCallContext
from a2a.server.routes import create_rest_routes
from a2a.server.routes.common import DefaultServerCallContextBuilder
from a2a.types.a2a_pb2 import AgentCard
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from a2a_acp_bridge.a2a.card import build_card
from a2a_acp_bridge.a2a.compat import Compat03Adapter
from a2a_acp_bridge.a2a.decisions_endpoint import decisions_endpoint
from a2a_acp_bridge.a2a.discovery import CARD_PATH, LEGACY_CARD_PATH, CardEndpoint
from a2a_acp_bridge.a2a.dispatcher import BridgeDispatcher
from a2a_acp_bridge.a2a.durable_store import DurableTaskStore
from a2a_acp_bridge.a2a.executor import BridgeExecutor
from a2a_acp_bridge.a2a.gate import Gate
from a2a_acp_bridge.a2a.guard import METRICS_PATH, PUBLIC_PATHS, Authenticator, Guard
from a2a_acp_bridge.a2a.handler import BridgeRequestHandler
from a2a_acp_bridge.a2a.ownership import ADMIN_STATE, principal_of
from a2a_acp_bridge.a2a.persistence import Persistence
from a2a_acp_bridge.a2a.push import V03, VERSION_STATE, PushDelivery, PushUrlPolicy
from a2a_acp_bridge.a2a.push_configs import DurablePushConfigStore
from a2a_acp_bridge.a2a.quiet import quiet_client_errors
from a2a_acp_bridge.a2a.rest03 import Rest03Adapter
from a2a_acp_bridge.bridge import Bridge
from a2a_acp_bridge.config import Settings
from a2a_acp_bridge.console_web import PREFIX as CONSOLE_PREFIX
from a2a_acp_bridge.console_web import ConsoleAuth, console_routes, ledger_recent
from a2a_acp_bridge.jwt_bearer import JwtVerifier
from a2a_acp_bridge.metrics import CONTENT_TYPE
from a2a_acp_bridge.principals import TokenCheck
from a2a_acp_bridge.schema import DEFAULT_PRINCIPAL
from a2a_acp_bridge.state_writer import StateHealth
from a2a_acp_bridge.supervisors import find_console

logger = logging.getLogger(__name__)

RPC_PATH = "/"
REST_PREFIX = "/rest"


class ServerState:
    """What the app knows about itself once running (the port it actually bound)."""

    def __init__(self) -> None:
        self.bound_port: int | None = None


class CallContextBuilder(DefaultServerCallContextBuilder):
    """The SDK's call context, plus whether the caller reads a stream (HTTP+JSON path) and
    the A2A version the request speaks (no header: 0.3; the gate turned a query parameter
    into the header). The caller's principal is the context's user (the guard put it in
    the scope); whether it is an operator (A2A_ADMIN_PRINCIPALS) is in its state."""

    def __init__(self, admins: Collection[str] = ()) -> None:
        self.admins = frozenset(admins)

    def build(self, request: Request) -> ServerCallContext:
        context = super().build(request)
        context.state[ADMIN_STATE] = principal_of(context) in self.admins
        context.state["rest_stream"] = request.url.path.endswith((":stream", ":subscribe"))
        version = request.headers.get("a2a-version", "").strip() or V03
        context.state[VERSION_STATE] = V03 if version.startswith("0.") else version
        return context


def build_app(settings: Settings, *, bridge: Bridge | None = None) -> Starlette:
    bridge = bridge or Bridge(settings)
    quiet_client_errors()
    state = ServerState()

    def current_card(with_v03: bool = False) -> AgentCard:
        return build_card(
            base_url=settings.advertised_url(state.bound_port),
            label=settings.agent.label,
            agent_info=bridge.agent_info,
            name=settings.name,
            bearer=bool(settings.tokens),
            oidc=settings.jwt_policy,
            with_v03=with_v03,
            supervised=bridge.supervised is not False,
            prompt_capabilities=bridge.prompt_capabilities,
            isolation=bridge.isolation.status.sentence(),
        )

    push_configs = DurablePushConfigStore()
    push_policy = PushUrlPolicy(allow_private=settings.push_allow_private)
    task_store = DurableTaskStore(retention=settings.task_retention, ttl_s=settings.task_ttl_s)
    push = PushDelivery(push_configs, push_policy, task_of=task_store.peek)
    persistence = Persistence(settings, bridge, task_store, push_configs, push)
    handler = BridgeRequestHandler(
        bridge=bridge,
        agent_executor=BridgeExecutor(bridge),
        task_store=task_store,
        agent_card=current_card(),
        push_config_store=push_configs,
        push_sender=push,
        push_url_validator=push_policy.accepts,
        # Several replicas: a task's events reach subscribers on any of them (None: one).
        event_stream=persistence.event_log,
    )
    persistence.serve_for(handler)  # replicas: another one's cancel reaches this handler
    context_builder = CallContextBuilder(settings.admin_principals)
    # The SDK's dispatcher, answering errors in the bridge's words (a2a/dispatcher.py).
    dispatcher = BridgeDispatcher(handler, context_builder=context_builder)
    # The SDK's 0.3 adapter, with the bridge's error codes (see a2a/compat.py).
    dispatcher.enable_v0_3_compat = True
    dispatcher._v03_adapter = Compat03Adapter(http_handler=handler, context_builder=context_builder)

    # Whether the lifespan holds the bridge and the SDK's handler open (not closed by a
    # shutdown or by a failure that ended the bridge's task group).
    lifespan_up = {"value": False}

    async def healthz(_request: Request) -> Response:
        if bridge.serving and lifespan_up["value"]:
            return JSONResponse({"status": "ok"})
        return JSONResponse({"status": "failing: the bridge cannot serve"}, status_code=503)

    async def readyz(_request: Request) -> Response:
        checks = readiness(settings, bridge, persistence.database.health)
        ready = all(check["ok"] for check in checks.values())
        body = {"status": "ready" if ready else "not ready", "checks": checks}
        return JSONResponse(body, status_code=200 if ready else 503)

    async def metrics(_request: Request) -> Response:
        return Response(bridge.metrics.exposition(), media_type=CONTENT_TYPE)

    card = CardEndpoint(current_card, settings.card_v03)

    # --- issue 20: the supervisor and its human console (supervisors.py, console_web.py) ---
    supervisor = bridge.decisions.supervisor
    console = find_console(supervisor)
    console_pages = []
    if console is not None and settings.console_token:
        secure = (settings.public_url or "").startswith("https://")
        chain = bridge.decisions

        def ledger_entries(limit: int) -> list[Any]:
            # The ledger is attached once the state database is open.
            return chain.ledger.recent(limit) if chain.ledger is not None else []

        console_pages = console_routes(
            console,
            ConsoleAuth(settings.console_token, secure_cookie=secure),
            recent=ledger_recent(ledger_entries),
        )
    # --- end of the supervisor ---

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        async with persistence.running() as ended, bridge, push:
            await persistence.notify(ended)
            persistence.start_sweeping()
            lifespan_up["value"] = True
            try:
                yield
            finally:
                lifespan_up["value"] = False
                await bridge.shutdown()
                await handler.aclose()
                # Whatever is still not terminal (no turn ran it) ends now, and is written.
                await persistence.notify(await task_store.end_unfinished())

    routes = [
        Route(CARD_PATH, card.serve, methods=["GET"]),
        Route(LEGACY_CARD_PATH, card.serve, methods=["GET"]),
        Route("/healthz", healthz, methods=["GET"]),
        Route("/readyz", readyz, methods=["GET"]),
        Route("/metrics", metrics, methods=["GET"]),
        Route(
            "/decisions",
            decisions_endpoint(lambda: bridge.decisions.ledger, settings.admin_principals),
            methods=["GET"],
        ),
        # Before the SDK's per-tenant mount (/{tenant}/...), which would take /console/....
        *console_pages,
        Route(RPC_PATH, dispatcher.handle_requests, methods=["POST"]),
        # A2A 0.3 under /rest/v1, through the bridge's adapter (a2a/rest03.py).
        *(
            Route(f"{REST_PREFIX}{path}", endpoint, methods=[method])
            for (path, method), endpoint in Rest03Adapter(handler, context_builder=context_builder)
            .routes()
            .items()
        ),
        *create_rest_routes(handler, context_builder=context_builder, path_prefix=REST_PREFIX),
    ]
    tokens = TokenCheck(settings.tokens)
    if tokens.positional:
        logger.warning(
            "A2A_TOKEN_FILE holds bare tokens, named by their position; write NAME TOKEN "
            "lines instead (removing a line renames the bare tokens after it)",
            extra={"principals": list(tokens.positional)},
        )
    bridge.metrics.name_principals(
        {DEFAULT_PRINCIPAL, *settings.admin_principals, *(e.principal for e in settings.tokens)}
    )
    policy = settings.jwt_policy
    authenticator = Authenticator(tokens, JwtVerifier(policy) if policy is not None else None)
    public = PUBLIC_PATHS | {METRICS_PATH} if settings.metrics_public else PUBLIC_PATHS
    guard = Middleware(
        Guard,
        auth=authenticator,
        public_paths=public,
        allowed_hosts=settings.host_allowlist(),
        max_body_bytes=settings.max_body_bytes,
        on_refusal=bridge.metrics.http_refused,
        own_auth=CONSOLE_PREFIX if console_pages else None,
    )
    gate = Middleware(
        Gate,
        rpc_path=RPC_PATH,
        max_parts=settings.max_parts,
        passthrough=CONSOLE_PREFIX if console_pages else None,
    )
    app = Starlette(routes=routes, lifespan=lifespan, middleware=[guard, gate])
    app.state.bridge = bridge
    app.state.task_store = task_store
    app.state.server = state
    app.state.push = push
    app.state.persistence = persistence
    app.state.supervisor = supervisor
    return app


def readiness(
    settings: Settings, bridge: Bridge, state: StateHealth | None = None
) -> dict[str, dict[str, object]]:
    """What /readyz checks: could a new conversation get an adapter now?

    It checks what can be known without starting one: the bridge is serving, the agent's
    program can be found, the working directory can be written, and a slot is free (or a
    warm or idle adapter would give way). It cannot know whether the agent's credentials
    work, and `state`: the state database takes writes (else the cause, in a few words).
    The endpoint is public, so it names no path or program: the log does."""
    isolation = bridge.isolation.status
    program = settings.agent.command[0]
    found = shutil.which(program) if os.sep not in program else program
    runnable = found is not None and os.access(found, os.X_OK)
    workdir = settings.acp_cwd or settings.sandbox_parent
    probe = workdir if workdir.exists() else workdir.parent
    writable = os.access(probe, os.W_OK | os.X_OK)
    state_check: dict[str, object] = {"ok": state is None or state.ok}
    if state is not None and state.problem is not None:
        state_check["problem"] = f"the state database cannot be written: {state.problem}"
    return {
        "serving": {"ok": bridge.accepting},
        "agent": {"ok": runnable},
        "workdir": {"ok": writable},
        "capacity": {
            "ok": bridge.can_start_adapter(),
            "live": bridge.live_adapters,
            "max": settings.max_sessions,
        },
        "state": state_check,
        # Which isolation is in force: the bridge refuses to start without the one asked.
        "isolation": {
            "ok": True,
            "mechanism": isolation.mechanism,
            **({"abi": isolation.abi} if isolation.abi is not None else {}),
        },
    }
