"""Run a command on a kernel that seems to have no Landlock: a seccomp filter answers the
three Landlock system calls with an error, as an old kernel (ENOSYS) or a container's
restrictive seccomp profile (EPERM) would, then the command is exec'd.

    python tests/support/no_landlock.py ENOSYS|EPERM COMMAND [ARG...]

A real kernel-level simulation, not a switch in the bridge: the bridge probes Landlock
exactly as it does everywhere and sees it missing.
"""

from __future__ import annotations

import ctypes
import errno
import os
import sys

PR_SET_NO_NEW_PRIVS = 38
PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2
SECCOMP_RET_ALLOW = 0x7FFF0000
SECCOMP_RET_ERRNO = 0x00050000
BPF_LD_W_ABS = 0x20
BPF_JEQ_K = 0x15
BPF_RET_K = 0x06
# landlock_create_ruleset, landlock_add_rule, landlock_restrict_self (every architecture).
LANDLOCK_CALLS = (444, 445, 446)


class SockFilter(ctypes.Structure):
    _fields_ = [
        ("code", ctypes.c_uint16),
        ("jt", ctypes.c_uint8),
        ("jf", ctypes.c_uint8),
        ("k", ctypes.c_uint32),
    ]


class SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(SockFilter))]


def install(error: int) -> None:
    # Load the system call number (offset 0 of seccomp_data); each Landlock call jumps
    # to the last instruction (the error); anything else is allowed.
    program = [SockFilter(BPF_LD_W_ABS, 0, 0, 0)]
    count = len(LANDLOCK_CALLS)
    for index, number in enumerate(LANDLOCK_CALLS):
        program.append(SockFilter(BPF_JEQ_K, count - index, 0, number))
    program.append(SockFilter(BPF_RET_K, 0, 0, SECCOMP_RET_ALLOW))
    program.append(SockFilter(BPF_RET_K, 0, 0, SECCOMP_RET_ERRNO | error))
    filters = (SockFilter * len(program))(*program)
    fprog = SockFprog(len(program), filters)
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS)")
    if libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_SECCOMP)")


if __name__ == "__main__":
    install(getattr(errno, sys.argv[1]))
    os.execvp(sys.argv[2], sys.argv[2:])
