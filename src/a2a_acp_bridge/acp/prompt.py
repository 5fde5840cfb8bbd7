"""The caller's message parts as the ACP content blocks the agent accepts (the choice of
form for each inline file is `prompt.blob_form`)."""

from __future__ import annotations

import base64
from collections.abc import Sequence
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

from a2a_acp_bridge.agent import PromptCapabilities
from a2a_acp_bridge.prompt import (
    BlobPart,
    DataPart,
    LinkPart,
    PromptPart,
    TextPart,
    blob_form,
    blob_text,
)


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
    form = blob_form(part, caps)
    media = part.media_type or "application/octet-stream"
    name = part.name or "attachment"
    if form == "text":
        return TextContentBlock(type="text", text=f"[{name}]\n{blob_text(part)}")
    if form == "resource-text":
        return EmbeddedResourceContentBlock(
            type="resource",
            resource=TextResourceContents(
                uri=f"attachment:///{name}", text=blob_text(part) or "", mime_type=media
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
