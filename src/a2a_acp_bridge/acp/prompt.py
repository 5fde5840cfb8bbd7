"""Turn the caller's message parts into ACP content blocks the agent accepts.

Text and resource links are accepted by every agent. An image or audio file goes as such
only when the agent advertised `promptCapabilities.image` / `.audio`; any other inline file
goes as an embedded resource when `embeddedContext` is advertised, and as a text block
describing it otherwise would lose content, so that case is an error the caller sees.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from acp.schema import (
    AudioContentBlock,
    BlobResourceContents,
    EmbeddedResourceContentBlock,
    ImageContentBlock,
    ResourceContentBlock,
    TextContentBlock,
    TextResourceContents,
)

from a2a_acp_bridge.errors import BridgeError
from a2a_acp_bridge.prompt import BlobPart, DataPart, LinkPart, PromptPart, TextPart


class UnsupportedInputError(BridgeError):
    """A part of the message cannot be given to this agent without losing it."""


@dataclass(frozen=True)
class PromptCapabilities:
    image: bool = False
    audio: bool = False
    embedded_context: bool = False


def to_content_blocks(parts: Sequence[PromptPart], caps: PromptCapabilities) -> list[Any]:
    blocks: list[Any] = []
    for part in parts:
        if isinstance(part, TextPart):
            blocks.append(TextContentBlock(type="text", text=part.text))
        elif isinstance(part, DataPart):
            blocks.append(TextContentBlock(type="text", text=part.as_text()))
        elif isinstance(part, LinkPart):
            blocks.append(
                ResourceContentBlock(
                    type="resource_link",
                    uri=part.uri,
                    name=part.name or part.uri.rsplit("/", 1)[-1] or part.uri,
                    mime_type=part.media_type,
                )
            )
        else:
            blocks.append(_blob_block(part, caps))
    return blocks


def check_acceptable(parts: Sequence[PromptPart], caps: PromptCapabilities) -> None:
    """Raise UnsupportedInputError for the first part this agent cannot be given."""
    for part in parts:
        if isinstance(part, BlobPart):
            _blob_form(part, caps)


def _text_of(part: BlobPart) -> str | None:
    try:
        return part.data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _blob_form(part: BlobPart, caps: PromptCapabilities) -> str:
    """How an inline file reaches this agent: image, audio, resource-text, resource or text."""
    media = part.media_type or "application/octet-stream"
    if media.startswith("image/") and caps.image:
        return "image"
    if media.startswith("audio/") and caps.audio:
        return "audio"
    textual = media.startswith("text/") or media in ("application/json", "application/xml")
    if caps.embedded_context:
        return "resource-text" if textual and _text_of(part) is not None else "resource"
    if media.startswith("text/") and _text_of(part) is not None:
        return "text"
    name = part.name or "attachment"
    raise UnsupportedInputError(
        f"the file {name!r} ({media}) cannot be given to this agent: it accepts no "
        + ("images" if media.startswith("image/") else "embedded files")
    )


def _blob_block(part: BlobPart, caps: PromptCapabilities) -> Any:
    form = _blob_form(part, caps)
    media = part.media_type or "application/octet-stream"
    name = part.name or "attachment"
    if form == "text":
        return TextContentBlock(type="text", text=f"[{name}]\n{_text_of(part)}")
    if form == "resource-text":
        return EmbeddedResourceContentBlock(
            type="resource",
            resource=TextResourceContents(
                uri=f"attachment:///{name}", text=_text_of(part) or "", mime_type=media
            ),
        )
    encoded = base64.b64encode(part.data).decode("ascii")
    if form == "image":
        return ImageContentBlock(type="image", data=encoded, mime_type=media)
    if form == "audio":
        return AudioContentBlock(type="audio", data=encoded, mime_type=media)
    return EmbeddedResourceContentBlock(
        type="resource",
        resource=BlobResourceContents(uri=f"attachment:///{name}", blob=encoded, mime_type=media),
    )
