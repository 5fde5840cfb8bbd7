"""The operator's documentation shows the settings table as config.py declares it."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import a2a_acp_bridge
from a2a_acp_bridge.config import SETTINGS
from a2a_acp_bridge.setting import TABLE_END, TABLE_START, markdown_table, with_table

ROOT = Path(__file__).resolve().parents[1]
# The modules that read settings: the CLI (the environment, .env, argv) and config.
READERS = ("config.py", "cli.py")
# What a settings variable looks like; a quoted name of that shape in a reader that is not
# a row of the table is a setting added outside the table.
VARIABLE = re.compile(r"(A2A|ACP|LOG|OTEL)_[A-Z0-9_]+|HOST|PORT|PUBLIC_URL|AGENT_NAME")


@pytest.mark.parametrize("document", ["README.md", "docs/operations.md"])
def test_the_documents_configuration_table_is_the_settings_table(document: str) -> None:
    text = (ROOT / document).read_text(encoding="utf-8")
    assert text.count(TABLE_START) == 1
    assert text.count(TABLE_END) == 1
    assert with_table(text, markdown_table(SETTINGS)) == text, (
        f"{document}'s configuration table differs from config.Settings: run scripts/settings_table"
    )


def quoted_variables(source: str) -> set[str]:
    """String constants in Python source that look like a settings variable."""
    return {
        node.value
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and VARIABLE.fullmatch(node.value)
    }


@pytest.mark.parametrize("module", READERS)
def test_every_variable_the_server_reads_is_a_row_of_the_table(module: str) -> None:
    source = (Path(a2a_acp_bridge.__file__).parent / module).read_text(encoding="utf-8")
    found = quoted_variables(source)
    assert found, "the scan finds nothing: the pattern no longer matches the code"
    assert sorted(found - {row.variable for row in SETTINGS}) == []


def test_the_scan_sees_a_setting_read_outside_the_table() -> None:
    # A setting added the old way must not slip past the check above.
    source = 'mode = env.get("ACP_SOMETHING_NEW", "auto")\nlevel = env.get("LOG_LEVEL")\n'
    assert quoted_variables(source) - {row.variable for row in SETTINGS} == {"ACP_SOMETHING_NEW"}
