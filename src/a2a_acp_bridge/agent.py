"""What the bridge learns of its agent at `initialize`, in the bridge's own words.

The A2A side renders the card and checks the caller's input from these, without importing
the ACP SDK.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class AgentInfo:
    """Who the adapter says it is at initialize."""

    name: str | None = None
    title: str | None = None
    version: str | None = None

    def display(self, fallback: str) -> str:
        """The name in messages: the package name without its npm scope."""
        name = self.name or fallback
        if name.startswith("@") and "/" in name:
            name = name.split("/", 1)[1]
        return name


@dataclass(frozen=True)
class PromptCapabilities:
    """Which content the agent accepts in a prompt beyond text and resource links."""

    image: bool = False
    audio: bool = False
    embedded_context: bool = False
