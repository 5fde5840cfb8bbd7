"""Every package the code imports is declared in pyproject.toml, not borrowed from a2a-sdk.

A package that only arrives as another's dependency can vanish in that package's next
release; declared, its range is ours to keep.
"""

from __future__ import annotations

import ast
import importlib.metadata
import importlib.util
import re
import sys
import tomllib
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def declared(*extras: str) -> set[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    requirements = list(project["dependencies"])
    for extra in extras:
        requirements += project["optional-dependencies"][extra]
    return {_normalized(re.split(r"[\[<>=!~;\s]", item, maxsplit=1)[0]) for item in requirements}


def _normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


# The interop clients run in environments of their own, pinned by their own lock files
# (scripts/_interop.sh): their imports are not the project's dependencies.
OWN_ENVIRONMENTS = ROOT / "tests" / "interop"


def imported_modules(folder: Path) -> set[str]:
    """Absolute imports in every .py file under `folder` (but the interop clients'), as
    dotted names."""
    found: set[str] = set()
    for path in folder.rglob("*.py"):
        if path.is_relative_to(OWN_ENVIRONMENTS):
            continue
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                found.add(node.module)
    return found


@cache
def _owners() -> dict[Path, str]:
    """Each installed file, mapped to the distribution that installed it."""
    owners: dict[Path, str] = {}
    for dist in importlib.metadata.distributions():
        for file in dist.files or ():
            owners[Path(str(dist.locate_file(file))).resolve()] = _normalized(dist.metadata["Name"])
    return owners


def distribution_of(module: str, folder: Path) -> str | None:
    """The distribution a module comes from; None for the standard library and our own
    (the bench's scripts import their neighbours by file name)."""
    top = module.split(".")[0]
    if top in sys.stdlib_module_names or top == "__future__":
        return None
    if (folder / f"{top}.py").is_file() or (folder / top).is_dir():
        return None
    spec = importlib.util.find_spec(module)
    assert spec is not None, f"{module} is not installed"
    assert spec.origin is not None, f"{module} has no file"
    origin = Path(spec.origin).resolve()
    if ROOT in origin.parents and ".venv" not in origin.parts:
        return None
    owner = _owners().get(origin)
    assert owner is not None, f"no installed distribution holds {origin}"
    return owner


def undeclared(folder: Path, allowed: set[str]) -> dict[str, str]:
    missing = {}
    for module in sorted(imported_modules(folder)):
        owner = distribution_of(module, folder)
        if owner is not None and owner not in allowed:
            missing[module] = owner
    return missing


def test_every_package_the_bridge_imports_is_a_declared_dependency() -> None:
    allowed = declared()
    assert {"httpx", "sse-starlette", "protobuf", "python-dotenv"} <= allowed
    assert undeclared(ROOT / "src", allowed) == {}


def test_every_package_the_tests_and_the_benchmark_import_is_declared() -> None:
    allowed = declared("dev")
    assert undeclared(ROOT / "tests", allowed) == {}
    assert undeclared(ROOT / "bench", allowed) == {}


def test_the_check_sees_a_package_that_is_imported_but_not_declared() -> None:
    # google.protobuf is imported by the bridge; without its declaration the check names it.
    missing = undeclared(ROOT / "src", declared() - {"protobuf"})
    assert missing.get("google.protobuf.json_format") == "protobuf"
    assert set(missing.values()) == {"protobuf"}
