"""Per-conversation adapter state: each conversation's own HOME under ACP_STATE_DIR.

Every adapter keeps state under HOME (and codex under CODEX_HOME): sessions, histories,
plans, memories (gemini's `~/.gemini/GEMINI.md`), the "always allow" rules of its CLI.
Shared, one conversation's state would reach every later one; so each conversation gets
its own directory, `<state>/homes/<name>/`, as HOME, with CODEX_HOME, TMPDIR and the XDG
base directories inside it:

- for an owned sandbox, `<name>` is the sandbox's own directory name, so the home lives
  and persists with the sandbox: an adapter restarted after an idle stop finds its
  session there for `session/load`;
- under ACP_CWD (one directory for every conversation), each conversation gets a home of
  its own, `cwd-<random>`, kept for the conversation's life in the bridge.

Credentials are handed in explicitly: the seed list (ACP_HOME_SEED, else the preset's
`DEFAULT_SEEDS`) names files or directories under the operator's HOME, copied into each
conversation's HOME when missing or older than the operator's. The operator's files are
only ever read. The copies are written without following any link the agent may have
planted in its home (an agent could otherwise point a seed's name at a file of the
bridge's and have the bridge overwrite it).
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import secrets
import stat
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

from a2a_acp_bridge.boundary import Boundary
from a2a_acp_bridge.errors import AdapterStartError

logger = logging.getLogger(__name__)

HOMES_DIR = "homes"
# The operator's files each preset needs to log in, relative to HOME.
DEFAULT_SEEDS: Mapping[str, tuple[str, ...]] = {
    "claude": (".claude/.credentials.json", ".claude.json"),
    "codex": (".codex/auth.json", ".codex/config.toml"),
    "gemini": (
        ".gemini/settings.json",
        ".gemini/oauth_creds.json",
        ".gemini/google_accounts.json",
    ),
}
# Subdirectories of a home, and the variables that point at them.
LAYOUT = {
    "TMPDIR": "tmp",
    "XDG_CONFIG_HOME": ".config",
    "XDG_CACHE_HOME": ".cache",
    "XDG_DATA_HOME": ".local/share",
    "XDG_STATE_HOME": ".local/state",
    "CODEX_HOME": ".codex",
}
# Variables of the operator's that would point an adapter back at the operator's own
# state (the runtime directory, the adapters' configuration homes): never handed on.
DROPPED = ("XDG_RUNTIME_DIR", "CLAUDE_CONFIG_DIR", "GEMINI_CLI_HOME")
# Seeds taken from CODEX_HOME rather than HOME/.codex when the operator sets it.
CODEX_PREFIX = ".codex"


class AdapterHomes:
    """Makes, seeds and names each conversation's adapter HOME."""

    def __init__(
        self,
        state_dir: Path,
        *,
        seeds: tuple[str, ...],
        environ: Mapping[str, str],
    ) -> None:
        self.parent = state_dir / HOMES_DIR
        self.seeds = seeds
        home = environ.get("HOME")
        self._source = Path(home) if home else None
        codex = environ.get("CODEX_HOME")
        self._codex_source = Path(codex) if codex else None

    def attach(self, boundary: Boundary) -> Boundary:
        """The boundary with its conversation's home: the sandbox's namesake, or (for
        ACP_CWD) a new one. Only named here; `prepare` makes it when an adapter starts."""
        name = boundary.root.name if boundary.owned else f"cwd-{secrets.token_hex(6)}"
        return replace(boundary, home=self.parent / name)

    def prepare(self, boundary: Boundary) -> dict[str, str]:
        """Make the home (and its layout), bring the seeds up to date, and return the
        variables that point the adapter at it."""
        home = boundary.home
        if home is None:
            raise AdapterStartError("the conversation has no adapter home")
        try:
            self.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            _make_real_directory(home)
            for subdir in LAYOUT.values():
                os.close(_descend(home, Path(subdir).parts))
        except OSError as exc:
            raise AdapterStartError(
                f"cannot create the adapter home {home}: {exc.strerror}"
            ) from None
        for seed in self.seeds:
            self._seed(home, seed)
        return {"HOME": str(home), **{name: str(home / sub) for name, sub in LAYOUT.items()}}

    def _seed(self, home: Path, seed: str) -> None:
        source = self._source_of(seed)
        if source is None:
            return
        try:
            info = source.stat()
        except OSError:
            return  # nothing to hand over: the adapter logs in some other way
        if stat.S_ISDIR(info.st_mode):
            for directory, _dirs, files in os.walk(source):
                for name in files:
                    path = Path(directory) / name
                    relative = Path(seed) / path.relative_to(source)
                    _copy_into(home, relative, path)
        else:
            _copy_into(home, Path(seed), source)

    def _source_of(self, seed: str) -> Path | None:
        parts = Path(seed).parts
        if parts and parts[0] == CODEX_PREFIX and self._codex_source is not None:
            return self._codex_source.joinpath(*parts[1:])
        return self._source / seed if self._source is not None else None


def home_environment(base: Mapping[str, str], home_env: Mapping[str, str]) -> dict[str, str]:
    """The adapter's environment pointed at its conversation's home."""
    env = {name: value for name, value in base.items() if name not in DROPPED}
    env.update(home_env)
    return env


def seeds_for(preset: str | None, configured: tuple[str, ...] | None) -> tuple[str, ...]:
    """ACP_HOME_SEED when set (even empty), else the preset's defaults."""
    if configured is not None:
        return configured
    return DEFAULT_SEEDS.get(preset or "", ())


def _make_real_directory(path: Path) -> None:
    """Create `path` (mode 700), or accept it only as a real directory, never a link."""
    try:
        path.mkdir(mode=0o700)
    except FileExistsError:
        info = os.lstat(path)
        if not stat.S_ISDIR(info.st_mode):
            raise OSError(errno.ENOTDIR, "not a directory") from None


def _descend(home: Path, parts: tuple[str, ...]) -> int:
    """A descriptor of home/parts..., each directory made (mode 700) when missing and
    opened without following links: a link the agent planted fails (ELOOP, ENOTDIR)."""
    directory = os.open(home, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        for part in parts:
            with contextlib.suppress(FileExistsError):
                os.mkdir(part, 0o700, dir_fd=directory)
            inner = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=directory)
            os.close(directory)
            directory = inner
    except BaseException:
        os.close(directory)
        raise
    return directory


def _copy_into(home: Path, relative: Path, source: Path) -> None:
    """Copy `source` to home/relative unless the copy there is as new; every directory on
    the way is opened without following links, and the file is replaced by a rename, so a
    link planted by the agent is replaced rather than written through."""
    try:
        data_stat = source.stat()
    except OSError:
        return
    try:
        directory = _descend(home, relative.parts[:-1])
    except OSError as exc:
        logger.warning(
            "adapter home: a seed file could not be copied",
            extra={"seed": str(relative), "error": exc.strerror},
        )
        return
    try:
        name = relative.parts[-1]
        with contextlib.suppress(OSError):
            existing = os.stat(name, dir_fd=directory, follow_symlinks=False)
            if stat.S_ISREG(existing.st_mode) and existing.st_mtime >= data_stat.st_mtime:
                return
        temporary = f".{name}.seed-{secrets.token_hex(4)}"
        fd = os.open(
            temporary,
            os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW,
            0o600,
            dir_fd=directory,
        )
        try:
            with open(source, "rb") as reader, os.fdopen(fd, "wb", closefd=False) as writer:
                while chunk := reader.read(1 << 16):
                    writer.write(chunk)
            os.utime(fd, ns=(data_stat.st_atime_ns, data_stat.st_mtime_ns))
        finally:
            os.close(fd)
        os.rename(temporary, name, src_dir_fd=directory, dst_dir_fd=directory)
    except OSError as exc:
        logger.warning(
            "adapter home: a seed file could not be copied",
            extra={"seed": str(relative), "error": exc.strerror},
        )
    finally:
        os.close(directory)
