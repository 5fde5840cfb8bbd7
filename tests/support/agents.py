"""Command lines for the test agents (real subprocesses speaking ACP over stdio)."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path
from typing import Any

AGENTS_DIR = Path(__file__).resolve().parent.parent / "agents"


def scripted_agent(tmp_path: Path, script: dict[str, Any], name: str = "script") -> str:
    """ACP_AGENT for the scripted agent running `script` (written under tmp_path)."""
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(script))
    return shlex.join([sys.executable, str(AGENTS_DIR / "scripted_agent.py"), str(path)])


CLAUDE_INFO = {
    "name": "@agentclientprotocol/claude-agent-acp",
    "title": "Claude Agent",
    "version": "0.101.0",
}
CODEX_INFO = {"name": "@agentclientprotocol/codex-acp", "title": "Codex", "version": "2.6.0"}
GEMINI_INFO = {"name": "gemini-cli", "title": "Gemini CLI", "version": "0.61.0"}
CLAUDE_MODES = {"current": "auto", "available": ["default", "acceptEdits", "plan", "auto"]}
CLAUDE_OPTIONS = [
    ["allow-once", "Allow", "allow_once"],
    ["allow-with-updates", "Always allow", "allow_always"],
    ["reject", "Reject", "reject_once"],
]
