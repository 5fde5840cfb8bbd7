"""GET /decisions: the decision ledger over HTTP, behind the bridge's tokens (guard.py).

Query parameters: `context` (a contextId), `since` (ISO 8601 UTC, `2026-12-01T12:00:00Z`,
or seconds since the epoch), `limit` (1 to 1000, default 100). The answer is JSON,
`{"decisions": [...]}`, newest first, each entry as ledger.LedgerEntry.to_json. A bad
parameter is a 400 with a JSON message; a ledger not open yet is a 503.

A caller sees the decisions made in its own tasks only (its principal, which the door put
in the scope); the principals of A2A_ADMIN_PRINCIPALS see every one.
"""

from __future__ import annotations

from collections.abc import Callable, Collection

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from a2a_acp_bridge.ledger import MAX_QUERY_ROWS, DecisionLedger, parse_since
from a2a_acp_bridge.schema import DEFAULT_PRINCIPAL

DEFAULT_LIMIT = 100


def decisions_endpoint(
    ledger_of: Callable[[], DecisionLedger | None],
    admins: Collection[str] = (),
) -> Callable[[Request], object]:
    async def serve(request: Request) -> Response:
        ledger = ledger_of()
        if ledger is None:
            return JSONResponse({"error": "the ledger is not open"}, status_code=503)
        params = request.query_params
        unknown = sorted(set(params) - {"context", "since", "limit"})
        if unknown:
            return _bad(f"unknown parameter {unknown[0]!r} (context, since, limit)")
        limit_text = params.get("limit", str(DEFAULT_LIMIT))
        if not limit_text.isdigit() or not 1 <= int(limit_text) <= MAX_QUERY_ROWS:
            return _bad(f"limit must be a whole number from 1 to {MAX_QUERY_ROWS}")
        since_ns = None
        if "since" in params:
            since_ns = parse_since(params["since"])
            if since_ns is None:
                return _bad("since must be ISO 8601 UTC (2026-12-01T12:00:00Z) or epoch seconds")
        user = request.scope.get("user")
        caller = user.display_name if user is not None else DEFAULT_PRINCIPAL
        entries = await ledger.query(
            context_id=params.get("context") or None,
            since_ns=since_ns,
            limit=int(limit_text),
            principal=None if caller in admins else caller,
        )
        return JSONResponse({"decisions": [entry.to_json() for entry in entries]})

    return serve


def _bad(message: str) -> Response:
    return JSONResponse({"error": message}, status_code=400)
