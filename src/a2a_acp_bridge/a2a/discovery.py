"""Discovery: the agent card for both generations of A2A client, on one URL.

A 1.0 client and a 0.3 client read different cards. 1.0 reads `supportedInterfaces`
(each with its `protocolVersion`); its JSON schema forbids the 0.3 top-level fields. A
0.3 client (a2a-sdk 0.3 and everything built on it: Strands, ADK on 0.3; @a2a-js/sdk
0.3) cannot parse a card without the top-level `url` (and reads `preferredTransport`,
`protocolVersion`, `additionalInterfaces`). The spec's version rule settles which one a
request gets: a request that carries no `A2A-Version` (header or query parameter) is a
0.3 request, so it gets the card with the 0.3 interfaces declared and the 0.3 fields the
SDK derives from them; a request that says `A2A-Version: 1.x` gets the strict 1.0 card.
`Vary: A2A-Version` keeps caches from mixing them. The setting `A2A_CARD_V03` overrides
the choice: `true` serves the 0.3 fields to everyone, `false` to no one (the strict card
for every request, what the official 1.0 kit wants: it fetches the card without the
version header).

`/.well-known/agent.json`, the path before 0.3, serves the card with the 0.3 fields.

Every answer has `Cache-Control`, a weak `ETag` of the body (`If-None-Match` gets 304)
and `Last-Modified`, the time that body was first served.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from email.utils import formatdate
from typing import Any

from a2a.server.request_handlers.response_helpers import agent_card_to_dict
from a2a.types.a2a_pb2 import AgentCard
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

CARD_PATH = "/.well-known/agent-card.json"
# The path 0.2-era clients read.
LEGACY_CARD_PATH = "/.well-known/agent.json"
CARD_CACHE_CONTROL = "public, max-age=60"
VERSION_HEADER = "a2a-version"


def wants_v10(request: Request) -> bool:
    """True when the card request states A2A 1.x (header, or the query parameter)."""
    version = request.headers.get(VERSION_HEADER)
    if version is None:
        for key, value in request.query_params.items():
            if key.lower() == VERSION_HEADER:
                version = value
                break
    return (version or "").strip().split(".", 1)[0] == "1"


def serves_v03(request: Request, setting: bool | None) -> bool:
    """Whether this request gets the card with the 0.3 fields (setting None: by request)."""
    if request.url.path == LEGACY_CARD_PATH:
        return True
    if setting is not None:
        return setting
    return not wants_v10(request)


def card_policy(setting: bool | None) -> str:
    """What the startup log says about the card (which requests get the 0.3 fields)."""
    if setting is None:
        return (
            "1.0, with the 0.3 fields for requests without A2A-Version 1.x "
            "(A2A_CARD_V03=false: the strict 1.0 card for everyone)"
        )
    return "1.0 and 0.3 for every request" if setting else "strict 1.0 for every request"


def _etag(body: dict[str, Any]) -> str:
    unsigned = {key: value for key, value in body.items() if key != "signatures"}
    encoded = json.dumps(unsigned, sort_keys=True, separators=(",", ":")).encode()
    return f'W/"{hashlib.sha256(encoded).hexdigest()}"'


def _hits(header: str, etag: str) -> bool:
    candidates = [candidate.strip() for candidate in header.split(",")]
    return "*" in candidates or any(
        candidate.removeprefix("W/") == etag.removeprefix("W/") for candidate in candidates
    )


class CardEndpoint:
    """The card route: `build(with_v03)` makes the card for the bridge's current state."""

    def __init__(self, build: Callable[[bool], AgentCard], setting: bool | None) -> None:
        self.build = build
        self.setting = setting
        # When each body (by ETag) was first served, for Last-Modified.
        self._first_served: dict[str, str] = {}

    async def serve(self, request: Request) -> Response:
        body = agent_card_to_dict(self.build(serves_v03(request, self.setting)))
        etag = _etag(body)
        modified = self._first_served.get(etag)
        if modified is None:
            if len(self._first_served) > 16:
                self._first_served.clear()  # the card changed many times: start again
            modified = self._first_served[etag] = formatdate(time.time(), usegmt=True)
        headers = {
            "ETag": etag,
            "Cache-Control": CARD_CACHE_CONTROL,
            "Last-Modified": modified,
            "Vary": "A2A-Version",
        }
        match = request.headers.get("if-none-match")
        if match and _hits(match, etag):
            return Response(status_code=304, headers=headers)
        return JSONResponse(body, headers=headers)
