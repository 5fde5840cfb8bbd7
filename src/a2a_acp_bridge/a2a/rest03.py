"""A2A 0.3 over HTTP+JSON (`/rest/v1/...`): the SDK's 0.3 REST adapter, put right twice.

- A stream (`message:stream`, `tasks/{id}:subscribe`) is started only once its first
  event exists. The SDK's adapter answers 200 with an event stream at once and raises
  inside it when the handler refuses (an unknown task, a terminal one), so the client got
  a cut connection and the log a traceback; here the refusal is the 0.3 REST error body
  with its HTTP status, before any stream starts (as the SDK's 1.0 dispatcher does).
- Creating a push config accepts both bodies clients send: the 0.3 proto's
  (`body: "config"`: the TaskPushNotificationConfig itself, the task taken from the
  path; @a2a-js/sdk sends this) and a2a-sdk's whole request (`parent`, `configId`,
  `config`). The task is always the one in the path.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterable, AsyncIterator, Callable
from typing import Any

from a2a.compat.v0_3 import a2a_v0_3_pb2 as pb2_v03
from a2a.compat.v0_3 import proto_utils
from a2a.compat.v0_3 import types as types_v03
from a2a.compat.v0_3.rest_adapter import REST03Adapter
from a2a.compat.v0_3.rest_handler import REST03Handler
from a2a.server.context import ServerCallContext
from a2a.server.request_handlers.request_handler import RequestHandler
from a2a.server.routes.common import ServerCallContextBuilder, create_event_source_response
from a2a.utils import constants, json_utils
from a2a.utils.error_handlers import rest_stream_error_handler
from a2a.utils.errors import InvalidParamsError, InvalidRequestError
from a2a.utils.version_validator import validate_version
from google.protobuf.json_format import MessageToDict, ParseDict, ParseError
from sse_starlette.sse import EventSourceResponse
from starlette.requests import Request


def push_config_request(task_id: str, body: bytes) -> dict[str, Any]:
    """The CreateTaskPushNotificationConfigRequest a body stands for, in either shape."""
    try:
        parsed = json.loads(body or b"{}")
    except ValueError:
        raise InvalidParamsError(message="The push notification config is not JSON") from None
    if not isinstance(parsed, dict):
        raise InvalidParamsError(message="The push notification config must be a JSON object")
    config = parsed.get("config") if "config" in parsed else parsed
    if not isinstance(config, dict):
        raise InvalidParamsError(message="`config` must be a JSON object")
    # Proto JSON names fields either way (a2a-sdk 0.3 sends the proto's own names).
    inner = _either(config, "pushNotificationConfig", "push_notification_config")
    if not isinstance(inner, dict) or not inner.get("url"):
        raise InvalidParamsError(message="The push notification config needs a `url`")
    config_id = _either(parsed, "configId", "config_id") or inner.get("id") or ""
    return {"parent": f"tasks/{task_id}", "configId": config_id, "config": config}


def _either(mapping: dict[str, Any], camel: str, snake: str) -> Any:
    return mapping.get(camel, mapping.get(snake))


class Rest03Handler(REST03Handler):
    """The SDK's 0.3 REST handler with push-config creation taking both body shapes."""

    @validate_version(constants.PROTOCOL_VERSION_0_3)
    async def set_push_notification(
        self, request: Request, context: ServerCallContext
    ) -> dict[str, Any]:
        task_id = request.path_params["id"]
        wanted = pb2_v03.CreateTaskPushNotificationConfigRequest()
        try:
            ParseDict(
                push_config_request(task_id, await request.body()),
                wanted,
                ignore_unknown_fields=True,
            )
        except ParseError:
            raise InvalidParamsError(message="The push notification config is malformed") from None
        params = proto_utils.FromProto.task_push_notification_config_request(wanted)
        params.task_id = task_id
        if wanted.config_id and not params.push_notification_config.id:
            params.push_notification_config.id = wanted.config_id
        created = await self.handler03.on_create_task_push_notification_config(
            types_v03.SetTaskPushNotificationConfigRequest(id="", params=params), context
        )
        result: dict[str, Any] = MessageToDict(
            proto_utils.ToProto.task_push_notification_config(created)
        )
        return result


class Rest03Adapter(REST03Adapter):
    """The SDK's 0.3 REST adapter: refusals before the stream, both push-config bodies."""

    def __init__(
        self,
        http_handler: RequestHandler,
        context_builder: ServerCallContextBuilder | None = None,
    ) -> None:
        super().__init__(http_handler=http_handler, context_builder=context_builder)
        self.handler = Rest03Handler(request_handler=http_handler)

    @rest_stream_error_handler
    async def _handle_streaming_request(
        self,
        method: Callable[[Request, ServerCallContext], AsyncIterable[Any]],
        request: Request,
    ) -> EventSourceResponse:
        try:
            await request.body()
        except (ValueError, RuntimeError, OSError):
            # The exception's text is not the caller's business (the client went away).
            raise InvalidRequestError(message="The request body could not be read.") from None
        call_context = self._context_builder.build(request)
        stream = aiter(method(request, call_context))
        # The first event decides: a refusal raises here and becomes an error response.
        try:
            first = await anext(stream)
        except StopAsyncIteration:
            return create_event_source_response(iter([]))

        async def events() -> AsyncIterator[str]:
            yield json_utils.dumps(first)
            async for item in stream:
                yield json_utils.dumps(item)

        return create_event_source_response(events())
