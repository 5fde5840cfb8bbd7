"""The real adapters (installed under adapters/ by scripts/test) pointed at fake model servers.

`Rig` is one adapter for one test: its fake model server (shared by the test module), a
throwaway HOME (and CODEX_HOME) under the test's tmp_path, and the environment the bridge
hands on to the adapter through its allowlist (ACP_AGENT_ENV names the few variables
outside it). Nothing here touches the operator's own settings: Claude Code, codex and
gemini-cli all write state (plans, "always allow" rules, histories) under HOME.

What each adapter needs (../../docs/adapter-tests.md has the why of each line):

- claude: ANTHROPIC_BASE_URL and ANTHROPIC_API_KEY; the DISABLE_* switches.
- codex: CODEX_HOME with a config.toml naming a model provider at the fake server, whose
  key comes from CODEX_FAKE_API_KEY; plugins, apps and the update check off. Or
  (`codex_key_rig`) the built-in OpenAI provider at the fake and only the keys a test
  gives, so codex must be logged in (by the bridge's `authenticate`).
- gemini: GOOGLE_GEMINI_BASE_URL and GEMINI_API_KEY; usage statistics and telemetry off.
- all: HTTP(S)_PROXY at the fake server, which refuses and counts every CONNECT.
"""

from __future__ import annotations

import json
import logging
import os
import textwrap
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import anyio
import anyio.to_thread
import pytest

from a2a_acp_bridge.config import ADAPTER_PACKAGES, Settings, adapters_dir
from tests.fakes.anthropic import FakeAnthropic
from tests.fakes.gemini import FakeGemini
from tests.fakes.openai import MODEL as CODEX_MODEL
from tests.fakes.openai import FakeOpenAI
from tests.fakes.server import FakeModelServer
from tests.support.server import make_settings

# Variables outside the bridge's allowlist that Claude Code reads.
CLAUDE_EXTRA_ENV = ("DISABLE_TELEMETRY", "DISABLE_AUTOUPDATER", "DISABLE_ERROR_REPORTING")
FAKE_KEY = "sk-fake-offline-key"
# How long the test's HTTP client waits for one blocking call (a whole turn, adapter start
# included: claude and gemini take a few seconds on a cold machine).
HTTP_TIMEOUT_S = 120.0
# Bound on waiting for an adapter to send the request a script stalls (start included).
STALL_WAIT_S = 60.0


def require_installed(preset: str) -> Path:
    """The adapter's executable under adapters/; a clear failure (never a skip) without it."""
    executable = ADAPTER_PACKAGES[preset][2]
    path = adapters_dir() / "node_modules" / ".bin" / executable
    if not path.exists():
        pytest.fail(
            f"{ADAPTER_PACKAGES[preset][0]} is not installed under adapters/: run ./scripts/test "
            "(it runs `npm ci` in adapters/; Node.js 20+ and npm are needed)",
            pytrace=False,
        )
    return path


@dataclass
class Rig:
    """One real adapter for one test: its fake model, its own HOME and its environment."""

    preset: str
    fake: FakeModelServer
    home: Path
    environ: dict[str, str]
    agent_env: tuple[str, ...] = ()
    outside_before: int = field(init=False)
    stalled_before: int = field(init=False)

    def __post_init__(self) -> None:
        self.outside_before = len(self.fake.outside_attempts())
        self.stalled_before = self.fake.stalled()

    async def wait_stalled(self, count: int = 1) -> None:
        """Wait until the model has stalled `count` requests of this test (fails after a bound)."""
        target = self.stalled_before + count
        reached = await anyio.to_thread.run_sync(self.fake.wait_stalled, target, STALL_WAIT_S)
        assert reached, f"the adapter never reached the stalled model request #{count}"

    def outside(self) -> list[str]:
        """Outside connections the adapter attempted since this rig was made (all refused)."""
        return self.fake.outside_attempts()[self.outside_before :]

    def settings(self, tmp_path: Path, **env: str) -> Settings:
        """The bridge's settings for this adapter; `env` adds ACP_* variables."""
        values = {"ACP_AGENT": self.preset, "ACP_AGENT_ENV": ",".join(self.agent_env), **env}
        return make_settings(tmp_path, values)


def base_environ(home: Path, fake: FakeModelServer) -> dict[str, str]:
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "LANG": "C.UTF-8",
        "TMPDIR": os.environ.get("TMPDIR", "/tmp"),
        **fake.proxy_env(),
    }


def claude_rig(fake: FakeAnthropic, tmp_path: Path) -> Rig:
    require_installed("claude")
    home = _home(tmp_path)
    environ = {
        **base_environ(home, fake),
        "ANTHROPIC_BASE_URL": fake.url,
        "ANTHROPIC_API_KEY": FAKE_KEY,
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        **dict.fromkeys(CLAUDE_EXTRA_ENV, "1"),
    }
    return Rig("claude", fake, home, environ, CLAUDE_EXTRA_ENV)


CODEX_QUIET = """\
check_for_update_on_startup = false

[features]
plugins = false
apps = false
"""


def codex_key_rig(fake: FakeOpenAI, tmp_path: Path, **keys: str) -> Rig:
    """codex with its built-in OpenAI provider at the fake server and no stored login: the
    credentials are only `keys` (OPENAI_API_KEY=..., or none at all)."""
    require_installed("codex")
    home = _home(tmp_path)
    codex_home = home / ".codex"
    codex_home.mkdir()
    (codex_home / "config.toml").write_text(
        f'model = "{CODEX_MODEL}"\nopenai_base_url = "{fake.url}/v1"\n' + CODEX_QUIET
    )
    environ = {**base_environ(home, fake), "CODEX_HOME": str(codex_home), **keys}
    return Rig("codex", fake, home, environ)


def codex_rig(fake: FakeOpenAI, tmp_path: Path) -> Rig:
    require_installed("codex")
    home = _home(tmp_path)
    codex_home = home / ".codex"
    codex_home.mkdir()
    (codex_home / "config.toml").write_text(
        textwrap.dedent(
            f"""\
            model = "{CODEX_MODEL}"
            model_provider = "fake"
            check_for_update_on_startup = false

            [features]
            plugins = false
            apps = false

            [model_providers.fake]
            name = "Fake OpenAI (loopback)"
            base_url = "{fake.url}/v1"
            wire_api = "responses"
            env_key = "CODEX_FAKE_API_KEY"
            request_max_retries = 0
            stream_max_retries = 0
            """
        )
    )
    environ = {
        **base_environ(home, fake),
        "CODEX_HOME": str(codex_home),
        "CODEX_FAKE_API_KEY": FAKE_KEY,
    }
    return Rig("codex", fake, home, environ)


def gemini_rig(fake: FakeGemini, tmp_path: Path) -> Rig:
    require_installed("gemini")
    home = _home(tmp_path)
    settings_dir = home / ".gemini"
    settings_dir.mkdir()
    (settings_dir / "settings.json").write_text(
        json.dumps({"privacy": {"usageStatisticsEnabled": False}, "telemetry": {"enabled": False}})
    )
    environ = {
        **base_environ(home, fake),
        "GOOGLE_GEMINI_BASE_URL": fake.url,
        "GEMINI_API_KEY": FAKE_KEY,
    }
    return Rig("gemini", fake, home, environ)


def _home(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    home.mkdir()
    return home


FakeT = TypeVar("FakeT", bound=FakeModelServer)


def running_fake(fake: FakeT) -> Iterator[FakeT]:
    """Start a fake model server for a fixture and stop it afterwards."""
    fake.start()
    try:
        yield fake
    finally:
        fake.stop()


# --- what the bridge logged ---------------------------------------------------------------


def log_events(caplog: pytest.LogCaptureFixture, event: str) -> list[Mapping[str, Any]]:
    """The fields of every bridge log record with this message (e.g. "permission decided")."""
    from a2a_acp_bridge.logs import record_fields

    return [record_fields(r) for r in caplog.records if r.getMessage() == event]


def decisions(caplog: pytest.LogCaptureFixture) -> list[tuple[str, str, str, str | None]]:
    """Every permission the bridge decided: (kind, verdict, rule, option chosen)."""
    return [
        (d["kind"], d["verdict"], d["rule"], d["chosen"])
        for d in log_events(caplog, "permission decided")
    ]


def watch_logs(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="a2a_acp_bridge")


# --- processes ----------------------------------------------------------------------------


def process_tree(pid: int) -> set[int]:
    """`pid` and every live descendant of it (Linux /proc)."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2 :].split()
        if fields[0] not in ("Z", "X"):
            parents[int(entry)] = int(fields[1])
    tree = {pid} if pid in parents else set()
    grew = True
    while grew:
        grew = False
        for child, parent in parents.items():
            if parent in tree and child not in tree:
                tree.add(child)
                grew = True
    return tree


async def wait_gone(pids: set[int], timeout_s: float) -> None:
    """Wait until none of `pids` runs any more (fails after `timeout_s`)."""
    with anyio.fail_after(timeout_s):
        while alive(pids):  # noqa: ASYNC110 - no event tells of another process's exit
            await anyio.sleep(0.05)


def alive(pids: set[int]) -> set[int]:
    """The pids of `pids` still running (zombies count as gone)."""
    found = set()
    for pid in pids:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        if stat[stat.rfind(")") + 2 :].split()[0] not in ("Z", "X"):
            found.add(pid)
    return found
