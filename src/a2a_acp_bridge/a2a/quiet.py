"""The SDK's log lines about a client's malformed request, without a traceback.

a2a-sdk 1.3.0's JSON-RPC dispatcher logs a request it cannot read (not JSON-RPC, bad
params) with `logger.exception`: an ERROR and a traceback for what is the client's error,
already answered with -32600 or -32602. The bridge's dispatcher (dispatcher.py) logs that
answer in one WARNING line, so `ClientErrorLines` drops exactly those lines. The SDK's
request handler logs an operation the agent does not offer (`Validation failure: The
agent does not support authenticated extended cards`) at ERROR, though it is the caller's
request, answered as unsupported: `RefusalLines` makes it one INFO line. Everything else
the SDK logs is left as it is.
"""

from __future__ import annotations

import logging

DISPATCHER_LOGGER = "a2a.server.routes.jsonrpc_dispatcher"
HANDLER_LOGGER = "a2a.server.request_handlers.request_handler"
# The handler's message for an operation the agent does not offer.
REFUSAL_MESSAGE = "Validation failure: %s"
# The dispatcher's messages for a request the client got wrong.
CLIENT_ERROR_MESSAGES = frozenset(
    {"Failed to validate base JSON-RPC request", "Failed to parse request params"}
)


class ClientErrorLines(logging.Filter):
    """A client's malformed request: the SDK's traceback dropped (the answer is logged)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.msg in CLIENT_ERROR_MESSAGES and record.exc_info)


class RefusalLines(logging.Filter):
    """An operation the agent does not offer, refused: INFO, not ERROR."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.msg == REFUSAL_MESSAGE and not record.exc_info:
            record.levelno = logging.INFO
            record.levelname = logging.getLevelName(logging.INFO)
        return True


def quiet_client_errors() -> None:
    """Install the filters on the SDK's loggers (once)."""
    for name, kind in ((DISPATCHER_LOGGER, ClientErrorLines), (HANDLER_LOGGER, RefusalLines)):
        target = logging.getLogger(name)
        if not any(isinstance(f, kind) for f in target.filters):
            target.addFilter(kind())
