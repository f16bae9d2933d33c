"""The warm zygote: ``python -m optimizer.sandbox.zygote SOCK_FD PIDNS PRELOAD``.

A long-lived process inside the sandbox (inside bwrap when available) that imports the
``PRELOAD`` modules once (comma-separated, e.g. ``torch,triton``; importing them creates
no CUDA context, and nothing here may) and then forks one child per call. The child gets
its own session, its own resource limits, a fresh environment, a private tmp directory,
``cwd`` = the candidate's folder, stdout/stderr/response pipes passed by the engine over
the control socket (SCM_RIGHTS), and runs :func:`optimizer.sandbox.child.run_entry`.

Calls are served one at a time. When a call ends (exit, crash or timeout), everything it
left behind is killed before the reply goes out: inside a PID namespace (``PIDNS`` = 1)
``kill(-1, SIGKILL)`` reaches every process but bwrap's init and the zygote; outside one,
the zygote is a child subreaper, so orphans (setsid'ed escapees included) are re-parented
to it and killed as its children. The zygote is not dumpable, so a candidate running as
the same uid cannot ptrace it.

The control socket speaks :mod:`optimizer.sandbox.wire`; a request carries three fds
(stdout, stderr, response write ends) attached to its length header, and a fourth, the
channel of a session (:mod:`optimizer.sandbox.serve`), when it opens one: the child then
serves the trusted side's requests until the channel closes.
"""

from __future__ import annotations

import ctypes
import importlib
import os
import select
import shutil
import signal
import socket
import sys
import tempfile
import time
import traceback
from typing import Any

from optimizer.sandbox.child import call_home, confine, run_entry
from optimizer.sandbox.procfs import children_of
from optimizer.sandbox.wire import recv_msg, send_msg
from optimizer.slots import pin_from_env

PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
PR_SET_CHILD_SUBREAPER = 36

_libc = ctypes.CDLL(None, use_errno=True)


def _prctl(option: int, value: int) -> None:
    _libc.prctl(option, value, 0, 0, 0)


def _reap() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def forget_shared_state() -> None:
    """Remove what a call could leave for the next one outside its own tmp directory: files
    in /dev/shm (POSIX shared memory, semaphores) and System V shared memory, semaphores
    and message queues. Inside bwrap these belong to this sandbox's namespaces alone
    (tmpfs /dev/shm, a private IPC namespace), so nothing of the engine's is touched; a
    candidate could otherwise leave a memo for the next session or candidate."""
    try:
        for name in os.listdir("/dev/shm"):
            path = os.path.join("/dev/shm", name)
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path, ignore_errors=True)
            else:
                try:
                    os.unlink(path)
                except OSError:
                    pass
    except OSError:
        pass
    libc = ctypes.CDLL(None, use_errno=True)
    # (/proc/sysvipc table, its control function); IPC_RMID = 0
    for table, ctl in (("shm", libc.shmctl), ("sem", libc.semctl), ("msg", libc.msgctl)):
        try:
            with open(f"/proc/sysvipc/{table}") as fh:
                rows = fh.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            if len(fields) > 1 and fields[1].isdigit():
                if table == "sem":
                    ctl(int(fields[1]), 0, 0)
                else:
                    ctl(int(fields[1]), 0, None)


def sweep(pidns: bool, budget_s: float = 5.0) -> bool:
    """Kill everything a call left behind; False when processes remain after ``budget_s``.

    A fork bomb keeps forking between two kill rounds and dying processes take a while to
    unmap (64 numpy processes on 2 cores: ~0.4 s), so this loops until nothing is left.
    """
    me = os.getpid()
    deadline = time.monotonic() + budget_s
    while time.monotonic() < deadline:
        if pidns:
            try:
                os.kill(-1, signal.SIGKILL)  # all but init and me: the namespace is ours
            except ProcessLookupError:
                _reap()
                return True
        else:
            children = children_of(me)
            if not children:
                _reap()
                return True
            for pid in children:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        time.sleep(0.001)
        _reap()
    return False


def _child(req: dict[str, Any], fds: list[int], tmp: str, sock: socket.socket) -> None:
    """In the forked child: never returns."""
    code = 70
    try:
        os.setsid()
        _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        _prctl(PR_SET_DUMPABLE, 1)
        sock.close()
        for target, fd in zip((1, 2, 3, 4), fds, strict=False):
            os.dup2(fd, target)
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.closerange(len(fds) + 1, 1 << 16)
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGCHLD):
            signal.signal(sig, signal.SIG_DFL)
        os.environ.clear()
        os.environ.update(req["env"])
        os.environ.update(call_home(tmp))
        tempfile.tempdir = None
        os.chdir(req["workdir"])
        confine(req, [tmp])
        code = run_entry(req["entry"], req["payload"], req["io_dir"], 3,
                         channel_fd=4 if len(fds) == 4 else None)
    except BaseException:  # noqa: BLE001 - report anything, then exit
        traceback.print_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def serve_call(sock: socket.socket, req: dict[str, Any], fds: list[int], n: int, pidns: bool):
    tmp = tempfile.mkdtemp(prefix=f"call-{n}-", dir="/tmp")
    start = time.monotonic()
    pid = os.fork()
    if pid == 0:
        _child(req, fds, tmp, sock)
    for fd in fds:
        os.close(fd)
    timed_out = False
    pidfd = os.pidfd_open(pid)
    try:
        ready, _, _ = select.select([pidfd], [], [], float(req["timeout_s"]))
        if not ready:
            timed_out = True
            try:
                os.kill(-1, signal.SIGKILL) if pidns else os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    finally:
        os.close(pidfd)
    _, status = os.waitpid(pid, 0)
    wall = time.monotonic() - start
    clean = sweep(pidns)
    swept = time.monotonic() - start - wall
    shutil.rmtree(tmp, ignore_errors=True)
    if pidns:  # inside bwrap: /dev/shm and System V IPC are this sandbox's own
        forget_shared_state()
    return {
        "returncode": os.waitstatus_to_exitcode(status),
        "timed_out": timed_out,
        "wall_s": wall,
        "clean": clean,
        "sweep_s": swept,
    }


def main(argv: list[str]) -> int:
    sock_fd, pidns_flag, preload = int(argv[0]), argv[1] == "1", argv[2]
    # kill(-1) outside a PID namespace would hit every process of this uid: refuse unless
    # we are pid 2 (bwrap's init is pid 1), which only happens inside a fresh namespace.
    pidns = pidns_flag and os.getpid() == 2
    sock = socket.socket(fileno=sock_fd)
    _prctl(PR_SET_DUMPABLE, 0)
    _prctl(PR_SET_CHILD_SUBREAPER, 1)
    pin_from_env()  # the slot's cores, inherited by every process forked from here
    errors = []
    for name in filter(None, preload.split(",")):
        try:
            importlib.import_module(name)
        except Exception as exc:  # noqa: BLE001 - reported to the engine, which logs it
            errors.append(f"{name}: {type(exc).__name__}: {exc}")
    send_msg(sock, {"ready": True, "pid": os.getpid(), "pidns": pidns, "errors": errors})
    n = 0
    while True:
        try:
            req, fds = recv_msg(sock, maxfds=4)
        except (EOFError, ConnectionError):
            return 0
        n += 1
        if len(fds) not in (3, 4):
            for fd in fds:
                os.close(fd)
            send_msg(sock, {"error": f"expected 3 or 4 fds, got {len(fds)}"})
            continue
        reply = serve_call(sock, req, fds, n, pidns)
        send_msg(sock, reply)
        if not reply["clean"]:
            return 3  # processes survived the sweep: let the engine start a fresh sandbox


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
