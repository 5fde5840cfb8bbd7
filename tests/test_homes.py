"""Each conversation's own adapter HOME: made, seeded, persistent, and never a way out."""

from __future__ import annotations

import os
from pathlib import Path

import httpx
import pytest

from a2a_acp_bridge.boundary import Boundary
from a2a_acp_bridge.errors import AdapterStartError
from a2a_acp_bridge.homes import DEFAULT_SEEDS, AdapterHomes, home_environment, seeds_for
from tests.support.server import make_settings, serve_bridge
from tests.support.wire import answer_text, send

pytestmark = pytest.mark.anyio


def operator_home(tmp_path: Path) -> Path:
    home = tmp_path / "operator"
    if home.exists():
        return home
    (home / ".codex").mkdir(parents=True)
    (home / ".codex" / "auth.json").write_text('{"key": "operator"}')
    (home / ".claude.json").write_text("{}")
    (home / ".ssh").mkdir()
    (home / ".ssh" / "id_ed25519").write_text("PRIVATE")
    return home


def homes(tmp_path: Path, *seeds: str, **environ: str) -> AdapterHomes:
    source = {"HOME": str(operator_home(tmp_path)), **environ}
    return AdapterHomes(tmp_path / "state", seeds=seeds, environ=source)


def boundary(tmp_path: Path, name: str = "ctx-abc") -> Boundary:
    root = tmp_path / "sandboxes" / name
    root.mkdir(parents=True, exist_ok=True)
    return Boundary(root=root, owned=True)


def test_an_owned_sandboxs_home_is_its_namesake_under_the_state_directory(tmp_path: Path) -> None:
    attached = homes(tmp_path).attach(boundary(tmp_path))
    assert attached.home == tmp_path / "state" / "homes" / "ctx-abc"
    handed = Boundary(root=tmp_path, owned=False)
    first, second = homes(tmp_path).attach(handed), homes(tmp_path).attach(handed)
    assert first.home != second.home  # one per conversation under ACP_CWD


def test_prepare_makes_the_layout_and_points_every_variable_into_it(tmp_path: Path) -> None:
    made = homes(tmp_path)
    attached = made.attach(boundary(tmp_path))
    env = made.prepare(attached)
    home = attached.home
    assert home is not None
    assert env["HOME"] == str(home)
    assert env["TMPDIR"] == str(home / "tmp")
    assert env["CODEX_HOME"] == str(home / ".codex")
    assert env["XDG_CONFIG_HOME"] == str(home / ".config")
    for name in ("TMPDIR", "CODEX_HOME", "XDG_CACHE_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME"):
        assert Path(env[name]).is_dir()
    assert os.stat(home).st_mode & 0o777 == 0o700
    combined = home_environment(
        {"HOME": "/root", "XDG_RUNTIME_DIR": "/run/user/0", "CLAUDE_CONFIG_DIR": "/x"}, env
    )
    assert combined["HOME"] == str(home)
    assert "XDG_RUNTIME_DIR" not in combined
    assert "CLAUDE_CONFIG_DIR" not in combined


def test_only_the_seed_files_are_copied_and_a_newer_login_replaces_the_copy(
    tmp_path: Path,
) -> None:
    made = homes(tmp_path, ".codex/auth.json", ".claude.json", ".missing")
    attached = made.attach(boundary(tmp_path))
    made.prepare(attached)
    home = attached.home
    assert home is not None
    assert (home / ".codex" / "auth.json").read_text() == '{"key": "operator"}'
    assert os.stat(home / ".codex" / "auth.json").st_mode & 0o777 == 0o600
    assert (home / ".claude.json").exists()
    assert not (home / ".ssh").exists()
    assert not (home / ".missing").exists()
    # The conversation's own change is kept while the operator's file is older...
    (home / ".claude.json").write_text('{"conversation": true}')
    made.prepare(attached)
    assert (home / ".claude.json").read_text() == '{"conversation": true}'
    # ...and a newer login of the operator's reaches it.
    source = tmp_path / "operator" / ".codex" / "auth.json"
    source.write_text('{"key": "rotated"}')
    later = os.stat(home / ".codex" / "auth.json").st_mtime + 10
    os.utime(source, (later, later))
    made.prepare(attached)
    assert (home / ".codex" / "auth.json").read_text() == '{"key": "rotated"}'


def test_codex_seeds_come_from_the_operators_codex_home_when_set(tmp_path: Path) -> None:
    codex_home = tmp_path / "elsewhere"
    codex_home.mkdir()
    (codex_home / "auth.json").write_text("from CODEX_HOME")
    made = homes(tmp_path, ".codex/auth.json", CODEX_HOME=str(codex_home))
    attached = made.attach(boundary(tmp_path))
    made.prepare(attached)
    assert attached.home is not None
    assert (attached.home / ".codex" / "auth.json").read_text() == "from CODEX_HOME"


def test_a_link_the_agent_planted_at_a_seeds_name_is_replaced_not_written_through(
    tmp_path: Path,
) -> None:
    made = homes(tmp_path, ".claude.json")
    attached = made.attach(boundary(tmp_path))
    made.prepare(attached)
    home = attached.home
    assert home is not None
    victim = tmp_path / "bridge.env"
    victim.write_text("A2A_TOKEN=keep-me")
    (home / ".claude.json").unlink()
    (home / ".claude.json").symlink_to(victim)
    made.prepare(attached)
    assert victim.read_text() == "A2A_TOKEN=keep-me"
    assert not (home / ".claude.json").is_symlink()
    assert (home / ".claude.json").read_text() == "{}"


def test_a_link_the_agent_planted_for_a_directory_fails_the_start_instead_of_following_it(
    tmp_path: Path,
) -> None:
    made = homes(tmp_path, ".codex/auth.json")
    attached = made.attach(boundary(tmp_path))
    made.prepare(attached)
    home = attached.home
    assert home is not None
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    for entry in (home / ".codex").iterdir():
        entry.unlink()
    (home / ".codex").rmdir()
    (home / ".codex").symlink_to(elsewhere)
    with pytest.raises(AdapterStartError, match="cannot create the adapter home"):
        made.prepare(attached)
    assert list(elsewhere.iterdir()) == []


def test_each_preset_has_its_login_files_as_default_seeds() -> None:
    assert seeds_for("claude", None) == (".claude/.credentials.json", ".claude.json")
    assert seeds_for("codex", None) == (".codex/auth.json", ".codex/config.toml")
    assert ".gemini/oauth_creds.json" in seeds_for("gemini", None)
    assert seeds_for("demo", None) == ()
    assert seeds_for("codex", ()) == ()  # ACP_HOME_SEED set empty: nothing handed over
    assert set(DEFAULT_SEEDS) == {"claude", "codex", "gemini"}


async def test_each_conversation_sees_its_own_home_and_a_restarted_adapter_finds_it_again(
    tmp_path: Path,
) -> None:
    settings = make_settings(tmp_path, {"ACP_IDLE_TIMEOUT_MS": "1"})
    async with serve_bridge(settings) as bridge, httpx.AsyncClient(timeout=30) as client:
        first = await send(client, bridge.rpc_url, 'run echo one > "$HOME/note" && echo $HOME')
        other = await send(client, bridge.rpc_url, 'run cat "$HOME/note"; echo $HOME')
        # The idle limit (1 ms) stops the adapter between messages; its HOME stays.
        again = await send(
            client, bridge.rpc_url, 'run cat "$HOME/note"', context_id=first["contextId"]
        )
    first_home = answer_text(first).strip().splitlines()[-1]
    assert first_home.startswith(str(settings.state_dir / "homes"))
    assert first_home not in answer_text(other)
    assert "No such file" in answer_text(other)
    assert "one" in answer_text(again).splitlines()[-1]
