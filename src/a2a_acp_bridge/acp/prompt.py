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


def _blob_block(part: BlobPart, caps: PromptCapabilities) -> Any:
    encoded = base64.b64encode(part.data).decode("ascii")
    media = part.media_type or "application/octet-stream"
    name = part.name or "attachment"
    if media.startswith("image/") and caps.image:
        return ImageContentBlock(type="image", data=encoded, mime_type=media)
    if media.startswith("audio/") and caps.audio:
        return AudioContentBlock(type="audio", data=encoded, mime_type=media)
    if caps.embedded_context:
        uri = f"attachment:///{name}"
        if media.startswith("text/") or media in ("application/json", "application/xml"):
            try:
                text = part.data.decode("utf-8")
            except UnicodeDecodeError:
                text = None
            if text is not None:
                return EmbeddedResourceContentBlock(
                    type="resource",
                    resource=TextResourceContents(uri=uri, text=text, mime_type=media),
                )
        return EmbeddedResourceContentBlock(
            type="resource",
            resource=BlobResourceContents(uri=uri, blob=encoded, mime_type=media),
        )
    if media.startswith("text/"):
        try:
            return TextContentBlock(type="text", text=f"[{name}]\n{part.data.decode('utf-8')}")
        except UnicodeDecodeError:
            pass
    raise UnsupportedInputError(
        f"the file {name!r} ({media}) cannot be given to this agent: it accepts no "
        + ("images" if media.startswith("image/") else "embedded files")
    )
