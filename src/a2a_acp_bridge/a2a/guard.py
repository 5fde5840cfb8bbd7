"""The door of the HTTP app: the Host allowlist, bearer tokens and the body limit.

A pure ASGI middleware in front of every route, checking in this order:

1. Host: while the bridge is bound to loopback, a request whose `Host` header names
   anything but a loopback name, PUBLIC_URL's host or A2A_ALLOWED_HOSTS is answered
   421 (a web page that rebinds its own DNS name to 127.0.0.1 is stopped here).
2. Token: with A2A_TOKEN, A2A_TOKEN_FILE or A2A_JWT_ISSUER set, every path except the
   public ones (the agent card, /healthz, /readyz; /metrics with A2A_METRICS_PUBLIC) needs
   `Authorization: Bearer <token>`; otherwise 401 with `WWW-Authenticate: Bearer` (503
   while a JWT's keys cannot be fetched). The token names the caller's principal
   (principals.py, jwt_bearer.py), put in the scope as its `user` for the SDK's call
   context, and bound to every log line of the request; without authentication every
   caller is `default`. Tokens are compared as SHA-256 digests with `hmac.compare_digest`,
   so neither a token's content nor its length leaks through time.
   The human console's paths (`own_auth`, /console) are left to the console, which has a
   token of its own (console_web.py): an A2A token must not open it.
3. Body: a `Content-Length` above A2A_MAX_BODY_BYTES is answered 413 before anything is
   read; every body is then read here, counting the bytes that actually arrive whatever
   `Content-Length` and `Transfer-Encoding` claim, up to the limit, and handed on whole.

A websocket is refused (closed before it is accepted, which the server answers 403)
unless a route is declared for its path: none is today, and a websocket would otherwise
pass every check above. Refusals are small JSON bodies and are counted (see
`metrics.py`); the token is never logged.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Collection
from dataclasses import dataclass

import anyio
import anyio.to_thread
from starlette.authentication import SimpleUser
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from a2a_acp_bridge.jwt_bearer import JwtRefused, JwtVerifier, looks_like_jwt
from a2a_acp_bridge.logs import log_ids
from a2a_acp_bridge.principals import TokenCheck
from a2a_acp_bridge.schema import DEFAULT_PRINCIPAL

logger = logging.getLogger(__name__)

# Answered without a token: discovery and the probes of orchestrators and HEALTHCHECK.
PUBLIC_PATHS = frozenset(
    {"/.well-known/agent-card.json", "/.well-known/agent.json", "/healthz", "/readyz"}
)
METRICS_PATH = "/metrics"
REALM = "a2a-acp-bridge"
# The close code for a refused websocket (RFC 6455: policy violation).
WEBSOCKET_POLICY_VIOLATION = 1008


class Authenticator:
    """Who a bearer token stands for: a token of A2A_TOKEN / A2A_TOKEN_FILE (principals.py)
    or a JWT of the configured issuer (jwt_bearer.py). Without either, every caller is
    the principal `default`."""

    def __init__(self, tokens: TokenCheck, jwt: JwtVerifier | None = None) -> None:
        self.tokens = tokens
        self.jwt = jwt
        # scrypt entries are computed off the event loop, one at a time: a flood of wrong
        # tokens holds one thread, not the loop.
        self._slow = anyio.CapacityLimiter(1)

    @property
    def enabled(self) -> bool:
        return self.tokens.enabled or self.jwt is not None

    async def principal_of(self, authorization: str | None) -> str:
        """The principal; Unauthenticated (with what to tell the caller) otherwise."""
        if not self.enabled:
            return DEFAULT_PRINCIPAL
        if not authorization:
            raise Unauthenticated("A bearer token is required (Authorization: Bearer <token>).")
        scheme, _, credentials = authorization.strip().partition(" ")
        token = credentials.strip()
        if scheme.lower() != "bearer" or not token:
            raise Unauthenticated("The bearer token was not accepted.", invalid=True)
        found = self.tokens.principal_of_fast(token) if self.tokens.enabled else None
        if found is not None:
            return found
        jwt_shaped = self.jwt is not None and looks_like_jwt(token)
        if self.tokens.slow and not jwt_shaped:
            # A JWT is never an scrypt entry's token: it is not made to pay scrypt's cost.
            found = await anyio.to_thread.run_sync(
                self.tokens.principal_of_slow, token, limiter=self._slow
            )
            if found is not None:
                return found
        if self.jwt is not None and jwt_shaped:
            try:
                principal = await self.jwt.principal_of(token)
            except JwtRefused as exc:
                raise Unauthenticated(
                    f"The bearer token was not accepted: {exc.reason}.",
                    invalid=True,
                    unavailable=exc.unavailable,
                    reason=exc.reason,
                ) from None
            return principal
        raise Unauthenticated("The bearer token was not accepted.", invalid=True)


class Unauthenticated(Exception):
    def __init__(
        self,
        message: str,
        *,
        invalid: bool = False,
        unavailable: bool = False,
        reason: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.invalid = invalid
        self.unavailable = unavailable
        self.reason = reason


def host_name(header: str) -> str:
    """The host name of a Host header: port removed, IPv6 brackets removed, lowercased."""
    value = header.strip().lower()
    if value.startswith("["):
        return value[1:].split("]", 1)[0]
    if value.count(":") == 1:
        value = value.split(":", 1)[0]
    return value.rstrip(".")


@dataclass(frozen=True)
class DoorRefusal:
    """A request turned away at the door: its HTTP status, the metric's reason, the text."""

    status: int
    reason: str
    message: str
    headers: tuple[tuple[bytes, bytes], ...] = ()


class Guard:
    """ASGI middleware enforcing the Host allowlist, the tokens and the body limit."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        auth: Authenticator,
        allowed_hosts: Collection[str] | None,
        max_body_bytes: int,
        on_refusal: Callable[[str], None] = lambda _reason: None,
        websocket_paths: Collection[str] = (),
        own_auth: str | None = None,
        public_paths: Collection[str] = PUBLIC_PATHS,
    ) -> None:
        self.app = app
        self.auth = auth
        self.public_paths = frozenset(public_paths)
        self.allowed_hosts = allowed_hosts
        self.max_body_bytes = max_body_bytes
        self.on_refusal = on_refusal
        self.websocket_paths = frozenset(websocket_paths)
        self.own_auth = own_auth

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "websocket":
            await self._websocket(scope, receive, send)
            return
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = _headers(scope)
        refusal = await self._check(scope, headers)
        if refusal is None:
            length = headers.get("content-length")
            if length is not None and not length.isdigit():
                refusal = DoorRefusal(400, "bad_length", "Content-Length is not a number.")
            elif length is not None and int(length) > self.max_body_bytes:
                refusal = self._too_large()
            elif length is not None or headers.get("transfer-encoding"):
                # Counted as it arrives: a Content-Length beside a chunked body says nothing.
                receive, refusal = await self._read_bounded(receive)
        if refusal is not None:
            self.on_refusal(refusal.reason)
            logger.info(
                "request refused",
                extra={
                    "status": refusal.status,
                    "reason": refusal.reason,
                    "method": scope.get("method"),
                    "path": scope.get("path"),
                    "client": (scope.get("client") or ("", 0))[0],
                },
            )
            await _respond(send, refusal)
            return
        with log_ids(principal=scope["user"].display_name):
            await self.app(scope, receive, send)

    async def _websocket(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = _headers(scope)
        refusal = await self._check(scope, headers)
        if refusal is None and scope.get("path", "") in self.websocket_paths:
            await self.app(scope, receive, send)
            return
        reason = refusal.reason if refusal is not None else "websocket"
        self.on_refusal(reason)
        logger.info(
            "request refused",
            extra={
                "status": 403,
                "reason": reason,
                "method": "WEBSOCKET",
                "path": scope.get("path"),
                "client": (scope.get("client") or ("", 0))[0],
            },
        )
        message = await receive()
        if message["type"] == "websocket.connect":
            # Closing before accepting: the server answers the handshake 403.
            await send({"type": "websocket.close", "code": WEBSOCKET_POLICY_VIOLATION})

    async def _check(self, scope: Scope, headers: dict[str, str]) -> DoorRefusal | None:
        if self.allowed_hosts is not None:
            host = host_name(headers.get("host", ""))
            if host not in self.allowed_hosts:
                return DoorRefusal(
                    421,
                    "host",
                    f"This server does not answer to the host name {host or '(none)'!r}; "
                    "the operator can add it to A2A_ALLOWED_HOSTS.",
                )
        path = scope.get("path", "")
        if path in self.public_paths or self._own_auth(path):
            scope["user"] = SimpleUser(DEFAULT_PRINCIPAL)
            return None
        authorization = headers.get("authorization")
        try:
            principal = await self.auth.principal_of(authorization)
        except Unauthenticated as exc:
            if exc.reason is not None:
                logger.info("bearer token refused", extra={"problem": exc.reason})
            if exc.unavailable:
                return DoorRefusal(503, "token_unverifiable", exc.message)
            error = "invalid_token" if exc.invalid else None
            challenge = f'Bearer realm="{REALM}"' + (f', error="{error}"' if error else "")
            return DoorRefusal(
                401,
                "unauthorized",
                exc.message,
                ((b"www-authenticate", challenge.encode("latin-1")),),
            )
        # The SDK's call context reads the caller from here (a2a/app.py, CallContextBuilder).
        scope["user"] = SimpleUser(principal)
        return None

    def _own_auth(self, path: str) -> bool:
        prefix = self.own_auth
        return prefix is not None and (path == prefix or path.startswith(prefix + "/"))

    def _too_large(self) -> DoorRefusal:
        return DoorRefusal(
            413,
            "body_too_large",
            f"The request body is larger than {self.max_body_bytes} bytes (A2A_MAX_BODY_BYTES).",
        )

    async def _read_bounded(self, receive: Receive) -> tuple[Receive, DoorRefusal | None]:
        """Read a body of unknown length up to the limit; replay it to the app."""
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                # The client went away: hand the app what came, then the disconnect.
                return _replay(chunks, message, receive), None
            body = message.get("body", b"")
            size += len(body)
            if size > self.max_body_bytes:
                return receive, self._too_large()
            chunks.append(body)
            if not message.get("more_body", False):
                return _replay(chunks, None, receive), None


def _replay(chunks: list[bytes], last: Message | None, server: Receive) -> Receive:
    pending: list[Message] = [{"type": "http.request", "body": b"".join(chunks)}]
    if last is not None:
        pending.append(last)

    async def receive() -> Message:
        if pending:
            return pending.pop(0)
        if last is not None:
            return {"type": "http.disconnect"}
        # Still connected: a streaming answer (SSE) learns of the disconnect from the server.
        return await server()

    return receive


def _headers(scope: Scope) -> dict[str, str]:
    found: dict[str, str] = {}
    for key, value in scope.get("headers", ()):
        name = key.decode("latin-1").lower()
        # A repeated header keeps its first value: a second Host or Authorization
        # cannot override the one checked.
        found.setdefault(name, value.decode("latin-1"))
    return found


async def _respond(send: Send, refusal: DoorRefusal) -> None:
    body = json.dumps({"error": refusal.reason, "message": refusal.message}).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        *refusal.headers,
    ]
    await send({"type": "http.response.start", "status": refusal.status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
