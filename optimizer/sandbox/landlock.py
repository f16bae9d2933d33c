"""Landlock (Linux >= 5.13): what a sandboxed process may write, and read, beneath which paths.

An unprivileged security module, so it works with and without bwrap, as root too, and a
process can only add layers to its own: the sandbox's child confines writes to its
folders before any candidate code runs (:func:`restrict` with writable paths only; what is
visible at all is bwrap's business), and a kind may add a layer of its own that confines
reads too (the routing kind's child: the held-out workload stays unreadable).

Standard library only: it runs inside the sandbox, before the candidate is imported.
"""

from __future__ import annotations

import ctypes
import os
import struct
from collections.abc import Iterable, Mapping

# syscall numbers (the same on every architecture) and prctl's option
_CREATE, _ADD_RULE, _RESTRICT = 444, 445, 446
_PR_SET_NO_NEW_PRIVS = 38
_VERSION = 1  # LANDLOCK_CREATE_RULESET_VERSION
_PATH_BENEATH = 1  # LANDLOCK_RULE_PATH_BENEATH

# access rights: on files, on directories (v1); REFER (v2); TRUNCATE (v3)
EXECUTE, WRITE_FILE, READ_FILE, READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
DIR_WRITES = 0x1FF0  # REMOVE_DIR, REMOVE_FILE, MAKE_CHAR/DIR/REG/SOCK/FIFO/BLOCK/SYM
REFER, TRUNCATE = 1 << 13, 1 << 14
# scopes (ABI 6): processes outside the domain are out of reach
SCOPE_ABSTRACT_UNIX_SOCKET, SCOPE_SIGNAL = 1 << 0, 1 << 1


def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    return libc


def abi() -> int:
    """The kernel's Landlock ABI version; 0 when unavailable."""
    return max(0, int(_libc().syscall(_CREATE, None, 0, _VERSION)))


def restrict(
    writable: Iterable[str],
    readable: Iterable[str] | None = None,
    *,
    devices: Mapping[str, bool] | None = None,
    scopes: int = SCOPE_SIGNAL,
) -> str:
    """Confine this process and its descendants: writes only beneath ``writable``; with
    ``readable``, reads only beneath ``readable`` and ``writable`` too (None: reads are not
    handled). ``devices``: single device files, path -> writable. ``scopes`` apply where the
    kernel has them (ABI >= 6; by default no signals to processes outside the domain: the
    zygote, the engine). Paths that do not exist are passed over. Returns "" when applied,
    else why not (an old kernel, a disabled module), and then nothing is applied."""
    libc = _libc()
    version = int(libc.syscall(_CREATE, None, 0, _VERSION))
    if version < 1:
        return f"Landlock unavailable (errno {ctypes.get_errno()})"
    reads = readable is not None
    file_rights = WRITE_FILE | (TRUNCATE if version >= 3 else 0) | (READ_FILE if reads else 0)
    handled = file_rights | DIR_WRITES | (REFER if version >= 2 else 0)
    handled |= READ_DIR if reads else 0
    attr = (struct.pack("=QQQ", handled, 0, scopes) if version >= 6 and scopes
            else struct.pack("=Q", handled))
    ruleset = int(libc.syscall(_CREATE, attr, len(attr), 0))
    if ruleset < 0:
        return f"landlock_create_ruleset failed (errno {ctypes.get_errno()})"
    rules = [(p, READ_FILE | READ_DIR) for p in readable or ()]
    rules += [(p, handled) for p in writable]
    rules += [(p, file_rights if w else READ_FILE) for p, w in (devices or {}).items()]
    try:
        for path, wanted in rules:
            why = _add_rule(libc, ruleset, path, wanted & handled, file_rights)
            if why:
                return why
        libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
        if libc.syscall(_RESTRICT, ruleset, 0) < 0:
            return f"landlock_restrict_self failed (errno {ctypes.get_errno()})"
    finally:
        os.close(ruleset)
    return ""


def _add_rule(libc: ctypes.CDLL, ruleset: int, path: str, rights: int, file_rights: int) -> str:
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return ""
    try:
        if not os.path.isdir(path):
            rights &= file_rights  # a file takes no directory rights
        if not rights:
            return ""
        rule = struct.pack("=Qi", rights, fd)  # landlock_path_beneath_attr, packed
        if libc.syscall(_ADD_RULE, ruleset, _PATH_BENEATH, rule, 0) < 0:
            return f"landlock_add_rule({path}) failed (errno {ctypes.get_errno()})"
    finally:
        os.close(fd)
    return ""
