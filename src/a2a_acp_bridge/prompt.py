"""What the caller asked, in the bridge's own words: the parts of one A2A message.

The `a2a` package builds these from the message's parts (checking size budgets); the
`acp` package turns them into ACP content blocks the agent advertised it accepts.

Text and resource links reach every agent. An image or audio file goes as such only when
the agent advertised `promptCapabilities.image` / `.audio`; any other inline file goes as an
embedded resource when `embeddedContext` is advertised, as text when it is text, and
otherwise cannot be given without losing it: `blob_form` says which, before any task exists.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from a2a_acp_bridge.agent import PromptCapabilities
from a2a_acp_bridge.errors import UnsupportedInputError


@dataclass(frozen=True)
class TextPart:
    text: str


@dataclass(frozen=True)
class BlobPart:
    """A file sent inline (A2A `raw`)."""

    data: bytes
    media_type: str
    name: str | None = None


@dataclass(frozen=True)
class LinkPart:
    """A file sent by reference (A2A `url`)."""

    uri: str
    media_type: str | None = None
    name: str | None = None


@dataclass(frozen=True)
class DataPart:
    """Structured data (A2A `data`): given to the agent as JSON text."""

    data: Any

    def as_text(self) -> str:
        return json.dumps(self.data, ensure_ascii=False, indent=2, sort_keys=True)


PromptPart = TextPart | BlobPart | LinkPart | DataPart


BlobForm = Literal["image", "audio", "resource-text", "resource", "text"]


def blob_text(part: BlobPart) -> str | None:
    """The file's bytes as UTF-8 text, or None when they are not."""
    try:
        return part.data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def blob_form(part: BlobPart, caps: PromptCapabilities) -> BlobForm:
    """How an inline file reaches this agent; UnsupportedInputError when it cannot."""
    media = part.media_type or "application/octet-stream"
    if media.startswith("image/") and caps.image:
        return "image"
    if media.startswith("audio/") and caps.audio:
        return "audio"
    textual = media.startswith("text/") or media in ("application/json", "application/xml")
    if caps.embedded_context:
        return "resource-text" if textual and blob_text(part) is not None else "resource"
    if media.startswith("text/") and blob_text(part) is not None:
        return "text"
    name = part.name or "attachment"
    raise UnsupportedInputError(
        f"the file {name!r} ({media}) cannot be given to this agent: it accepts no "
        + ("images" if media.startswith("image/") else "embedded files")
    )


def check_acceptable(parts: Sequence[PromptPart], caps: PromptCapabilities) -> None:
    """Raise UnsupportedInputError for the first part this agent cannot be given."""
    for part in parts:
        if isinstance(part, BlobPart):
            blob_form(part, caps)
