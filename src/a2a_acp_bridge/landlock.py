"""Landlock, the Linux kernel's unprivileged access control, through its three system calls.

A ruleset names the kinds of access it handles (filesystem rights, TCP connect, scopes)
and the exceptions it allows (a directory tree with some rights, a port). Once a thread
restricts itself with it, that thread and everything it starts afterwards (every child,
every `exec`) can do a handled kind of access only where a rule allows it, and can never
undo that. Each `restrict_self` adds a layer; every layer must allow an access.

Rulesets are built in the bridge, where building is cheap to repeat and errors can be
reported; the adapter's child process only calls `prctl(PR_SET_NO_NEW_PRIVS)` and
`landlock_restrict_self` on their descriptors between `fork` and `exec` (`restrict`).

The kernel interface (include/uapi/linux/landlock.h), by ABI version:
1 (Linux 5.13) filesystem rights; 2 (5.19) REFER; 3 (6.2) TRUNCATE; 4 (6.7) TCP bind and
connect; 5 (6.10) IOCTL_DEV; 6 (6.12) scoping of signals and abstract UNIX sockets;
7 (6.15) audit logging flags. The system call numbers are the same on every architecture.
"""

from __future__ import annotations

import ctypes
import errno
import os
import stat
from collections.abc import Iterable, Sequence
from pathlib import Path

SYS_CREATE_RULESET = 444
SYS_ADD_RULE = 445
SYS_RESTRICT_SELF = 446
CREATE_RULESET_VERSION = 1 << 0
PR_SET_NO_NEW_PRIVS = 38
PR_SET_DUMPABLE = 4
PR_GET_DUMPABLE = 3

RULE_PATH_BENEATH = 1
RULE_NET_PORT = 2

# Filesystem rights.
EXECUTE = 1 << 0
WRITE_FILE = 1 << 1
READ_FILE = 1 << 2
READ_DIR = 1 << 3
REMOVE_DIR = 1 << 4
REMOVE_FILE = 1 << 5
MAKE_CHAR = 1 << 6
MAKE_DIR = 1 << 7
MAKE_REG = 1 << 8
MAKE_SOCK = 1 << 9
MAKE_FIFO = 1 << 10
MAKE_BLOCK = 1 << 11
MAKE_SYM = 1 << 12
REFER = 1 << 13  # ABI 2
TRUNCATE = 1 << 14  # ABI 3
IOCTL_DEV = 1 << 15  # ABI 5
# The rights that apply to a file itself (the others only to a directory's entries).
FILE_RIGHTS = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE | IOCTL_DEV

# Network rights (ABI 4).
BIND_TCP = 1 << 0
CONNECT_TCP = 1 << 1

# Scopes (ABI 6): no signal to, and no abstract UNIX socket of, a process outside the domain.
SCOPE_ABSTRACT_UNIX_SOCKET = 1 << 0
SCOPE_SIGNAL = 1 << 1

# The highest port a rule may name.
MAX_PORT = 65535


def fs_rights(abi: int) -> int:
    """Every filesystem right the kernel of this ABI knows."""
    rights = (MAKE_SYM << 1) - 1
    if abi >= 2:
        rights |= REFER
    if abi >= 3:
        rights |= TRUNCATE
    if abi >= 5:
        rights |= IOCTL_DEV
    return rights


class LandlockError(Exception):
    """Landlock is missing, or refused a call; the message says which and why."""


class _RulesetAttr(ctypes.Structure):
    _fields_ = [
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),
        ("scoped", ctypes.c_uint64),
    ]


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


class _NetPortAttr(ctypes.Structure):
    _fields_ = [("allowed_access", ctypes.c_uint64), ("port", ctypes.c_uint64)]


_libc = ctypes.CDLL(None, use_errno=True)
_syscall = _libc.syscall
_syscall.restype = ctypes.c_long
_prctl = _libc.prctl
_prctl.restype = ctypes.c_int
_prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]


def abi_version() -> int:
    """The Landlock ABI the running kernel offers; LandlockError says why there is none."""
    version = _syscall(SYS_CREATE_RULESET, None, ctypes.c_size_t(0), CREATE_RULESET_VERSION)
    if version >= 0:
        return int(version)
    code = ctypes.get_errno()
    if code == errno.EOPNOTSUPP:
        raise LandlockError(
            "the kernel has Landlock but it is turned off (add landlock to its lsm= boot parameter)"
        )
    if code == errno.ENOSYS:
        raise LandlockError(
            "the kernel offers no Landlock (Linux 5.13 or newer, built with "
            "CONFIG_SECURITY_LANDLOCK), or a seccomp profile hides its system calls"
        )
    if code == errno.EPERM:
        raise LandlockError("a seccomp profile forbids the Landlock system calls")
    raise LandlockError(f"the Landlock probe failed: {os.strerror(code)}")


class Ruleset:
    """One ruleset being built: a file descriptor owned by this object until `close`."""

    def __init__(self, *, fs: int = 0, net: int = 0, scoped: int = 0) -> None:
        attr = _RulesetAttr(fs, net, scoped)
        fd = _syscall(
            SYS_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(ctypes.sizeof(attr)), 0
        )
        if fd < 0:
            raise LandlockError(f"cannot create a ruleset: {os.strerror(ctypes.get_errno())}")
        self.fd = int(fd)
        self.handled_fs = fs

    def allow_path(self, path: Path, rights: int) -> bool:
        """Allow `rights` on `path` and beneath it (on a file: only its file rights).
        False when the path does not exist; symlinks are followed, as the kernel does."""
        try:
            fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
        except OSError:
            return False
        try:
            if not stat.S_ISDIR(os.fstat(fd).st_mode):
                rights &= FILE_RIGHTS
            rule = _PathBeneathAttr(rights & self.handled_fs, fd)
            if _syscall(SYS_ADD_RULE, self.fd, RULE_PATH_BENEATH, ctypes.byref(rule), 0):
                raise LandlockError(
                    f"cannot add a rule for {path}: {os.strerror(ctypes.get_errno())}"
                )
        finally:
            os.close(fd)
        return True

    def allow_ports(self, ports: Iterable[int], rights: int) -> None:
        """Allow `rights` (BIND_TCP, CONNECT_TCP) on each of `ports`."""
        rule = _NetPortAttr(rights, 0)
        pointer = ctypes.byref(rule)
        add, ruleset = _syscall, self.fd
        for port in ports:
            rule.port = port
            if add(SYS_ADD_RULE, ruleset, RULE_NET_PORT, pointer, 0):
                raise LandlockError(
                    f"cannot add a rule for port {port}: {os.strerror(ctypes.get_errno())}"
                )

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def capability_count() -> int:
    """How many capabilities this kernel knows (cap_last_cap + 1)."""
    try:
        return int(Path("/proc/sys/kernel/cap_last_cap").read_text()) + 1
    except (OSError, ValueError):
        return 64


def has_capabilities() -> bool:
    """Whether this process holds any capability (it runs as root, or was given some)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(("CapEff:", "CapPrm:")) and int(line.split()[1], 16):
                return True
    except (OSError, ValueError, IndexError):
        return True  # unknown: drop them anyway
    return False


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [
        ("effective", ctypes.c_uint32),
        ("permitted", ctypes.c_uint32),
        ("inheritable", ctypes.c_uint32),
    ]


_CAP_VERSION_3 = 0x20080522
PR_CAPBSET_DROP = 24
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_CLEAR_ALL = 4


def _drop_capabilities(count: int) -> None:
    # The bounding set first (that needs CAP_SETPCAP, still held), so no exec can give
    # root its capabilities back; then the ambient, permitted and effective sets.
    for cap in range(count):
        if _prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP) failed")
    if _prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_CAP_AMBIENT_CLEAR_ALL) failed")
    header = _CapHeader(_CAP_VERSION_3, 0)
    data = (_CapData * 2)()
    if _libc.capset(ctypes.byref(header), data) != 0:
        raise OSError(ctypes.get_errno(), "capset failed")


def restrict(ruleset_fds: Sequence[int], capabilities: int = 0) -> None:
    """Confine the calling thread, and all it will start, by each ruleset in turn; with
    `capabilities` (the kernel's count), first drop every capability for good.

    Root's CAP_SYS_PTRACE would let it read /proc/<pid>/environ of processes outside its
    Landlock domain, CAP_DAC_OVERRIDE other users' files: an adapter never keeps them.
    Meant for a child between fork and exec: no allocation beyond ctypes' own, no lock,
    no logging. Raises OSError, which the subprocess machinery reports to the parent as
    a failed exec, so an unconfined adapter never runs."""
    if capabilities:
        _drop_capabilities(capabilities)
    if _prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        code = ctypes.get_errno()
        raise OSError(code, "prctl(PR_SET_NO_NEW_PRIVS) failed")
    for fd in ruleset_fds:
        if _syscall(SYS_RESTRICT_SELF, fd, 0) != 0:
            code = ctypes.get_errno()
            raise OSError(code, "landlock_restrict_self failed")


def forbid_same_user_inspection() -> bool:
    """prctl(PR_SET_DUMPABLE, 0): processes of the same user (without CAP_SYS_PTRACE) can
    no longer read this process's /proc entries (environ, mem, fd) or ptrace it."""
    return bool(_prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) == 0)


def is_dumpable() -> bool:
    return bool(_prctl(PR_GET_DUMPABLE, 0, 0, 0, 0) == 1)
