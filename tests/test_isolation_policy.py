"""The isolation policy without an adapter: what is granted, what is refused at start."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from a2a_acp_bridge import landlock
from a2a_acp_bridge.boundary import Boundary
from a2a_acp_bridge.config import Settings
from a2a_acp_bridge.errors import ConfigError
from a2a_acp_bridge.isolation import REQUIRED_ABI, Isolation, is_within, unsafe_grants

P = Path


@pytest.mark.parametrize(
    ("grants", "protected", "unsafe"),
    [
        pytest.param(["/usr"], ["/srv/bridge"], [], id="unrelated"),
        pytest.param(["/srv"], ["/srv/bridge"], [("/srv", "/srv/bridge")], id="parent"),
        pytest.param(["/srv/bridge"], ["/srv/bridge"], [("/srv/bridge", "/srv/bridge")], id="same"),
        pytest.param(["/srv/bridge/.venv"], ["/srv/bridge"], [], id="inside-is-fine"),
        pytest.param(["/srv/bridge2"], ["/srv/bridge"], [], id="prefix-is-not-parent"),
        pytest.param(["/"], ["/home/op"], [("/", "/home/op")], id="root"),
    ],
)
def test_a_grant_is_unsafe_exactly_when_it_contains_a_protected_path(
    grants: list[str], protected: list[str], unsafe: list[tuple[str, str]]
) -> None:
    found = unsafe_grants(map(P, grants), map(P, protected))
    assert found == [(P(g), P(s)) for g, s in unsafe]


def test_is_within_compares_whole_components() -> None:
    assert is_within(P("/a/b/c"), P("/a/b"))
    assert is_within(P("/a/b"), P("/a/b"))
    assert not is_within(P("/a/bc"), P("/a/b"))


def settings(tmp_path: Path, **env: str) -> Settings:
    values = {"ACP_SANDBOX_DIR": str(tmp_path / "sandboxes"), **env}
    return Settings.from_env(values, cwd=tmp_path)


def environ(tmp_path: Path) -> dict[str, str]:
    home = tmp_path / "operator-home"
    (home / "bin").mkdir(parents=True, exist_ok=True)
    return {"HOME": str(home), "PATH": f"{home / 'bin'}:/usr/bin:/bin"}


def test_requested_isolation_without_landlock_refuses_to_start_naming_the_way_out(
    tmp_path: Path,
) -> None:
    def missing() -> int:
        raise landlock.LandlockError("the kernel offers no Landlock")

    with pytest.raises(ConfigError) as caught:
        Isolation(settings(tmp_path), environ(tmp_path), probe=missing)
    assert caught.value.variable == "ACP_ISOLATION"
    assert "the kernel offers no Landlock" in str(caught.value)
    assert "set ACP_ISOLATION=off" in str(caught.value)


def test_a_kernel_without_signal_scoping_is_not_enough(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        Isolation(settings(tmp_path), environ(tmp_path), probe=lambda: REQUIRED_ABI - 1)
    message = str(caught.value)
    assert f"ABI {REQUIRED_ABI - 1}" in message
    assert f"needs ABI {REQUIRED_ABI}" in message
    assert "signal scoping" in message


def test_isolation_off_never_probes_the_kernel(tmp_path: Path) -> None:
    def fail() -> int:
        raise AssertionError("probed")

    isolation = Isolation(settings(tmp_path, ACP_ISOLATION="off"), environ(tmp_path), probe=fail)
    assert isolation.status.label == "off"
    boundary = Boundary(root=tmp_path, owned=True)
    assert isolation.confinement(boundary) is None


@pytest.mark.parametrize("variable", ["ACP_ISOLATION_READ", "ACP_ISOLATION_WRITE"])
@pytest.mark.parametrize("target", ["workdir", "home", "parent"])
def test_an_operator_grant_that_would_expose_the_bridge_refuses_to_start(
    tmp_path: Path, variable: str, target: str
) -> None:
    env = environ(tmp_path)
    path = {"workdir": tmp_path, "home": Path(env["HOME"]), "parent": tmp_path.parent}[target]
    with pytest.raises(ConfigError) as caught:
        Isolation(settings(tmp_path, **{variable: str(path)}), env, probe=lambda: 7)
    assert caught.value.variable == variable
    assert "adapters must not reach" in str(caught.value)


def test_acp_cwd_holding_the_bridges_working_directory_refuses_to_start(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        Isolation(settings(tmp_path, ACP_CWD=str(tmp_path)), environ(tmp_path), probe=lambda: 7)
    assert caught.value.variable == "ACP_CWD"


def test_the_confinement_writes_root_and_home_and_reads_nothing_of_the_bridge(
    tmp_path: Path,
) -> None:
    env = environ(tmp_path)
    isolation = Isolation(settings(tmp_path), env, probe=lambda: 7)
    root = tmp_path / "sandboxes" / "ctx-1"
    home = tmp_path / ".a2a-acp-bridge" / "homes" / "ctx-1"
    spec = isolation.confinement(Boundary(root=root, owned=True, home=home))
    assert spec is not None
    assert spec.writable == (root, home)
    assert Path("/usr") in spec.readable
    for protected in (tmp_path, Path(env["HOME"]), tmp_path / "sandboxes"):
        assert not any(is_within(protected, grant) for grant in spec.readable), protected


def test_the_adapters_path_keeps_only_what_it_may_read(tmp_path: Path) -> None:
    env = environ(tmp_path)
    isolation = Isolation(settings(tmp_path), env, probe=lambda: 7)
    adapter_env = isolation.environment({"PATH": env["PATH"], "HOME": env["HOME"]})
    entries = adapter_env["PATH"].split(os.pathsep)
    assert str(Path(env["HOME"]) / "bin") not in entries
    assert "/usr/bin" in entries


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        pytest.param("/etc/passwd", "is not a path inside HOME", id="absolute"),
        pytest.param("../.ssh/id_rsa", "is not a path inside HOME", id="dotdot"),
        pytest.param("~/.codex/auth.json", "is not a path inside HOME", id="tilde"),
    ],
)
def test_a_seed_outside_home_is_refused(tmp_path: Path, value: str, problem: str) -> None:
    with pytest.raises(ConfigError) as caught:
        settings(tmp_path, ACP_HOME_SEED=value)
    assert caught.value.variable == "ACP_HOME_SEED"
    assert problem in str(caught.value)


def test_isolation_settings_parse_with_their_defaults(tmp_path: Path) -> None:
    default = settings(tmp_path)
    assert default.isolation is True
    assert default.state_dir == tmp_path / ".a2a-acp-bridge"
    assert default.home_seed is None
    custom = settings(
        tmp_path,
        ACP_ISOLATION="off",
        ACP_STATE_DIR="state",
        ACP_HOME_SEED=".codex/auth.json, .claude.json",
        ACP_ISOLATION_READ=f"{tmp_path}",
    )
    assert custom.isolation is False
    assert custom.state_dir == tmp_path / "state"
    assert custom.home_seed == (".codex/auth.json", ".claude.json")
    assert custom.isolation_read == (tmp_path.resolve(),)
    with pytest.raises(ConfigError, match="ACP_ISOLATION: 'maybe' is not a boolean"):
        settings(tmp_path, ACP_ISOLATION="maybe")
    with pytest.raises(ConfigError, match=r"ACP_ISOLATION_READ: .* does not exist"):
        settings(tmp_path, ACP_ISOLATION_READ=str(tmp_path / "missing"))
