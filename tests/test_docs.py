"""The operator's documentation names every setting the server reads."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import a2a_acp_bridge

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ("config.py", "cli.py")
# Names that are values, not variables.
NOT_VARIABLES = {"DEBUG", "INFO", "WARNING", "ERROR"}


def variables_read() -> set[str]:
    package = Path(a2a_acp_bridge.__file__).parent
    found: set[str] = set()
    for name in SOURCES:
        text = (package / name).read_text()
        found.update(
            re.findall(r'"((?:A2A|ACP|LOG)_[A-Z0-9_]+|HOST|PORT|PUBLIC_URL|AGENT_NAME)"', text)
        )
    return found - NOT_VARIABLES


def table_rows(path: Path) -> str:
    return "\n".join(line for line in path.read_text().splitlines() if line.startswith("| `"))


@pytest.mark.parametrize("document", ["docs/operations.md", "README.md"])
def test_every_variable_the_server_reads_has_a_row_in_the_configuration_tables(
    document: str,
) -> None:
    rows = table_rows(ROOT / document)
    variables = variables_read()
    assert {"A2A_TOKEN", "ACP_MAX_SESSIONS", "HOST", "ACP_STATE_DIR", "A2A_PUSH_KEY"} <= variables
    missing = sorted(v for v in variables if f"| `{v}`" not in rows)
    assert missing == []
