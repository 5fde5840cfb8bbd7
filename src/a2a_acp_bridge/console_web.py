"""The human console's pages: `/console`, behind ACP_CONSOLE_TOKEN, served by the bridge.

    GET  /console                  the console (logged in), else the login form (401)
    POST /console/login            form `token=...`: sets the session cookie, back to /console
    POST /console/logout           ends the session
    GET  /console/static/NAME      console.js, console.css (package data; no CDN, no framework)
    GET  /console/state            JSON: the waiting questions, the recent decisions, `now`
    GET  /console/events           the same as server-sent events, one `state` per change
    POST /console/decisions/ID     JSON {"verdict": "allow"|"deny", "reason": "..."}
                                   200 decided, 404 unknown id, 409 already decided/expired

Who may use it: a request with `Authorization: Bearer <ACP_CONSOLE_TOKEN>` (curl, scripts),
or a browser holding the session cookie the login form set (HttpOnly, SameSite=Strict,
Path=/console, Secure when PUBLIC_URL is https). A client address that offers a wrong token
`GUESSES` times within `GUESS_WINDOW_S` (the form or the header alike) is answered 429 with
`Retry-After`, its offers not even compared, until its oldest miss leaves the window: the
token stays the real defence (long and random), this only makes guessing it slow and loud.
A POST with the cookie must also carry the
session's CSRF token in `X-CSRF-Token` (the page reads it from its own markup) and, when the
browser sends one, an `Origin` naming this host. The token is never put in a URL. The A2A
guard (a2a/guard.py) leaves /console to this module: an A2A token does not open it, since
the caller must never decide.

Everything the agent wrote (a command, a diff, a title) is attacker-controlled text: the
page puts it in with `textContent` only, and every response forbids inline script with a
strict Content-Security-Policy.
"""

from __future__ import annotations

import hashlib
import hmac
import html
import json
import logging
import math
import secrets
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from importlib import resources
from typing import Any
from urllib.parse import parse_qs, urlsplit

import anyio
from sse_starlette.sse import EventSourceResponse
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Mount, Route

from a2a_acp_bridge.console import ConsoleSupervisor

logger = logging.getLogger(__name__)

PREFIX = "/console"
COOKIE = "bridge_console"
CSRF_HEADER = "x-csrf-token"
# A browser session lasts a working day; then the operator logs in again.
SESSION_TTL_S = 12 * 3600.0
# Sessions kept at most (the oldest is dropped): only a holder of the token makes one.
MAX_SESSIONS = 64
# Server-sent events keep-alive, so proxies do not close an idle stream.
EVENTS_PING_S = 15.0
# The ledger does not say when it grows: the events stream looks at it this often.
LEDGER_LOOK_S = 1.0
# Recent decisions shown.
RECENT_SHOWN = 50
# Wrong console tokens a client address may offer within the window before it is refused.
GUESSES = 5
GUESS_WINDOW_S = 60.0
# Client addresses whose misses are remembered at most (the longest quiet is forgotten).
GUESSERS_KEPT = 4096
# A login form holds one token: anything bigger is not one (and is not worth parsing).
MAX_LOGIN_BYTES = 4096
STATIC = {"console.js": "text/javascript", "console.css": "text/css"}
SECURITY_HEADERS = {
    "content-security-policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
        "img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    ),
    "x-content-type-options": "nosniff",
    "x-frame-options": "DENY",
    # Not no-referrer: under it a browser sends `Origin: null` with the forms, which the
    # origin check must refuse.
    "referrer-policy": "same-origin",
    "cache-control": "no-store",
}


def _digest(text: str) -> bytes:
    return hashlib.sha256(text.encode("utf-8")).digest()


def _asset(name: str) -> str:
    return (resources.files("a2a_acp_bridge") / "console_static" / name).read_text("utf-8")


@dataclass
class Session:
    csrf: str
    expires: float


class GuessLimit:
    """The wrong tokens each client address offered lately (module docstring)."""

    def __init__(
        self,
        guesses: int = GUESSES,
        window_s: float = GUESS_WINDOW_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.guesses = guesses
        self.window_s = window_s
        self.clock = clock
        self._misses: dict[str, deque[float]] = {}

    def wait_s(self, client: str) -> float:
        """How long `client` must wait before its next offer is looked at (0: now)."""
        misses = self._misses.get(client)
        if misses is None:
            return 0.0
        now = self.clock()
        while misses and misses[0] <= now - self.window_s:
            misses.popleft()
        if not misses:
            del self._misses[client]
            return 0.0
        if len(misses) < self.guesses:
            return 0.0
        return misses[0] + self.window_s - now

    def missed(self, client: str) -> None:
        misses = self._misses.pop(client, None) or deque()
        misses.append(self.clock())
        self._misses[client] = misses  # last: the dict's order is the order of last misses
        while len(self._misses) > GUESSERS_KEPT:
            self._misses.pop(next(iter(self._misses)))

    def forget(self, client: str) -> None:
        self._misses.pop(client, None)


class ConsoleAuth:
    """The console token (kept as a digest), the browser sessions it opened, and the
    clients refused for guessing it."""

    def __init__(
        self, token: str, *, secure_cookie: bool, guesses: GuessLimit | None = None
    ) -> None:
        self._digest = _digest(token)
        self.secure_cookie = secure_cookie
        self._sessions: dict[str, Session] = {}
        self.guesses = guesses or GuessLimit()

    def token_ok(self, offered: str, client: str) -> bool:
        """The token, offered by `client`: never compared while the client must wait."""
        if self.guesses.wait_s(client) > 0:
            return False
        if hmac.compare_digest(_digest(offered), self._digest):
            self.guesses.forget(client)
            return True
        self.guesses.missed(client)
        logger.info("console token refused", extra={"client": client})
        return False

    def bearer_ok(self, request: Request) -> bool:
        scheme, _, credentials = request.headers.get("authorization", "").partition(" ")
        return scheme.lower() == "bearer" and self.token_ok(credentials.strip(), _client(request))

    def retry_after(self, request: Request) -> int:
        """Whole seconds this request's client must wait before a token is looked at."""
        return math.ceil(self.guesses.wait_s(_client(request)))

    def session(self, request: Request) -> Session | None:
        sid = request.cookies.get(COOKIE, "")
        found = self._sessions.get(sid) if sid else None
        if found is not None and found.expires < time.time():
            self._sessions.pop(sid, None)
            return None
        return found

    def open(self) -> tuple[str, Session]:
        while len(self._sessions) >= MAX_SESSIONS:
            self._sessions.pop(next(iter(self._sessions)))
        sid = secrets.token_urlsafe(32)
        session = Session(csrf=secrets.token_urlsafe(32), expires=time.time() + SESSION_TTL_S)
        self._sessions[sid] = session
        return sid, session

    def close(self, request: Request) -> None:
        self._sessions.pop(request.cookies.get(COOKIE, ""), None)


def _respond(body: str, status: int = 200, media: str = "text/html; charset=utf-8") -> Response:
    return Response(body, status_code=status, media_type=media, headers=SECURITY_HEADERS)


def _json(body: dict[str, Any], status: int = 200) -> Response:
    return JSONResponse(body, status_code=status, headers=SECURITY_HEADERS)


def _login_page(message: str = "", status: int = 401, retry_after: int = 0) -> Response:
    text = _asset("login.html").replace("{{message}}", html.escape(message))
    response = _respond(text, status)
    if retry_after:
        response.headers["retry-after"] = str(retry_after)
    return response


def _too_many(retry_after: int) -> Response:
    response = _json(
        {
            "error": "too_many_requests",
            "message": f"Too many wrong console tokens: try again in {retry_after} s.",
        },
        429,
    )
    response.headers["retry-after"] = str(retry_after)
    return response


def _same_origin(request: Request) -> bool:
    """False when the browser says the request comes from another site."""
    origin = request.headers.get("origin")
    if origin is None:
        return True
    return urlsplit(origin).netloc.lower() == request.headers.get("host", "").lower()


# The recent decisions from the ledger (every decider's, newest first).
Recent = Callable[[int], list[dict[str, Any]]]


def console_routes(
    console: ConsoleSupervisor, auth: ConsoleAuth, *, recent: Recent
) -> list[BaseRoute]:
    """The console's routes, to mount in the bridge's app. `recent`: the ledger's last
    decisions (ledger_recent), shown beside the console's own."""

    def allowed(request: Request) -> bool:
        return auth.bearer_ok(request) or auth.session(request) is not None

    def unauthorised(request: Request) -> Response:
        wait = auth.retry_after(request)
        if wait:
            return _too_many(wait)
        return _json({"error": "unauthorized", "message": "Log in to the console first."}, 401)

    def snapshot() -> dict[str, Any]:
        # The console's own outcomes (decided, expired, cancelled), and every other
        # decider's from the ledger (the policy, the table, the webhook), newest first.
        others = [row for row in recent(RECENT_SHOWN) if row["by"] != "console"]
        rows = sorted([*console.recent(), *others], key=lambda row: row["ended_at"], reverse=True)
        return {"now": time.time(), "waiting": console.waiting(), "recent": rows[:RECENT_SHOWN]}

    async def page(request: Request) -> Response:
        session = auth.session(request)
        if session is None:
            return _login_page()
        return _respond(_asset("console.html").replace("{{csrf}}", html.escape(session.csrf)))

    async def login(request: Request) -> Response:
        if not _same_origin(request):
            return _login_page("This login came from another site.", 403)
        if request.headers.get("content-type", "").split(";")[0].strip() != (
            "application/x-www-form-urlencoded"
        ):
            return _login_page("Send the login form.", 400)
        raw = await _read_at_most(request, MAX_LOGIN_BYTES)
        if raw is None:
            return _login_page("Send the login form.", 400)
        try:
            fields = parse_qs(raw.decode("utf-8"), max_num_fields=4)
        except (UnicodeDecodeError, ValueError):
            return _login_page("Send the login form.", 400)
        offered = (fields.get("token") or [""])[0].strip()
        if not offered or not auth.token_ok(offered, _client(request)):
            wait = auth.retry_after(request)
            if wait:
                message = f"Too many wrong tokens from this address: try again in {wait} s."
                return _login_page(message, 429, retry_after=wait)
            return _login_page("The token was not accepted.")
        sid, _session = auth.open()
        logger.info("console login", extra={"client": _client(request)})
        response = RedirectResponse(PREFIX, status_code=303, headers=SECURITY_HEADERS)
        response.set_cookie(
            COOKIE,
            sid,
            max_age=int(SESSION_TTL_S),
            path=PREFIX,
            secure=auth.secure_cookie or request.url.scheme == "https",
            httponly=True,
            samesite="strict",
        )
        return response

    async def logout(request: Request) -> Response:
        if not _same_origin(request):
            return _json({"error": "forbidden", "message": "Cross-site request refused."}, 403)
        auth.close(request)
        response = RedirectResponse(PREFIX, status_code=303, headers=SECURITY_HEADERS)
        response.delete_cookie(COOKIE, path=PREFIX)
        return response

    async def static(request: Request) -> Response:
        name = request.path_params["name"]
        if name not in STATIC:
            return _json({"error": "not_found", "message": "No such file."}, 404)
        return _respond(_asset(name), media=STATIC[name])

    async def state(request: Request) -> Response:
        if not allowed(request):
            return unauthorised(request)
        return _json(snapshot())

    async def events(request: Request) -> Response:
        by_token = auth.bearer_ok(request)
        if not by_token and auth.session(request) is None:
            return unauthorised(request)

        async def stream() -> AsyncIterator[dict[str, str]]:
            sent: dict[str, Any] | None = None
            # A browser's stream lasts as long as its session: a logout or the session's
            # end closes it (within one look), so a closed tab's stream shows nothing more.
            while by_token or auth.session(request) is not None:
                version = console.version
                state = snapshot()
                if sent is None or {**state, "now": 0} != {**sent, "now": 0}:
                    sent = state
                    yield {"event": "state", "data": json.dumps(state)}
                with anyio.move_on_after(LEDGER_LOOK_S):
                    await console.changed(version)

        return EventSourceResponse(stream(), ping=EVENTS_PING_S, headers=SECURITY_HEADERS)

    async def decide(request: Request) -> Response:
        bearer = auth.bearer_ok(request)  # once: a wrong one counts as one miss
        session = None if bearer else auth.session(request)
        if session is None and not bearer:
            return unauthorised(request)
        if session is not None:
            offered = request.headers.get(CSRF_HEADER, "")
            if not _same_origin(request) or not hmac.compare_digest(
                offered.encode(), session.csrf.encode()
            ):
                return _json(
                    {"error": "forbidden", "message": "The CSRF token is missing or wrong."}, 403
                )
        try:
            body = json.loads(await request.body())
        except ValueError:
            body = None
        verdict = body.get("verdict") if isinstance(body, dict) else None
        reason = body.get("reason", "") if isinstance(body, dict) else ""
        if verdict not in ("allow", "deny") or not isinstance(reason, str):
            return _json(
                {
                    "error": "bad_request",
                    "message": 'Send {"verdict": "allow" or "deny", "reason": "..."}.',
                },
                400,
            )
        question_id = request.path_params["question_id"]
        outcome = console.decide(question_id, verdict, reason, by=_client(request))
        if outcome == "unknown":
            return _json({"error": "not_found", "message": "No such question."}, 404)
        if outcome == "gone":
            return _json(
                {
                    "error": "conflict",
                    "message": "That question was already decided, expired or cancelled.",
                },
                409,
            )
        # The decision's one log line is the console's own ("supervisor answered").
        return _json({"decided": verdict})

    # Every path under /console is the console's: the A2A guard leaves the whole prefix to
    # it, so no other route (the SDK's per-tenant REST mount, /{tenant}/...) may answer one.
    # A path the console does not serve is 404 here, a method it does not take 405.
    return [
        Route(PREFIX, page, methods=["GET"]),
        Mount(
            PREFIX,
            routes=[
                Route("/login", login, methods=["POST"]),
                Route("/logout", logout, methods=["POST"]),
                Route("/static/{name}", static, methods=["GET"]),
                Route("/state", state, methods=["GET"]),
                Route("/events", events, methods=["GET"]),
                Route("/decisions/{question_id}", decide, methods=["POST"]),
            ],
        ),
    ]


def ledger_recent(entries: Callable[[int], list[Any]]) -> Recent:
    """The ledger's recent entries (ledger.LedgerEntry) as the console's recent rows."""

    def rows(limit: int) -> list[dict[str, Any]]:
        found = entries(limit)
        return [
            {
                "id": entry.id,
                "ended_at": entry.time_ns / 1e9,
                "verdict": entry.verdict,
                "by": entry.decider,
                "how": f"{entry.decider}: {entry.rule}" + (" (shadow)" if entry.shadow else ""),
                "kind": entry.kind,
                "command": entry.command,
                "title": entry.title,
                "task_id": entry.task_id,
                "context_id": entry.context_id,
                "answer_reason": entry.reason,
            }
            for entry in found
        ]

    return rows


async def _read_at_most(request: Request, limit: int) -> bytes | None:
    """The body, or None once it is larger than `limit` (the rest is never read)."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        return None
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            return None
    return bytes(body)


def _client(request: Request) -> str:
    return request.client.host if request.client else ""
