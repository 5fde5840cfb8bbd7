"""The adapters' versions are pinned once (config.ADAPTER_PACKAGES) and adapters/ agrees."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from a2a_acp_bridge import config
from a2a_acp_bridge.config import ADAPTER_PACKAGES, adapters_dir, agent_spec


def _json(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((adapters_dir() / name).read_text())
    return data


def test_package_json_pins_exactly_the_versions_the_presets_name() -> None:
    wanted = {package: version for package, version, _ in ADAPTER_PACKAGES.values()}
    assert _json("package.json")["dependencies"] == wanted


def test_the_lockfile_resolves_each_adapter_to_its_pinned_version_and_executable() -> None:
    packages = _json("package-lock.json")["packages"]
    wanted = {package: version for package, version, _ in ADAPTER_PACKAGES.values()}
    assert packages[""]["dependencies"] == wanted
    for package, version, executable in ADAPTER_PACKAGES.values():
        entry = packages[f"node_modules/{package}"]
        assert entry["version"] == version, package
        assert executable in entry["bin"], package
        assert entry["integrity"].startswith("sha512-"), package


def test_the_lockfile_names_no_registry_host() -> None:
    # `resolved` URLs would carry the registry's host; npm ci works from integrity alone.
    packages = _json("package-lock.json")["packages"]
    assert [name for name, entry in packages.items() if "resolved" in entry] == []
    assert "omit-lockfile-registry-resolved=true" in (adapters_dir() / ".npmrc").read_text()


@pytest.mark.parametrize("preset", sorted(ADAPTER_PACKAGES))
def test_a_preset_runs_the_copy_installed_under_adapters(
    preset: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    executable = ADAPTER_PACKAGES[preset][2]
    installed = tmp_path / "node_modules" / ".bin" / executable
    installed.parent.mkdir(parents=True)
    installed.write_text("#!/bin/sh\n")
    monkeypatch.setattr(config, "adapters_dir", lambda: tmp_path)
    spec = agent_spec(preset)
    assert spec.command[0] == str(installed)
    assert spec.command[1:] == config.PRESET_ARGS.get(preset, ())


@pytest.mark.parametrize("preset", sorted(ADAPTER_PACKAGES))
def test_without_an_installed_copy_a_preset_runs_the_same_version_through_npx(
    preset: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    package, version, _ = ADAPTER_PACKAGES[preset]
    monkeypatch.setattr(config, "adapters_dir", lambda: tmp_path)
    spec = agent_spec(preset)
    assert spec.command[1:3] == ("--yes", f"{package}@{version}")
    assert Path(spec.command[0]).name == "npx"
