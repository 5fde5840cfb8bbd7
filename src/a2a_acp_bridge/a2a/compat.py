"""A2A 0.3 over JSON-RPC: the SDK's compatibility adapter with two error codes put right.

a2a-sdk 1.3.0 serves the 0.3 method names (`message/send`, `tasks/get`, ...) on the same
endpoint as 1.0. Its adapter answers two cases with the wrong code, which 0.3 clients and
the 0.3 conformance kit notice:

- params that do not validate get -32600 (invalid request); the SDK has already checked
  the envelope, so JSON-RPC says -32602 (invalid params);
- an integer field beyond the proto's int32 (`historyLength: 1e30` as digits) passes the
  0.3 model and fails the conversion to 1.0 inside the handler: -32603 with the
  conversion's text; it is checked here and is -32602 (invalid params), naming the field;
- a 0.3 method sent with `A2A-Version: 1.0` gets -32603 (internal error), because the
  adapter maps errors 0.3 does not know to it; the caller declared 1.0, so it is told
  -32009 (version not supported) with the method to use instead.
"""

from __future__ import annotations

import logging
from typing import Any

from a2a.compat.v0_3.jsonrpc_adapter import JSONRPC03Adapter
from a2a.server.jsonrpc_models import InternalError as CoreInternalError
from a2a.server.jsonrpc_models import InvalidParamsError as CoreInvalidParamsError
from a2a.server.jsonrpc_models import InvalidRequestError as CoreInvalidRequestError
from a2a.server.jsonrpc_models import JSONRPCError
from a2a.utils.errors import A2AError, VersionNotSupportedError
from pydantic import BaseModel, ValidationError
from sse_starlette.sse import EventSourceResponse
from starlette.requests import Request
from starlette.responses import JSONResponse

logger = logging.getLogger(__name__)

VERSION_NOT_SUPPORTED = -32009
# The range of the proto's int32 fields, every integer field of the 0.3 params.
INT32 = range(-(2**31), 2**31)
# The 1.0 method that replaces each 0.3 one, for the -32009 message.
METHODS_1_0 = {
    "message/send": "SendMessage",
    "message/stream": "SendStreamingMessage",
    "tasks/get": "GetTask",
    "tasks/cancel": "CancelTask",
    "tasks/resubscribe": "SubscribeToTask",
    "tasks/pushNotificationConfig/set": "CreateTaskPushNotificationConfig",
    "tasks/pushNotificationConfig/get": "GetTaskPushNotificationConfig",
    "tasks/pushNotificationConfig/list": "ListTaskPushNotificationConfigs",
    "tasks/pushNotificationConfig/delete": "DeleteTaskPushNotificationConfig",
    "agent/getAuthenticatedExtendedCard": "GetExtendedAgentCard",
}


class Compat03Adapter(JSONRPC03Adapter):
    """Serves 0.3 JSON-RPC requests through the bridge's 1.0 request handler."""

    async def handle_request(
        self,
        request_id: str | int | None,
        method: str,
        body: dict[str, Any],
        request: Request,
    ) -> JSONResponse | EventSourceResponse:
        try:
            model_class: Any = self.METHOD_TO_MODEL[method]
            try:
                specific_request = model_class.model_validate(body)
            except ValidationError as exc:
                # The dispatcher has checked the envelope; the 0.3 model also insists on an
                # id, which a notification lacks, so any error in params decides.
                in_params = any(error["loc"][:1] == ("params",) for error in exc.errors())
                error: JSONRPCError = (
                    CoreInvalidParamsError(message=f"Invalid parameters for {method}")
                    if in_params
                    else CoreInvalidRequestError(message="Invalid JSON-RPC request")
                )
                return self._generate_error_response(request_id, error)
            params = getattr(specific_request, "params", None)
            wide = _integer_out_of_range(params)
            if wide is not None:
                return self._generate_error_response(
                    request_id,
                    CoreInvalidParamsError(
                        message=f"Invalid parameters for {method}: `{wide}` is out of range"
                    ),
                )
            call_context = self._context_builder.build(request)
            call_context.tenant = getattr(params, "tenant", "") or ""
            call_context.state["method"] = method
            call_context.state["request_id"] = request_id
            if method in ("message/stream", "tasks/resubscribe"):
                streamed: EventSourceResponse = await self._process_streaming_request(
                    request_id, specific_request, call_context
                )
                return streamed
            answered: JSONResponse = await self._process_non_streaming_request(
                request_id, specific_request, call_context
            )
            return answered
        except VersionNotSupportedError as exc:
            replacement = METHODS_1_0.get(method)
            message = str(exc.message)
            if replacement:
                message += (
                    f" {method} is an A2A 0.3 method; with A2A-Version 1.0 use {replacement}."
                )
            return JSONResponse(
                {
                    "jsonrpc": "2.0",
                    "id": request_id,
                    "error": {"code": VERSION_NOT_SUPPORTED, "message": message},
                }
            )
        except A2AError as exc:
            return self._generate_error_response(request_id, exc)
        except Exception:
            logger.exception("0.3 request failed", extra={"method": method})
            return self._generate_error_response(
                request_id, CoreInternalError(message="Internal error (see the bridge's log)")
            )


def _integer_out_of_range(model: Any, path: str = "") -> str | None:
    """The path of an integer field of `model` (and its nested models, not its free-form
    dicts such as metadata) beyond int32, or None."""
    if not isinstance(model, BaseModel):
        return None
    for name, declared in type(model).model_fields.items():
        value = getattr(model, name, None)
        shown = declared.alias or name  # the name on the wire
        where = f"{path}.{shown}" if path else shown
        if isinstance(value, int) and not isinstance(value, bool) and value not in INT32:
            return where
        nested = value if isinstance(value, list) else [value]
        for item in nested:
            found = _integer_out_of_range(item, where)
            if found is not None:
                return found
    return None
