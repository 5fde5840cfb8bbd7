"""What the caller asked, in the bridge's own words: the parts of one A2A message.

The `a2a` package builds these from the message's parts (checking size budgets); the
`acp` package turns them into ACP content blocks the agent advertised it accepts.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any


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
