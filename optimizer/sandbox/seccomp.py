"""seccomp: a process that may start threads but no processes, and no System V or POSIX
message-queue IPC.

:func:`deny_processes` installs a BPF filter on the calling process (its threads inherit
it): fork, vfork and clone without CLONE_THREAD get EPERM, clone3 ENOSYS (glibc then falls
back to clone), syscalls of another ABI (i386, x32) EPERM, and so do the System V IPC and
POSIX message-queue calls. Threads stay allowed (numpy's OpenBLAS creates them; with clone
denied it hung at its first matrix product). A kind uses it where the trusted side must
see every task of the candidate (threads show in ``/proc/<pid>``, processes would not), or
where warm sessions share one IPC namespace and a run could leave state there for the next.

Standard library only: it runs inside the sandbox, before the candidate is imported.
"""

from __future__ import annotations

import ctypes
import struct
from typing import Any

PR_SET_NO_NEW_PRIVS = 38

_IPC = ("shmget", "shmat", "shmctl", "shmdt", "semget", "semop", "semctl", "semtimedop",
        "msgget", "msgsnd", "msgrcv", "msgctl", "mq_open", "mq_unlink", "mq_timedsend",
        "mq_timedreceive", "mq_notify", "mq_getsetattr")
_ARCH = {"x86_64": (0xC000003E, {"clone": 56, "fork": 57, "vfork": 58, "clone3": 435,
                                 **dict(zip(_IPC[:4], (29, 30, 31, 67), strict=True)),
                                 **dict(zip(_IPC[4:8], (64, 65, 66, 220), strict=True)),
                                 **dict(zip(_IPC[8:12], (68, 69, 70, 71), strict=True)),
                                 **dict(zip(_IPC[12:], range(240, 246), strict=True))}),
         "aarch64": (0xC00000B7, {"clone": 220, "clone3": 435,
                                  **dict(zip(_IPC[:4], (194, 196, 195, 197), strict=True)),
                                  **dict(zip(_IPC[4:8], (190, 193, 191, 192), strict=True)),
                                  **dict(zip(_IPC[8:12], (186, 189, 188, 187), strict=True)),
                                  **dict(zip(_IPC[12:], range(180, 186), strict=True))})}
_LD, _JEQ, _JGE, _JSET, _RET = 0x20, 0x15, 0x35, 0x45, 0x06
_ALLOW, _ERRNO = 0x7FFF0000, 0x00050000
_EPERM, _ENOSYS, _CLONE_THREAD = 1, 38, 0x00010000
_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER = 22, 2


def _filter(arch: int, nrs: dict[str, int], x32: bool) -> list[Any]:
    """The BPF program: instructions (code, jump if true, jump if false, k), where a jump
    names a label ("" = the next instruction), and the labels themselves (strings)."""
    prog: list[Any] = [(_LD, "", "", 4), (_JEQ, "", "deny", arch), (_LD, "", "", 0)]
    if x32:
        prog.append((_JGE, "deny", "", 0x40000000))
    prog.append((_JEQ, "nosys", "", nrs["clone3"]))
    prog += [(_JEQ, "deny", "", nrs[n]) for n in ("fork", "vfork", *_IPC) if n in nrs]
    prog += [(_JEQ, "clone", "allow", nrs["clone"]),
             "clone", (_LD, "", "", 16),  # args[0], the flags (low 32 bits)
             (_JSET, "allow", "deny", _CLONE_THREAD),
             "allow", (_RET, "", "", _ALLOW), "deny", (_RET, "", "", _ERRNO | _EPERM),
             "nosys", (_RET, "", "", _ERRNO | _ENOSYS)]
    return prog


def _assemble(prog: list[Any]) -> bytes:
    labels: dict[str, int] = {}
    code: list[tuple[int, str, str, int]] = []
    for item in prog:
        if isinstance(item, str):
            labels[item] = len(code)
        else:
            code.append(item)
    out = []
    for i, (op, jt, jf, k) in enumerate(code):
        t = labels[jt] - i - 1 if jt else 0
        f = labels[jf] - i - 1 if jf else 0
        out.append(struct.pack("=HBBI", op, t, f, k))
    return b"".join(out)


def deny_processes() -> str:
    """Install the filter above on this process (inherited by its threads); "" when done."""
    import platform

    machine = platform.machine()
    if machine not in _ARCH:
        return f"no seccomp filter for {machine}: processes are not refused"
    arch, nrs = _ARCH[machine]
    code = _assemble(_filter(arch, nrs, machine == "x86_64"))
    program = ctypes.create_string_buffer(code)
    fprog = ctypes.create_string_buffer(struct.pack("=HxxxxxxQ", len(code) // 8,
                                                    ctypes.addressof(program)))
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    if libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER,
                  ctypes.c_void_p(ctypes.addressof(fprog)), 0, 0) != 0:
        return f"seccomp filter refused (errno {ctypes.get_errno()}): processes are not refused"
    return ""
