"""Where the bridge's exceptions become what the caller sees: the one boundary.

- A request refused before any task exists gets a JSON-RPC (or HTTP+JSON) error:
  `request_error` (an input problem is InvalidParams -32602, a file the agent cannot take
  is ContentTypeNotSupported -32005, an A2A error stays itself, and anything else is a
  plain internal error whose cause goes to the log, never to the caller).
- A task that cannot finish gets a final state and a message written for its caller:
  `task_failure` (a cap reached is REJECTED, a cancel is CANCELED, the agent's failure or a
  sandbox that cannot be made, or a task the state database cannot record, is FAILED with
  what the bridge knows of it).
- A JSON-RPC error the SDK built from a parser's or an exception's text gets the bridge's
  own words: `written_rpc_error` (params the schema refused name the field, an internal
  error says only that it is one; the cause is in the log).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

from a2a.server.jsonrpc_models import InternalError as RpcInternalError
from a2a.server.jsonrpc_models import JSONParseError, JSONRPCError
from a2a.types.a2a_pb2 import TaskState
from a2a.utils.errors import (
    A2AError,
    ContentTypeNotSupportedError,
    InternalError,
    InvalidParamsError,
    InvalidRequestError,
)

from a2a_acp_bridge.a2a.bodies import params_problem
from a2a_acp_bridge.a2a.input import InputProblem
from a2a_acp_bridge.boundary import relative_text, without_layout
from a2a_acp_bridge.errors import (
    AdapterError,
    CapacityError,
    SandboxError,
    StateWriteError,
    UnsupportedInputError,
)
from a2a_acp_bridge.turn import Turn, TurnCancelled

logger = logging.getLogger(__name__)

INTERNAL = "Internal error (see the bridge's log)"
UNEXPECTED = "The bridge failed unexpectedly (see its log)."


def request_error(exc: Exception, operation: str) -> A2AError:
    """The A2A error to answer for `exc`, raised while serving `operation`."""
    if isinstance(exc, A2AError):
        return exc
    if isinstance(exc, InputProblem):
        return InvalidParamsError(message=str(exc))
    if isinstance(exc, UnsupportedInputError):
        return ContentTypeNotSupportedError(message=str(exc))
    logger.error("request failed unexpectedly", exc_info=exc, extra={"operation": operation})
    return InternalError(message=INTERNAL)


NOT_JSON = "The request body is not valid JSON."
NOT_JSON_RPC = (
    'Invalid JSON-RPC request: send one object with `jsonrpc` "2.0", a string `method` '
    "and an `id` that is a string, a number or null."
)


def written_rpc_error(error: A2AError | JSONRPCError) -> A2AError | JSONRPCError:
    """`error` as the caller may see it: nothing of a parser's or an exception's text."""
    data = error.data if isinstance(error.data, dict) else {}
    parser_text = data.get("parseError")
    if isinstance(error, InvalidParamsError) and parser_text is not None:
        return InvalidParamsError(message=params_problem(str(parser_text)))
    if isinstance(error, InvalidRequestError) and parser_text is not None:
        return InvalidRequestError(message=NOT_JSON_RPC)
    if isinstance(error, JSONParseError):
        return JSONParseError(message=NOT_JSON)
    if isinstance(error, RpcInternalError | InternalError) and error.message != INTERNAL:
        # The SDK's own catch-all: its message is the exception's text; the log has it.
        return RpcInternalError(message=INTERNAL)
    return error


def task_failure(
    exc: Exception,
    turn: Turn,
    *,
    root: Path | None = None,
    layout: Sequence[tuple[Path, str]] = (),
) -> tuple[int, str]:
    """The final state and message of a task whose turn raised `exc`: paths under the
    conversation's `root` relative to it, the bridge's own directories (`layout`) by name."""
    state, message = _failure(exc, turn)
    return state, without_layout(relative_text(message, root), layout)


def _failure(exc: Exception, turn: Turn) -> tuple[int, str]:
    if isinstance(exc, TurnCancelled) or (isinstance(exc, AdapterError) and turn.cancelled):
        return TaskState.TASK_STATE_CANCELED, turn.cancel_reason or ""
    if isinstance(exc, CapacityError):
        # A cap is reached: said at once, never queued silently (docs/operations.md).
        return TaskState.TASK_STATE_REJECTED, str(exc)
    if isinstance(exc, (AdapterError, UnsupportedInputError)):
        return TaskState.TASK_STATE_FAILED, str(exc)
    if isinstance(exc, StateWriteError):
        # Before anything reached the agent: a task the bridge cannot record is not run.
        return (
            TaskState.TASK_STATE_FAILED,
            f"The bridge could not record this task ({exc}); nothing was sent to the "
            "agent. Send it again once the bridge is ready (/readyz).",
        )
    if isinstance(exc, SandboxError):
        # The log names the path; the caller learns the cause, not the bridge's layout.
        logger.error("the conversation's sandbox could not be made", extra={"error": str(exc)})
        return (
            TaskState.TASK_STATE_FAILED,
            f"The bridge could not create the conversation's sandbox: {exc.problem}.",
        )
    logger.error("task failed unexpectedly", exc_info=exc)
    return TaskState.TASK_STATE_FAILED, UNEXPECTED
