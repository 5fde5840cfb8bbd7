"""The key that encrypts push-notification configs at rest (their tokens and credentials).

`A2A_PUSH_KEY` gives it (Fernet keys, comma-separated: the first encrypts, each decrypts,
so a key is rotated by putting the new one first). Without it the bridge makes one at
first start, `push.key` in the state directory, created exclusively with mode 0600, and
reads it on later starts; a key file that others may read, or that is not a plain file of
ours, is refused. A key file beside `A2A_PUSH_KEY` still decrypts what it encrypted.
"""

from __future__ import annotations

import contextlib
import logging
import os
import stat
from pathlib import Path

from cryptography.fernet import Fernet, MultiFernet

from a2a_acp_bridge.errors import StateError

logger = logging.getLogger(__name__)

KEY_FILE = "push.key"


def push_cipher(keys: tuple[str, ...], state_dir: Path) -> MultiFernet:
    """The cipher for push configs: A2A_PUSH_KEY's keys, else the state directory's file."""
    path = state_dir / KEY_FILE
    if keys:
        ciphers = [Fernet(key) for key in keys]
        if path.exists():
            ciphers.append(Fernet(_read_key(path)))
        return MultiFernet(ciphers)
    try:
        return MultiFernet([Fernet(_read_key(path))])
    except FileNotFoundError:
        return MultiFernet([Fernet(_make_key(path))])


def _make_key(path: Path) -> bytes:
    key = Fernet.generate_key()
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except FileExistsError:
        return _read_key(path)  # made meanwhile
    except OSError as exc:
        raise StateError(f"the push key {path} cannot be created: {exc.strerror}") from None
    try:
        os.write(fd, key + b"\n")
        os.fsync(fd)
    except OSError as exc:
        with contextlib.suppress(OSError):
            path.unlink()
        raise StateError(f"the push key {path} cannot be written: {exc.strerror}") from None
    finally:
        os.close(fd)
    logger.info("push key generated", extra={"path": str(path)})
    return key


def _read_key(path: Path) -> bytes:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise StateError(f"the push key {path} cannot be read: {exc.strerror}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.getuid():
            raise StateError(f"the push key {path} is not a plain file of this user")
        if info.st_mode & 0o077:
            raise StateError(
                f"the push key {path} may be read by others (mode "
                f"{stat.S_IMODE(info.st_mode):o}): chmod 600 it"
            )
        key = os.read(fd, 1024).strip()
    finally:
        os.close(fd)
    try:
        Fernet(key)
    except ValueError:
        raise StateError(f"the push key {path} does not hold a key (44 characters)") from None
    return key
