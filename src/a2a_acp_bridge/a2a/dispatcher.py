"""The SDK's JSON-RPC dispatcher, answering errors only in the bridge's words.

a2a-sdk 1.3.0's dispatcher puts a parser's or an exception's text in its error answers:
the protobuf parser's account of params in `data[0].metadata.parseError` (`Failed to
parse message field: ... 'NoneType' object is not iterable`), the exception's message as
an internal error's (`maximum recursion depth exceeded`). Every error it answers itself
goes through `_generate_error_response`; here that answer is rewritten first
(`failures.written_rpc_error`) and logged in one line: WARNING for the caller's mistake,
ERROR for an internal error (whose traceback the SDK has logged once, as the bridge's bug).

Bodies the SDK's JSON decoder would choke on never get this far: the gate (gate.py,
bodies.py) answers them -32700 or -32600 first.
"""

from __future__ import annotations

import logging

from a2a.server.jsonrpc_models import InternalError as RpcInternalError
from a2a.server.jsonrpc_models import JSONRPCError
from a2a.server.request_handlers.response_helpers import build_error_response
from a2a.server.routes.jsonrpc_dispatcher import JsonRpcDispatcher
from a2a.utils.errors import A2AError
from starlette.responses import JSONResponse

from a2a_acp_bridge.a2a.failures import INTERNAL, written_rpc_error

logger = logging.getLogger(__name__)

INTERNAL_ERROR = -32603


class BridgeDispatcher(JsonRpcDispatcher):
    """JSON-RPC at `/`: the SDK's dispatcher with the bridge's error answers."""

    def _generate_error_response(
        self, request_id: str | int | None, error: Exception | JSONRPCError | A2AError
    ) -> JSONResponse:
        written = (
            written_rpc_error(error)
            if isinstance(error, A2AError | JSONRPCError)
            else RpcInternalError(message=INTERNAL)
        )
        answer = build_error_response(request_id, written)
        code = answer.get("error", {}).get("code")
        logger.log(
            logging.ERROR if code == INTERNAL_ERROR else logging.WARNING,
            "JSON-RPC request refused",
            extra={"code": code, "error": answer.get("error", {}).get("message")},
        )
        return JSONResponse(answer, status_code=200)
