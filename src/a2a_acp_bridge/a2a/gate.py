"""The gate in front of the A2A endpoints: what is checked before the SDK reads a request.

An ASGI middleware behind the guard (guard.py: hosts, tokens, the body limit), in front of
the SDK's routes (JSON-RPC at `rpc_path`, HTTP+JSON elsewhere):

- A JSON-RPC request whose Content-Type is not JSON gets JSON-RPC error -32005
  (ContentTypeNotSupportedError); a state-changing HTTP+JSON request (POST, PUT, PATCH)
  declared as anything but JSON gets HTTP 415 with the same error reason, even with an
  empty body, and so does one with no type and no body that a browser page sent (it
  carries `Origin`): a cross-site form or fetch cannot cancel a task. (The SDK's own 0.3
  client cancels with no type and no body, and no browser header: that passes.)
- A message with more than `max_parts` parts (A2A_MAX_PARTS) is refused before the SDK
  turns the JSON into objects, which for 200,000 tiny parts held the event loop for
  seconds: JSON-RPC -32602, or HTTP 400 (INVALID_ARGUMENT).
- A JSON-typed body of a state-changing request must be JSON the bridge reads
  (bodies.py: UTF-8, no NaN, at most MAX_DEPTH levels, no repeated key, no endless
  number): else JSON-RPC -32700 or -32600, or HTTP 400, in the bridge's words, before
  the SDK's decoder (whose exceptions' text it would answer) sees it. An HTTP+JSON error
  the SDK wrote from its parser's text (`Failed to parse message field: ...`) gets the
  bridge's sentence naming the field instead.
- `?A2A-Version=...` in the query string stands for the header (the spec allows either).
- An HTTP+JSON response is labelled with the JSON media type the client asked for: the
  first of `application/a2a+json` and `application/json` its `Accept` names, else the
  type of the body it sent; a client that states neither (a GET with `*/*`) gets the
  SDK's `application/a2a+json`. Errors stay `application/json`.
- An error from an A2A 0.3 HTTP+JSON path (`.../v1/...`) also names the error the way 0.3
  clients read it (`{"type": "TaskNotFoundError", "message": ...}` beside the 1.0 body).

The human console's paths (`passthrough`, /console) are no A2A endpoint and pass untouched:
the console checks its own requests (console_web.py).

A body is read here (the guard bounded it) and, when it may pass, replayed to the app;
later `receive` calls go to the server, so the SDK's streams still see the client
disconnect.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any
from urllib.parse import parse_qsl

from a2a_acp_bridge.a2a.bodies import PARSE, check_body, params_problem
from a2a_acp_bridge.a2a.failures import NOT_JSON

logger = logging.getLogger(__name__)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

VERSION_HEADER = b"a2a-version"
A2A_JSON = b"application/a2a+json"
PLAIN_JSON = b"application/json"
ERROR_DOMAIN = "a2a-protocol.org"
CONTENT_TYPE_NOT_SUPPORTED = -32005
INVALID_PARAMS = -32602
PARSE_ERROR = -32700
INVALID_REQUEST = -32600
STATE_CHANGING = ("POST", "PUT", "PATCH")
# HTTP+JSON operations posted without changing anything (SubscribeToTask).
READ_ONLY_SUFFIXES = (":subscribe",)
# How the protobuf JSON parser's messages begin (the SDK answers them as they are).
PARSER_PREFIXES = ("Failed to parse", "Failed to load JSON", "Message type ")
# ErrorInfo reasons and the error names A2A 0.3 HTTP+JSON clients expect.
LEGACY_ERROR_NAMES = {
    "TASK_NOT_FOUND": "TaskNotFoundError",
    "TASK_NOT_CANCELABLE": "TaskNotCancelableError",
    "PUSH_NOTIFICATION_NOT_SUPPORTED": "PushNotificationNotSupportedError",
    "UNSUPPORTED_OPERATION": "UnsupportedOperationError",
    "CONTENT_TYPE_NOT_SUPPORTED": "ContentTypeNotSupportedError",
    "INVALID_AGENT_RESPONSE": "InvalidAgentResponseError",
    "INVALID_PARAMS": "InvalidParamsError",
    "INVALID_REQUEST": "InvalidRequestError",
    "METHOD_NOT_FOUND": "MethodNotFoundError",
    "VERSION_NOT_SUPPORTED": "VersionNotSupportedError",
}


def is_json_media_type(value: bytes) -> bool:
    """application/json, application/a2a+json or any other +json type (parameters allowed)."""
    media = value.split(b";", 1)[0].strip().lower()
    return media == PLAIN_JSON or (media.startswith(b"application/") and media.endswith(b"+json"))


class Gate:
    """Checks A2A requests before the SDK's routes see them (after the guard, guard.py)."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        rpc_path: str,
        max_parts: int | None = None,
        passthrough: str | None = None,
    ) -> None:
        self.app = app
        self.rpc_path = rpc_path
        self.max_parts = max_parts
        self.passthrough = passthrough

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path: str = scope.get("path", "")
        prefix = self.passthrough
        if scope["type"] != "http" or (
            prefix is not None and (path == prefix or path.startswith(prefix + "/"))
        ):
            await self.app(scope, receive, send)
            return
        method: str = scope["method"]
        # Every other path is HTTP+JSON (under the prefix, or its per-tenant copy) or has no
        # body (the card, health, metrics).
        binding = "jsonrpc" if scope["path"] == self.rpc_path else "rest"
        headers: list[tuple[bytes, bytes]] = list(scope.get("headers", []))
        content_type = _header(headers, b"content-type")
        _version_from_query(scope, headers)

        json_typed = content_type is not None and is_json_media_type(content_type)
        if method in STATE_CHANGING and json_typed:
            body = await _read_body(receive)
            refusal = _refusal(body, binding, self.max_parts)
            if refusal is not None:
                await _reply(send, 200 if binding == "jsonrpc" else 400, refusal)
                return
            receive = _replay(body, receive)
        elif method in STATE_CHANGING and not json_typed:
            body = await _read_body(receive)
            shown = content_type.decode("latin-1") if content_type else "none"
            if binding == "jsonrpc":
                await _reply(
                    send,
                    200,
                    _jsonrpc_error(
                        CONTENT_TYPE_NOT_SUPPORTED,
                        f"Content-Type {shown!r} is not supported: send the JSON-RPC request "
                        "as application/json",
                        "CONTENT_TYPE_NOT_SUPPORTED",
                        request_id=_request_id(_json_or_none(body)),
                    ),
                )
                return
            if binding == "rest" and not _may_post_untyped(scope, headers, content_type, body):
                await _reply(
                    send,
                    415,
                    _rest_error(
                        415,
                        "INVALID_ARGUMENT",
                        f"Content-Type {shown!r} is not supported: send the request as "
                        "application/a2a+json or application/json",
                        "CONTENT_TYPE_NOT_SUPPORTED",
                    ),
                )
                return
            receive = _replay(body, receive)

        if binding == "rest":
            send = _labelled(send, headers, content_type)
            if "/v1/" in scope["path"]:
                send = _legacy_errors(send)
            send = _written_errors(send)
        await self.app(scope, receive, send)


def _refusal(body: bytes, binding: str, max_parts: int | None) -> bytes | None:
    """The error answer for a JSON-typed body the SDK must not see, or None."""
    if binding == "rest" and not body.strip():
        return None  # cancel and subscribe need no body; the SDK answers the others
    parsed, problem = check_body(body)
    if problem is not None:
        logger.info("request body refused", extra={"binding": binding, "problem": problem.message})
        if binding == "jsonrpc":
            code = PARSE_ERROR if problem.kind == PARSE else INVALID_REQUEST
            reason = "PARSE_ERROR" if problem.kind == PARSE else "INVALID_REQUEST"
            return _jsonrpc_error(code, problem.message, reason, request_id=None)
        return _rest_error(400, "INVALID_ARGUMENT", problem.message, "INVALID_REQUEST")
    many = _too_many_parts(parsed, max_parts) if max_parts is not None else None
    if many is None:
        return None
    if binding == "jsonrpc":
        return _jsonrpc_error(
            INVALID_PARAMS, many, "INVALID_PARAMS", request_id=_request_id(parsed)
        )
    return _rest_error(400, "INVALID_ARGUMENT", many, "INVALID_PARAMS")


def _header(headers: list[tuple[bytes, bytes]], name: bytes) -> bytes | None:
    for key, value in headers:
        if key.lower() == name:
            return value
    return None


def _version_from_query(scope: Scope, headers: list[tuple[bytes, bytes]]) -> None:
    """Copy ?A2A-Version=x into the header the SDK reads, unless the header is there."""
    query: bytes = scope.get("query_string", b"")
    if b"a2a-version" not in query.lower() or _header(headers, VERSION_HEADER) is not None:
        return
    for key, value in parse_qsl(query.decode("latin-1")):
        if key.lower() == "a2a-version":
            headers.append((VERSION_HEADER, value.encode("latin-1")))
            scope["headers"] = headers
            return


async def _read_body(receive: Receive) -> bytes:
    """The whole body (its size is bounded by the guard)."""
    chunks: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            break  # the client went away; the app will see an empty body
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


def _may_post_untyped(
    scope: Scope, headers: list[tuple[bytes, bytes]], content_type: bytes | None, body: bytes
) -> bool:
    """Whether a state-changing HTTP+JSON request not declared JSON may still pass: only one
    with no body and no Content-Type at all that no browser sent (no `Origin`, no cross-site
    `Sec-Fetch-Site`). The SDK's own 0.3 client cancels and subscribes that way; a form
    always declares its type, and a page's fetch always says where it comes from."""
    if content_type is not None or body.strip():
        return False
    if scope["path"].endswith(READ_ONLY_SUFFIXES):
        return True
    fetch_site = _header(headers, b"sec-fetch-site")
    from_page = _header(headers, b"origin") is not None or fetch_site not in (
        None,
        b"same-origin",
        b"none",
    )
    return not from_page


def _too_many_parts(parsed: Any, max_parts: int) -> str | None:
    """Why the message in the parsed body has too many parts, or None. Only a JSON-RPC
    request's or an HTTP+JSON body's `message` is looked at."""
    for request in parsed if isinstance(parsed, list) else [parsed]:
        if not isinstance(request, dict):
            continue
        params = request.get("params")
        holder = params if isinstance(params, dict) else request
        message = holder.get("message")
        parts = message.get("parts") if isinstance(message, dict) else None
        if isinstance(parts, list) and len(parts) > max_parts:
            return (
                f"the message has {len(parts)} parts; at most {max_parts} are accepted "
                "(A2A_MAX_PARTS)"
            )
    return None


def _replay(body: bytes, receive: Receive) -> Receive:
    delivered = False

    async def replay() -> Message:
        nonlocal delivered
        if not delivered:
            delivered = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


def asked_media_type(accept: bytes | None, content_type: bytes | None) -> bytes | None:
    """The JSON media type the client asked for: Accept first, then its own body's type."""
    for item in (accept or b"").split(b","):
        media = item.split(b";", 1)[0].strip().lower()
        if media in (A2A_JSON, PLAIN_JSON):
            return media
    media = (content_type or b"").split(b";", 1)[0].strip().lower()
    return media if media in (A2A_JSON, PLAIN_JSON) else None


def _labelled(send: Send, headers: list[tuple[bytes, bytes]], content_type: bytes | None) -> Send:
    if asked_media_type(_header(headers, b"accept"), content_type) != PLAIN_JSON:
        return send

    async def relabel(message: Message) -> None:
        if message["type"] == "http.response.start":
            message["headers"] = [
                (key, PLAIN_JSON)
                if key.lower() == b"content-type" and value.split(b";", 1)[0].strip() == A2A_JSON
                else (key, value)
                for key, value in message.get("headers", [])
            ]
        await send(message)

    return relabel


def _error_bodies(send: Send, statuses: range, amend: Callable[[bytes], bytes]) -> Send:
    """`send`, with the body of each response whose status is in `statuses` gathered whole,
    passed through `amend` and sent again with its Content-Length set to match."""
    held: Message | None = None
    chunks: list[bytes] = []

    async def rewrite(message: Message) -> None:
        nonlocal held
        if message["type"] == "http.response.start" and message.get("status", 200) in statuses:
            held = message
            return
        if held is None or message["type"] != "http.response.body":
            await send(message)
            return
        chunks.append(message.get("body", b""))
        if message.get("more_body", False):
            return
        body = amend(b"".join(chunks))
        held["headers"] = [
            (key, str(len(body)).encode() if key.lower() == b"content-length" else value)
            for key, value in held.get("headers", [])
        ]
        await send(held)
        await send({"type": "http.response.body", "body": body, "more_body": False})

    return rewrite


def _legacy_errors(send: Send) -> Send:
    """Add the 0.3 `type` and `message` members to an HTTP+JSON error body."""

    def amend(body: bytes) -> bytes:
        try:
            parsed = json.loads(body)
            error = parsed["error"]
            reason = error["details"][0]["reason"]
            parsed.setdefault("type", LEGACY_ERROR_NAMES.get(reason, "InternalError"))
            parsed.setdefault("message", error.get("message", ""))
        except (ValueError, KeyError, IndexError, TypeError):
            return body
        return json.dumps(parsed).encode()

    return _error_bodies(send, range(400, 600), amend)


def _written_errors(send: Send) -> Send:
    """An HTTP+JSON error the SDK wrote from its parser's text gets the bridge's words."""

    def amend(body: bytes) -> bytes:
        try:
            parsed = json.loads(body)
            error = parsed["error"]
            text = str(error["message"])
        except (ValueError, KeyError, TypeError):
            return body
        if not text.startswith(PARSER_PREFIXES):
            return body
        error["message"] = (
            NOT_JSON if text.startswith("Failed to load JSON") else params_problem(text)
        )
        for detail in error.get("details", []):
            if isinstance(detail, dict) and isinstance(detail.get("metadata"), dict):
                detail["metadata"] = {}
        return json.dumps(parsed).encode()

    return _error_bodies(send, range(400, 500), amend)


def _json_or_none(body: bytes) -> Any:
    parsed, _problem = check_body(body)
    return parsed


def _error_info(reason: str) -> dict[str, Any]:
    return {
        "@type": "type.googleapis.com/google.rpc.ErrorInfo",
        "reason": reason,
        "domain": ERROR_DOMAIN,
        "metadata": {},
    }


def _request_id(parsed: Any) -> str | int | None:
    """The JSON-RPC id of a parsed body, so the error can echo it."""
    request_id = parsed.get("id") if isinstance(parsed, dict) else None
    if isinstance(request_id, str | int) and not isinstance(request_id, bool):
        return request_id
    return None


def _jsonrpc_error(
    code: int, message: str, reason: str, *, request_id: str | int | None = None
) -> bytes:
    error = {"code": code, "message": message, "data": [_error_info(reason)]}
    return json.dumps({"jsonrpc": "2.0", "id": request_id, "error": error}).encode()


def _rest_error(status: int, status_name: str, message: str, reason: str) -> bytes:
    error = {
        "code": status,
        "status": status_name,
        "message": message,
        "details": [_error_info(reason)],
    }
    return json.dumps({"error": error}).encode()


async def _reply(send: Send, status: int, body: bytes, *, close: bool = False) -> None:
    headers = [
        (b"content-type", PLAIN_JSON),
        (b"content-length", str(len(body)).encode()),
    ]
    if close:
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
