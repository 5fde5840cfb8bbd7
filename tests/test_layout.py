"""The house's layout holds: each SDK is imported in its own package only, and the A2A side
renders the card without loading the ACP SDK."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "src" / "a2a_acp_bridge"


def imported_roots(path: Path) -> set[str]:
    roots: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            roots.add(node.module.split(".")[0])
    return roots


@pytest.mark.parametrize(("sdk", "home"), [("acp", "acp"), ("a2a", "a2a")])
def test_each_sdk_is_imported_only_in_its_own_package(sdk: str, home: str) -> None:
    strays = [
        str(path.relative_to(PACKAGE))
        for path in PACKAGE.rglob("*.py")
        if path.parent.name != home and sdk in imported_roots(path)
    ]
    assert strays == []


def test_rendering_the_card_does_not_load_the_acp_sdk() -> None:
    probe = (
        "import sys; import a2a_acp_bridge.a2a.card; "
        "print(sorted(m for m in sys.modules if m == 'acp' or m.startswith('acp.')))"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    assert result.stdout.strip() == "[]"
