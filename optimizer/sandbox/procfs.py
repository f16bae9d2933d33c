"""Reading the kernel's process table (``/proc``): parents, CPU time, status fields.

One reader for the trusted side (a session's CPU time, a child's host pid, the routing
kind's confinement check) and the inside (the zygote sweeping what a call left behind).
Standard library only. A process that is gone, or a field the kernel does not report,
reads as None (or empty), never as an exception: processes come and go between two reads.
"""

from __future__ import annotations

import os

TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100  # CPU times' unit


def stat_fields(pid: int | str) -> list[bytes] | None:
    """The fields of ``/proc/<pid>/stat`` after the command name (so ``[0]`` is the state,
    ``[1]`` the parent pid, ``[11]`` and ``[12]`` user and system ticks); None when gone.
    The command name may hold spaces and parentheses: the fields start after the last ')'."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read()
    except OSError:
        return None
    return stat[stat.rfind(b")") + 2:].split()


def children() -> dict[int, list[int]]:
    """Every visible process's children: parent pid -> child pids."""
    out: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        fields = stat_fields(name)
        if fields is not None and len(fields) > 1:
            out.setdefault(int(fields[1]), []).append(int(name))
    return out


def children_of(pid: int) -> list[int]:
    """The direct children of ``pid``: its threads' ``children`` files (a few reads), or a
    scan of every process where the kernel has no such files."""
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
    out: list[int] = []
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/children", "rb") as fh:
                out += [int(c) for c in fh.read().split()]
        except FileNotFoundError:
            if os.path.isdir(f"/proc/{pid}/task/{task}"):
                return children().get(pid, [])  # a kernel without CONFIG_PROC_CHILDREN
        except OSError:
            continue  # the thread ended between the two reads
    return out


def descendants(root: int) -> set[int]:
    """Every process below ``root`` (not ``root`` itself)."""
    out, todo = set(), [root]
    while todo:
        for child in children_of(todo.pop()):
            if child not in out:
                out.add(child)
                todo.append(child)
    return out


def cpu_seconds(pid: int | None) -> float | None:
    """User + system CPU time of process ``pid`` (all its threads), from the kernel; it
    moves in clock ticks (:data:`TICKS` a second)."""
    fields = stat_fields(pid) if pid is not None else None
    if fields is None or len(fields) < 13:
        return None
    return (int(fields[11]) + int(fields[12])) / TICKS


def status(pid: int | str) -> dict[str, str]:
    """``/proc/<pid>/status`` as a dict (``"Threads"`` -> ``"1"``); empty when gone."""
    try:
        with open(f"/proc/{pid}/status") as fh:
            return {k: v.strip() for k, v in (line.split(":", 1) for line in fh if ":" in line)}
    except OSError:
        return {}


def cmdline(pid: int) -> bytes:
    """The NUL-separated command line of ``pid``; empty when gone."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return fh.read()
    except OSError:
        return b""


def host_pid(ns_pid: int, root: int | None) -> int | None:
    """The host pid of the process that calls itself ``ns_pid`` inside its PID namespace,
    among the descendants of ``root`` (None when it cannot be found)."""
    if root is None:
        return None
    for pid in descendants(root):
        nspid = status(pid).get("NSpid", "").split()
        if nspid and nspid[-1].isdigit() and int(nspid[-1]) == ns_pid:
            return pid
    return None


class Schedstat:
    """A thread's ``schedstat`` (on-CPU ns, run-queue wait ns), read with one pread;
    ``task`` is its folder (``/proc/thread-self``, ``/proc/<pid>/task/<tid>``)."""

    def __init__(self, task: str):
        try:
            self.fd: int | None = os.open(f"{task}/schedstat", os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            self.fd = None

    def read(self) -> tuple[int, int]:
        if self.fd is None:
            return 0, 0
        try:
            cpu, wait = os.pread(self.fd, 128, 0).split()[:2]
        except (OSError, ValueError):
            return 0, 0
        return int(cpu), int(wait)

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
        self.fd = None
