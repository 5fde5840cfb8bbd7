"""The boundary: the one directory an agent may change, and who owns it.

A `Boundary` is the root the agent works in (absolute, symlinks resolved), whether the
bridge created that directory itself (`owned`, asserted only by the code that made it,
never inferred from a path), whether the operator lets unverifiable actions run in a
root the bridge did not create (`allow_execute`), what it protects beyond the
protected names of every root (`protection`: the bridge's own files, the names the
operator opened; protection.py), and the conversation's own adapter state directory
(`home`, set by `homes.AdapterHomes`: the adapter's HOME).

`Sandboxes` hands each conversation its own fresh directory under `.acp-sandboxes/`,
made with `mkdtemp`. The contextId is only a label on the name: it never chooses the
directory, so `..`, `/etc` or a planted directory cannot redirect a conversation. A
directory is reused only while it is the very directory `mkdtemp` made (same device and
inode, still a real directory strictly inside the parent); anything else wearing its name
is never trusted, and the conversation gets a new one. After a restart the map is
restored from the conversation book (conversations.py) with the identities recorded when the
directories were made, so the same check holds across restarts; `discard` removes a
conversation's directory only while it is still that very directory.
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import stat
import sys
import tempfile
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from a2a_acp_bridge.errors import SandboxError
from a2a_acp_bridge.protection import NO_PROTECTION, Protection

_LABEL_CHARS = re.compile(r"[^A-Za-z0-9]")
_LABEL_LENGTH = 8
_FALLBACK_LABEL = "ctx"

# (st_dev, st_ino, generation) of a directory: what tells the directory mkdtemp made from
# one planted later under the same name. A deleted directory's inode number is soon reused
# (seen in the restart tests), so the inode's generation, which the file system changes on
# every reuse (FS_IOC_GETVERSION: ext4, xfs, btrfs), is part of it; 0 where unsupported.
Identity = tuple[int, int, int]
_FS_IOC_GETVERSION = 0x80087601  # _IOR('v', 1, long)


@dataclass(frozen=True)
class Boundary:
    """Where the agent may act: `root` (absolute, resolved), `owned`, `allow_execute`, the
    `protection` of the bridge's own files, and `home`, the conversation's adapter state
    directory (None until one is attached)."""

    root: Path
    owned: bool
    allow_execute: bool = False
    protection: Protection = NO_PROTECTION
    home: Path | None = None

    def __post_init__(self) -> None:
        if not self.root.is_absolute() or os.path.normpath(self.root) != str(self.root):
            raise ValueError(f"a boundary root must be absolute and normalised, not {self.root}")


def sandbox_label(context_id: str) -> str:
    """The human label of a sandbox: the first 8 letters and digits of the contextId, or ctx."""
    label = _LABEL_CHARS.sub("", context_id)[:_LABEL_LENGTH]
    return label or _FALLBACK_LABEL


def directory_identity(path: Path) -> Identity | None:
    """The identity of `path` if it is a real directory (a symlink is not), else None."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except (OSError, ValueError):
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISDIR(info.st_mode):
            return None
        try:
            raw = fcntl.ioctl(fd, _FS_IOC_GETVERSION, b"\0" * 8)
            generation = int.from_bytes(raw[:8], sys.byteorder, signed=True)
        except OSError:
            generation = 0
        return (info.st_dev, info.st_ino, generation)
    finally:
        os.close(fd)


def is_owned_directory(path: Path, parent: Path) -> bool:
    """True when `path` is a real directory (not a symlink) strictly inside `parent`."""
    if directory_identity(path) is None:
        return False
    try:
        resolved = path.resolve(strict=True)
    except (OSError, RuntimeError):
        return False
    return resolved.parent == parent and resolved != parent


class Sandboxes:
    """One fresh directory per conversation under `parent`, remembered by contextId.

    Only directories this object made itself are ever handed out, reused or adopted; one
    that was deleted or replaced is never trusted again and a new one is made.
    """

    def __init__(
        self, parent: Path, *, allow_execute: bool = False, protection: Protection = NO_PROTECTION
    ) -> None:
        self._parent_setting = parent
        self._parent: Path | None = None
        self._allow_execute = allow_execute
        self._protection = protection
        self._allocated: dict[str, Path] = {}
        self._made: dict[Path, Identity] = {}
        self._lock = threading.RLock()

    @property
    def parent(self) -> Path:
        """The resolved parent directory, created on first use."""
        if self._parent is None:
            try:
                self._parent_setting.mkdir(parents=True, exist_ok=True)
                self._parent = self._parent_setting.resolve(strict=True)
            except OSError as exc:
                raise SandboxError(
                    f"cannot create the sandbox directory {self._parent_setting}: {exc.strerror}",
                    problem=exc.strerror,
                ) from None
            if not self._parent.is_dir():
                raise SandboxError(f"the sandbox parent {self._parent} is not a directory")
            # Every other conversation's sandbox lies here: the bridge's own, never an agent's.
            self._protection = self._protection.with_bridge_file(self._parent)
        return self._parent

    def _boundary(self, root: Path) -> Boundary:
        return Boundary(
            root=root, owned=True, allow_execute=self._allow_execute, protection=self._protection
        )

    def create(self, label: str = _FALLBACK_LABEL) -> Boundary:
        """A brand-new directory, owned by the bridge, not yet tied to a conversation."""
        parent = self.parent
        try:
            made = Path(tempfile.mkdtemp(prefix=f"{sandbox_label(label)}-", dir=parent))
        except OSError as exc:
            raise SandboxError(
                f"cannot create a sandbox under {parent}: {exc.strerror}", problem=exc.strerror
            ) from None
        identity = directory_identity(made)
        if identity is None or not is_owned_directory(made, parent):
            raise SandboxError(f"the new sandbox {made} is not a directory inside {parent}")
        root = made.resolve(strict=True)
        with self._lock:
            self._made[root] = identity
        # This is the one place that may call a directory owned: mkdtemp just made it.
        return self._boundary(root)

    def for_context(self, context_id: str) -> Boundary:
        """The conversation's sandbox: its existing one if still trustworthy, else a new one."""
        with self._lock:
            known = self._allocated.get(context_id)
            if known is not None and self._still_made(known):
                return self._boundary(known)
            made = self.create(context_id)
            self._allocated[context_id] = made.root
            return made

    def adopt(self, context_id: str, boundary: Boundary) -> None:
        """Tie a sandbox this object created earlier (a warm pool's) to a conversation."""
        with self._lock:
            if not boundary.owned or not self._still_made(boundary.root):
                raise SandboxError(f"{boundary.root} is not a sandbox this bridge made")
            self._allocated[context_id] = boundary.root

    def is_current(self, context_id: str, boundary: Boundary) -> bool:
        """True while `boundary` is still the conversation's trustworthy sandbox."""
        with self._lock:
            known = self._allocated.get(context_id)
            return known == boundary.root and self._still_made(boundary.root)

    # --- durable state (issue 12) ---------------------------------------------------------

    def identity_of(self, root: Path) -> Identity | None:
        """The identity recorded when this object made `root` (for the conversation book)."""
        with self._lock:
            return self._made.get(root)

    def restore(self, context_id: str, root: Path, identity: Identity) -> bool:
        """Tie a directory made before a restart back to its conversation, with the identity
        it had then: it is handed out again only while it is still that very directory."""
        with self._lock:
            self._made[root] = identity
            if not self._still_made(root):
                del self._made[root]
                return False
            self._allocated[context_id] = root
            return True

    def forget(self, context_id: str) -> Path | None:
        """Let the conversation go; returns its directory if it is still the one made."""
        with self._lock:
            root = self._allocated.pop(context_id, None)
            if root is None:
                return None
            trusted = self._still_made(root)
            self._made.pop(root, None)
            return root if trusted else None

    def discard(self, context_id: str) -> Path | None:
        """Forget the conversation and delete its directory tree (symlinks inside are
        removed, never followed), only if it is still the very directory made."""
        root = self.forget(context_id)
        if root is not None:
            shutil.rmtree(root, ignore_errors=True)
        return root

    def remove_if_empty(self, context_id: str) -> bool:
        """Forget the conversation and remove its directory if nothing was put in it."""
        with self._lock:
            root = self._allocated.get(context_id)
            if root is None or not self._still_made(root):
                return False
            try:
                root.rmdir()
            except OSError:
                return False
            del self._allocated[context_id]
            self._made.pop(root, None)
            return True

    def remove_stale_empty(self, older_than: float) -> list[Path]:
        """Empty directories under the parent that no conversation or warm adapter holds,
        unchanged since `older_than` (wall clock): left by a bridge that was killed."""
        removed: list[Path] = []
        with self._lock:
            held = set(self._made)
        try:
            entries = list(os.scandir(self.parent))
        except OSError:
            return removed
        for entry in entries:
            path = Path(entry.path)
            try:
                if not entry.is_dir(follow_symlinks=False) or path in held:
                    continue
                if entry.stat(follow_symlinks=False).st_mtime >= older_than:
                    continue
                path.rmdir()  # fails on anything not empty
            except OSError:
                continue
            removed.append(path)
        return removed

    # --- end of durable state -------------------------------------------------------------

    def _still_made(self, root: Path) -> bool:
        """`root` is a directory this object made, and still that very directory."""
        identity = self._made.get(root)
        return (
            identity is not None
            and directory_identity(root) == identity
            and is_owned_directory(root, self.parent)
        )


def handed_boundary(
    root: Path, *, allow_execute: bool, protection: Protection = NO_PROTECTION
) -> Boundary:
    """The boundary for ACP_CWD: a directory the operator handed over, shared, not owned."""
    try:
        resolved = root.resolve(strict=True)
    except (OSError, RuntimeError):
        raise SandboxError(f"ACP_CWD {root} does not exist") from None
    if not resolved.is_dir():
        raise SandboxError(f"ACP_CWD {root} is not a directory")
    return Boundary(root=resolved, owned=False, allow_execute=allow_execute, protection=protection)


def relative_text(text: str, root: Path | None) -> str:
    """`text` with the root's absolute path written relative to it (`<root>/a.txt` as
    `a.txt`, the root alone as `.`): what the caller is told never spells out where the
    bridge keeps its directories. A sibling sharing the prefix (`<root>2`) is left alone."""
    if root is None or str(root) not in text:
        return text
    pattern = re.compile(re.escape(str(root)) + r"(?:/+|(?![\w.~-]))")
    return pattern.sub(lambda m: "" if m.group().endswith("/") else ".", text)


def without_layout(text: str, layout: Sequence[tuple[Path, str]]) -> str:
    """`text` with each of the bridge's own directories written as its label (`<bridge>`,
    `<python>`, `~` ...): an adapter's stderr quoted in an error names where the bridge and
    its adapters are installed, which the caller has no business learning. The longest
    path goes first, so a directory inside another keeps its own label (of equal ones, the
    first in `layout`)."""
    for path, label in sorted(layout, key=lambda item: -len(str(item[0]))):
        prefix = str(path)
        if prefix in ("", "/") or prefix not in text:
            continue
        pattern = re.compile(re.escape(prefix) + r"(?![\w.~-])")
        text = pattern.sub(label, text)
    return text
