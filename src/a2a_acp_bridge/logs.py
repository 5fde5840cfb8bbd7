"""Log output: one line per event, readable on a terminal, JSON lines elsewhere.

Modules log with `logger.info("event name", extra={...fields})`; this module, configured
only by the CLI, renders the fields: `key=value` after the message on a terminal, or one
JSON object per line (`ts`, `level`, `logger`, `event` and the fields) when stderr is not a
terminal or LOG_FORMAT=json. Prompt text and ACP frames are logged only at DEBUG.
Control characters and escape sequences in what is logged (a contextId, a title, a
command, the agent's output) are shown as escapes, never sent to the terminal raw
(terminal.py).

`log_ids(task_id=..., context_id=..., session_id=...)` binds the ids of the work at hand
for the current task (a context variable): every record logged inside it carries them
unless the call names them itself. The A2A executor binds a task's ids for the whole
task, the bridge adds the session's for the turn.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import logging
import sys
import time
from collections.abc import Iterator, Mapping
from types import MappingProxyType
from typing import Any, TextIO

from a2a_acp_bridge.terminal import json_safe, neutralise

# The ids of the work the current asyncio task is doing.
_NO_IDS: Mapping[str, str] = MappingProxyType({})
_IDS: contextvars.ContextVar[Mapping[str, str]] = contextvars.ContextVar("log_ids", default=_NO_IDS)


@contextlib.contextmanager
def log_ids(**ids: str | None) -> Iterator[None]:
    """Bind ids for records logged in this block (None unbinds one)."""
    merged = dict(_IDS.get())
    for key, value in ids.items():
        if value:
            merged[key] = value
        else:
            merged.pop(key, None)
    token = _IDS.set(MappingProxyType(merged))
    try:
        yield
    finally:
        _IDS.reset(token)


class IdFilter(logging.Filter):
    """Adds the bound ids to every record that does not carry them already."""

    def filter(self, record: logging.LogRecord) -> bool:
        for key, value in _IDS.get().items():
            if getattr(record, key, None) is None:
                setattr(record, key, value)
        return True


# Attributes every LogRecord has; anything else came in through `extra=`.
# (uvicorn adds `color_message`, a copy of the message with terminal colours.)
_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {
    "message",
    "asctime",
    "color_message",
}


def record_fields(record: logging.LogRecord) -> dict[str, Any]:
    return {key: value for key, value in vars(record).items() if key not in _STANDARD}


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "event": record.getMessage(),
        }
        entry.update(record_fields(record))
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json_safe(json.dumps(entry, default=str, ensure_ascii=False))


# On a terminal these come first (what was decided), and the ids last, cut to 8 characters
# (enough to tell conversations apart by eye; the JSON lines keep them whole).
_FIRST = ("state", "verdict", "rule", "chosen", "reason", "error")
_SHORT_IDS = {"context_id": "ctx", "task_id": "task", "session_id": "session"}


class TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        stamp = time.strftime("%H:%M:%S", time.localtime(record.created))
        found = record_fields(record)
        ordered = [key for key in _FIRST if key in found]
        ordered += [key for key in found if key not in _FIRST and key not in _SHORT_IDS]
        parts = [f"{neutralise(key)}={_short(found[key])}" for key in ordered]
        parts += [
            f"{short}={neutralise(str(found[key])[:8])}"
            for key, short in _SHORT_IDS.items()
            if found.get(key)
        ]
        fields = " ".join(parts)
        line = f"{stamp} {record.levelname:<7} {neutralise(record.getMessage())}"
        if fields:
            line = f"{line}  {fields}"
        if record.exc_info:
            line = f"{line}\n{neutralise(self.formatException(record.exc_info), keep=chr(10))}"
        return line


def _short(value: Any) -> str:
    if not isinstance(value, str):
        text = json.dumps(value, default=str, ensure_ascii=False, separators=(",", ":"))
        text = json_safe(text)
        return text if len(text) <= 200 else text[:197] + "..."
    text = neutralise(" ".join(value.split()))
    if len(text) > 200:
        text = text[:197] + "..."
    # Quoted when it holds a space, so `key=value` pairs stay unambiguous.
    return json.dumps(text, ensure_ascii=False) if " " in text or not text else text


def make_handler(stream: TextIO, *, use_json: bool) -> logging.Handler:
    """A handler writing one line per record, with the bound ids, in either format."""
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter() if use_json else TextFormatter())
    handler.addFilter(IdFilter())
    return handler


def configure_logging(fmt: str | None = None, level: str | None = None) -> None:
    """Send every log line to stderr in the chosen format (auto: text on a terminal)."""
    choice = (fmt or "auto").strip().lower()
    use_json = choice == "json" or (choice == "auto" and not sys.stderr.isatty())
    handler = make_handler(sys.stderr, use_json=use_json)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel((level or "INFO").upper())
    # Third-party chatter stays at WARNING unless asked for.
    for name in ("uvicorn.access", "httpx", "httpcore", "a2a", "sse_starlette"):
        logging.getLogger(name).setLevel(logging.WARNING)
