"""The SDK's log lines about a client's malformed request, without a traceback.

a2a-sdk 1.3.0's JSON-RPC dispatcher logs a request it cannot read (not JSON-RPC, bad
params) with `logger.exception`: an ERROR and a traceback for what is the client's error,
already answered with -32600 or -32602. `ClientErrorLines` turns exactly those lines into
one WARNING without the traceback; everything else the SDK logs is left as it is.
"""

from __future__ import annotations

import logging

DISPATCHER_LOGGER = "a2a.server.routes.jsonrpc_dispatcher"
# The dispatcher's messages for a request the client got wrong.
CLIENT_ERROR_MESSAGES = frozenset(
    {"Failed to validate base JSON-RPC request", "Failed to parse request params"}
)


class ClientErrorLines(logging.Filter):
    """A client's malformed request: one WARNING line naming the problem, no traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.msg in CLIENT_ERROR_MESSAGES and record.exc_info:
            problem = record.exc_info[1]
            record.msg = f"{record.msg}: {type(problem).__name__}"
            record.exc_info = None
            record.exc_text = None
            record.levelno = logging.WARNING
            record.levelname = logging.getLevelName(logging.WARNING)
        return True


def quiet_client_errors() -> None:
    """Install the filter on the SDK's dispatcher logger (once)."""
    dispatcher = logging.getLogger(DISPATCHER_LOGGER)
    if not any(isinstance(f, ClientErrorLines) for f in dispatcher.filters):
        dispatcher.addFilter(ClientErrorLines())
