"""The verbatim permission requests captured from real adapters (tests/fixtures/acp).

Each fixture is the `params` of one `session/request_permission`, with `{CWD}`,
`{OUTSIDE}`, `{WORKROOT}`, `{HOME}`, `{PORT}` and `{GEMINI_TMP}` standing for the paths of
the run; INDEX.json says, per file, what the harness answered and what that did.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

FIXTURES_DIR = Path(__file__).resolve().parent.parent / "fixtures" / "acp"

# INDEX.json names the npm package; the classifier keys on the agentInfo.name the adapter
# reports at initialize (gemini-cli's own source: name 'gemini-cli').
AGENT_NAME_OF_PACKAGE = {
    "@agentclientprotocol/claude-agent-acp": "@agentclientprotocol/claude-agent-acp",
    "@agentclientprotocol/codex-acp": "@agentclientprotocol/codex-acp",
    "@google/gemini-cli": "gemini-cli",
}


@dataclass(frozen=True)
class Places:
    """Where the placeholders point in one test."""

    cwd: Path
    outside: Path
    home: Path

    def substitute(self, text: str) -> str:
        for key, value in (
            ("{CWD}", str(self.cwd)),
            ("{OUTSIDE}", str(self.outside)),
            ("{WORKROOT}", str(self.cwd.parent)),
            ("{HOME}", str(self.home)),
            ("{PORT}", "8123"),
            ("{GEMINI_TMP}", "/tmp"),
        ):
            text = text.replace(key, value)
        return text


def index() -> list[dict[str, Any]]:
    entries: list[dict[str, Any]] = json.loads((FIXTURES_DIR / "INDEX.json").read_text())
    return entries


def index_entry(name: str) -> dict[str, Any]:
    return next(entry for entry in index() if entry["file"] == name)


def fixture_names() -> list[str]:
    return sorted(path.name for path in FIXTURES_DIR.glob("*.json") if path.name != "INDEX.json")


def load(name: str, places: Places) -> dict[str, Any]:
    params: dict[str, Any] = json.loads(places.substitute((FIXTURES_DIR / name).read_text()))
    return params


def agent_name(name: str) -> str:
    return AGENT_NAME_OF_PACKAGE[index_entry(name)["adapter"]]


def permission_step(name: str, outside: Path, home: Path, **extra: Any) -> dict[str, Any]:
    """A scripted agent's `permission` step sending fixture `name` as it was captured.

    {CWD} and {WORKROOT} stay for the agent to fill in with its session's cwd.
    """
    text = (FIXTURES_DIR / name).read_text()
    for key, value in (
        ("{OUTSIDE}", str(outside)),
        ("{HOME}", str(home)),
        ("{PORT}", "8123"),
        ("{GEMINI_TMP}", "/tmp"),
    ):
        text = text.replace(key, value)
    params = json.loads(text)
    options = [[o["optionId"], o["name"], o["kind"]] for o in params["options"]]
    return {"op": "permission", "tool_call": params["toolCall"], "options": options, **extra}
