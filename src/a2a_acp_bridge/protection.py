"""Protected paths: what no agent may change inside a root, and what it may never read.

Kept as data, so docs/permissions.md can print it and the operator can open an entry:

- `PROTECTED_NAMES`: names that, at any depth inside a root, hold configuration that makes
  tools run or switches supervision off. An edit there is a command in disguise: the next
  `git status`, the adapter's next start or the next `cd` runs what the agent wrote. Some
  are protected in every root; the VCS internals only in a root handed to the bridge (in
  an owned sandbox commands run anyway, so they grant nothing new there).
- `Protection.bridge_files`: the bridge's own files (its working directory's `.env`, its
  state directory, the token file, the sandboxes parent). Neither written nor read by
  any agent, wherever they lie; a conversation's own sandbox inside the sandboxes parent
  is the one exception.
- `SPECIAL_TREES`: paths that do not name a file but a process (the bridge's own, when the
  bridge resolves them): `/proc/self/cwd` is the bridge's working directory, not the
  adapter's.

`ACP_WRITABLE_PROTECTED` opens names of `PROTECTED_NAMES` for writing; the bridge's own
files cannot be opened.
"""

from __future__ import annotations

import enum
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path


class Scope(enum.Enum):
    """Where a protected name applies."""

    EVERY_ROOT = "every root"
    HANDED_ROOT = "a handed root"


@dataclass(frozen=True)
class ProtectedName:
    """A file or directory name protected (with everything below it) at any depth."""

    name: str
    scope: Scope
    why: str


PROTECTED_NAMES: tuple[ProtectedName, ...] = (
    ProtectedName(
        ".claude",
        Scope.EVERY_ROOT,
        "Claude Code's project settings: hooks run commands, allow rules skip asking, "
        "a default mode can switch supervision off",
    ),
    ProtectedName(
        ".gemini",
        Scope.EVERY_ROOT,
        "gemini-cli's project settings: MCP servers it starts, tools it allows unasked",
    ),
    ProtectedName(
        ".codex",
        Scope.EVERY_ROOT,
        "codex's project configuration: approval policy, sandbox mode, MCP servers",
    ),
    ProtectedName(
        ".agents",
        Scope.EVERY_ROOT,
        "agent configuration and skills that several adapters load and run",
    ),
    ProtectedName(".mcp.json", Scope.EVERY_ROOT, "project MCP servers: commands an adapter starts"),
    ProtectedName(
        ".vscode",
        Scope.EVERY_ROOT,
        "editor settings and tasks that run commands when the folder is opened",
    ),
    ProtectedName(".idea", Scope.EVERY_ROOT, "JetBrains run configurations and startup tasks"),
    ProtectedName(".envrc", Scope.EVERY_ROOT, "direnv runs it on entering the directory"),
    ProtectedName(
        ".git",
        Scope.HANDED_ROOT,
        "git's internals: hooks, core.fsmonitor, core.hooksPath, core.sshCommand, filter "
        "and diff drivers run on the next git command; a `.git` file can point elsewhere",
    ),
    ProtectedName(
        ".gitmodules",
        Scope.HANDED_ROOT,
        "submodule URLs and update commands that git runs on clone and update",
    ),
    ProtectedName(".hg", Scope.HANDED_ROOT, "Mercurial's internals: hgrc hooks run commands"),
)
NAMES_BY_KEY = {entry.name.casefold(): entry for entry in PROTECTED_NAMES}

# Trees that name processes and their descriptors, not files. Resolved in the bridge's
# process they mean the bridge's own: refused for changes and for reads.
SPECIAL_TREES: tuple[str, ...] = (
    "/proc",
    "/sys",
    "/dev/fd",
    "/dev/stdin",
    "/dev/stdout",
    "/dev/stderr",
)
# Under /proc, the files that hold a process's secrets: its environment and its memory.
PROC_SECRETS = frozenset({"environ", "mem"})

# The bridge's own files, relative to its working directory. The state directory is not
# a setting yet (ACP_STATE_DIR will be): its default place is protected already.
DOTENV_NAME = ".env"
STATE_DIR_NAME = ".a2a-acp-bridge"


@dataclass(frozen=True)
class Protection:
    """What a boundary protects beyond the names above: the bridge's own files (absolute,
    resolved), and the names the operator opened (ACP_WRITABLE_PROTECTED, case-folded)."""

    bridge_files: tuple[Path, ...] = ()
    writable: frozenset[str] = frozenset()

    def with_bridge_file(self, path: Path) -> Protection:
        resolved = resolved_path(path)
        if resolved in self.bridge_files:
            return self
        return Protection((*self.bridge_files, resolved), self.writable)


# Only the protected names, as for a boundary made without the bridge's settings (tests).
NO_PROTECTION = Protection()


def resolved_path(path: Path) -> Path:
    """`path` absolute with symlinks resolved as far as it exists (it may not yet)."""
    return Path(os.path.realpath(path))


def bridge_protection(
    workdir: Path,
    *,
    sandbox_parent: Path | None = None,
    token_file: Path | None = None,
    writable: Iterable[str] = (),
) -> Protection:
    """The protection of every root of a bridge started in `workdir`."""
    files = [workdir / DOTENV_NAME, workdir / STATE_DIR_NAME]
    if token_file is not None:
        files.append(token_file)
    if sandbox_parent is not None:
        files.append(sandbox_parent)
    resolved = tuple(dict.fromkeys(resolved_path(path) for path in files))
    return Protection(resolved, frozenset(name.casefold() for name in writable))


def protected_name(name: str) -> ProtectedName | None:
    """The entry a path component falls under, compared without case (a case-insensitive
    filesystem makes `.GIT` the same directory as `.git`)."""
    return NAMES_BY_KEY.get(name.casefold())


def parse_writable(value: str) -> tuple[str, ...]:
    """ACP_WRITABLE_PROTECTED: comma-separated names of PROTECTED_NAMES (`.git`, `.git/`,
    `./.vscode` all name an entry). Raises ValueError naming an unknown one."""
    names: list[str] = []
    for item in value.split(","):
        text = item.strip()
        if text.startswith("./"):
            text = text[2:]
        text = text.rstrip("/")
        if not text:
            continue
        entry = protected_name(text)
        if entry is None:
            known = ", ".join(e.name for e in PROTECTED_NAMES)
            raise ValueError(f"{item.strip()!r} is not a protected name (one of: {known})")
        if entry.name not in names:
            names.append(entry.name)
    return tuple(names)
