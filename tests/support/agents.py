"""Command lines for the test agents (real subprocesses speaking ACP over stdio)."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path
from typing import Any

AGENTS_DIR = Path(__file__).resolve().parent.parent / "agents"
# Where a test's agent scripts and logs live: a confined agent reads its script from the
# command line (isolation grants the files it names) and writes its log here, a directory
# `make_settings` hands to every adapter with ACP_ISOLATION_WRITE when it exists.
AGENT_IO = "agent-io"


def agent_io(tmp_path: Path) -> Path:
    """The test's directory for agent scripts and logs (made on first use)."""
    path = tmp_path / AGENT_IO
    path.mkdir(exist_ok=True)
    return path


def scripted_agent(tmp_path: Path, script: dict[str, Any], name: str = "script") -> str:
    """ACP_AGENT for the scripted agent running `script` (written under tmp_path)."""
    path = agent_io(tmp_path) / f"{name}.json"
    path.write_text(json.dumps(script))
    return shlex.join([sys.executable, str(AGENTS_DIR / "scripted_agent.py"), str(path)])


def logged_agent(tmp_path: Path, script: dict[str, Any], name: str = "agent") -> tuple[str, Path]:
    """ACP_AGENT for the scripted agent, and the log where it records its processes."""
    log = agent_io(tmp_path) / f"{name}.log.jsonl"
    return scripted_agent(tmp_path, {**script, "log": str(log)}, name), log


CLAUDE_INFO = {
    "name": "@agentclientprotocol/claude-agent-acp",
    "title": "Claude Agent",
    "version": "0.101.0",
}
CODEX_INFO = {"name": "@agentclientprotocol/codex-acp", "title": "Codex", "version": "2.6.0"}
GEMINI_INFO = {"name": "gemini-cli", "title": "Gemini CLI", "version": "0.61.0"}
CLAUDE_MODES = {"current": "auto", "available": ["default", "acceptEdits", "plan", "auto"]}
GOOSE_INFO = {"name": "goose", "version": "1.9.0"}
CLAUDE_OPTIONS = [
    ["allow-once", "Allow", "allow_once"],
    ["allow-with-updates", "Always allow", "allow_always"],
    ["reject", "Reject", "reject_once"],
]


def wrapped_agent(
    tmp_path: Path, script: dict[str, Any], kind: str, name: str = "agent"
) -> tuple[str, Path]:
    """ACP_AGENT for a shim (a bash or node script) that runs the scripted agent as its
    child, the way npx and node shims run the real binary, and the shared log (the shim
    logs itself as a "wrapper" process)."""
    log = agent_io(tmp_path) / f"{name}.log.jsonl"
    path = agent_io(tmp_path) / f"{name}.json"
    path.write_text(json.dumps({**script, "log": str(log)}))
    agent = [sys.executable, str(AGENTS_DIR / "scripted_agent.py"), str(path)]
    if kind == "bash":
        shim = agent_io(tmp_path) / f"{name}-shim.sh"
        shim.write_text(
            "#!/bin/bash\n"
            "read -r stat < /proc/$$/stat\n"
            'rest="${stat##*) }"\n'
            "start=$(echo \"$rest\" | cut -d' ' -f20)\n"
            f'echo "{{\\"event\\": \\"wrapper\\", \\"pid\\": $$, \\"start\\": \\"$start\\"}}"'
            f" >> {shlex.quote(str(log))}\n"
            f"{shlex.join(agent)}\n"
            'echo "the agent ended" >&2\n'
        )
    else:
        shim = agent_io(tmp_path) / f"{name}-shim.js"
        shim.write_text(
            "#!/usr/bin/env node\n"
            "const fs = require('fs');\n"
            "const { spawn } = require('child_process');\n"
            "const stat = fs.readFileSync('/proc/self/stat', 'utf8');\n"
            "const start = stat.slice(stat.lastIndexOf(')') + 2).split(' ')[19];\n"
            f"fs.appendFileSync({json.dumps(str(log))}, JSON.stringify("
            "{event: 'wrapper', pid: process.pid, start}) + '\\n');\n"
            f"const child = spawn({json.dumps(agent[0])}, {json.dumps(agent[1:])},"
            " {stdio: 'inherit'});\n"
            "child.on('exit', (code) => process.exit(code === null ? 1 : code));\n"
        )
    shim.chmod(0o755)
    return shlex.quote(str(shim)), log
