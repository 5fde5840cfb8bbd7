"""a2a-acp-bridge: an A2A server whose tasks run on ACP coding agents, supervised by the bridge."""

__version__ = "0.1.0"
