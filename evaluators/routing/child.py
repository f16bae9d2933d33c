"""Inside the sandbox: the candidate's policy behind a session, one request per decision.

The trusted simulator runs in the evaluator's process; this module is the session entry
(``evaluators.routing.child:serve_policy``) of the candidate's process. It imports no
simulator: per decision it receives plain data (int and float columns, see below),
rebuilds the records a real router or replica scheduler would see (:class:`~evaluators.routing.api.
RequestInfo` and :class:`~evaluators.routing.api.View`, or the
:mod:`~evaluators.routing.sched` records), calls the candidate and returns its answer.
Nothing else is in this process: no workload, no output lengths, no future requests, no
settings (the payload names only the policy file and its functions).

Before the candidate is imported, :func:`confine` adds a Landlock layer to the sandbox's
own: files are readable only in the interpreter, the venv, the project's code packages
(``optimizer/``, ``evaluators/``), the system directories and this session's private
folders, and writable only in those private folders and the private tmp directory. So
``target.toml`` (the held-out workload), the other worktrees and the trace files cannot be
read, and a session cannot leave files for the next one (the evaluator deletes each
session's folders when it ends). :func:`deny_processes` then refuses new processes and
System V / POSIX message-queue IPC (seccomp); threads stay allowed. The candidate is
imported by the first request (``start``), after the trusted side has checked the filter.

Requests: ``{"op": "start"}`` imports the candidate; ``{"op": fn, "d": message}`` calls
``fn`` with the arguments rebuilt from the message (evaluators/routing/wire.py; the field
order is evaluators/routing/remote.py's :func:`route_message` and :class:`RemoteHooks`).
The answer is the candidate's int; anything else comes back as its repr, a wrong answer
the trusted side refuses.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from evaluators.routing import wire
from evaluators.routing.api import STATIC, RequestInfo, View
from evaluators.routing.sched import HOOKS, ReplicaState, Running, Waiting
from optimizer.sandbox import landlock
from optimizer.sandbox.loader import load_module
from optimizer.sandbox.seccomp import deny_processes

PROJECT_ROOT = Path(__file__).resolve().parents[2]
CODE_PACKAGES = ("optimizer", "evaluators")  # what the child imports of the project


def serve_policy(payload: dict[str, Any], io_dir: Path) -> PolicyHandler:
    """Session entry: confine this process, then serve ``payload["functions"]`` of
    ``payload["module"]``, imported by the first request (``start``) so that the trusted
    side can check the confinement before any candidate code runs."""
    for why in (confine(readable=_readable(), writable=[os.getcwd(), str(io_dir), _tmp()]),
                deny_processes()):
        if why:
            print(f"routing child: {why}", file=sys.stderr)
    return PolicyHandler(Path.cwd() / str(payload["module"]),
                         [str(f) for f in payload.get("functions", ())])


_PLAIN_ITEMS = 10_000  # a plan is a few dozen numbers; this bounds what crosses


def plain(value: Any) -> Any:
    """``value`` as JSON-like data (dicts with str keys, lists, str, int, float, bool,
    None), copied; anything else (a subclass of int, an object with methods) raises
    TypeError, so nothing of the candidate's but data reaches the trusted side."""
    count = [0]

    def walk(v: Any, depth: int) -> Any:
        count[0] += 1
        if depth > 8 or count[0] > _PLAIN_ITEMS:
            raise TypeError("plan() returned data nested deeper than 8 or with more than "
                            f"{_PLAIN_ITEMS} items")
        t = type(v)
        if v is None or t in (bool, int, float, str):
            return v
        if t is dict:
            if any(type(k) is not str for k in v):
                raise TypeError("plan() returned a dict with a key that is not a str")
            return {k: walk(x, depth + 1) for k, x in v.items()}
        if t in (list, tuple):
            return [walk(x, depth + 1) for x in v]
        raise TypeError(f"plan() returned a {t.__name__}; only dict, list, str, int, float, "
                        "bool and None cross")

    return walk(value, 0)


def _answer(value: Any) -> Any:
    return value if type(value) is int else repr(value)[:200]


class PolicyHandler:
    """Rebuilds the policy's arguments from plain data and calls the candidate."""

    def __init__(self, path: Path, functions: list[str]):
        self.path = path
        self.functions = functions
        self.fns: dict[str, Any] = {}
        self.view = View()
        self.regions: dict[int, tuple[str, list[float]]] = {}
        self.accelerators: dict[int, str] = {}

    def _start(self) -> bool:
        if self.fns:
            raise RuntimeError("the policy is already imported")
        module = load_module(self.path, "candidate_policy")
        for name in self.functions:
            fn = getattr(module, name, None)
            if not callable(fn):
                wanted = ("route(request, view) -> int" if name == "route"
                          else "plan() -> dict" if name == "plan"
                          else "split(request) -> dict" if name == "split"
                          else ", ".join(HOOKS))
                raise AttributeError(f"the policy must define {wanted}; {name} is missing")
            self.fns[name] = fn
        return True

    def handle(self, request: dict[str, Any]) -> Any:
        op = request.get("op")
        if op == "start":
            return self._start()
        fn = self.fns.get(str(op))
        if fn is None:
            raise LookupError(f"{op!r} is not a function this session serves")
        if op == "plan":  # the deployment mode: plain data, checked on the trusted side
            return plain(fn())
        if op == "split":  # the split mode: one request's facts in, plain data out
            return plain(fn(dict(request["d"])))
        ints, floats, tail = wire.unpack(request["d"])
        if op == "route":
            return _answer(fn(*self._route_args(ints, floats, tail)))
        replica = self._replica(ints, floats, tail)
        if op == "schedule":
            return _answer(fn([_waiting(ints, floats, i) for i in range((len(ints) - 8) // 5)],
                              replica))
        if op == "chunk_size":
            return _answer(fn(_waiting(ints, floats, 0), replica))
        return _answer(fn([_running(ints, floats, i) for i in range((len(ints) - 8) // 5)],
                          replica))

    def _route_args(self, ints: list[int], floats: list[float],
                    tail: Any) -> tuple[RequestInfo, View]:
        rid, prompt, session, reg, n = ints[:5]
        view = self.view
        if tail is not None:
            if "static" in tail:
                for name, value in zip(STATIC, tail["static"], strict=True):
                    setattr(view, name, value)
            index, name, rtt = tail["region"]
            self.regions[index] = (name, rtt)
        region, view.rtt_s = self.regions[reg]
        e = 5 + n
        view.queue, view.queued_tokens = ints[5:e], ints[e:e + n]
        view.running, view.prefix_blocks = ints[e + n:e + 2 * n], ints[e + 2 * n:e + 3 * n]
        view.outstanding = [q + r for q, r in zip(view.queue, view.running, strict=True)]
        arrival = view.now = floats[0]
        view.kv_used = floats[1:1 + n]
        return RequestInfo(rid, arrival, prompt, tuple(ints[e + 3 * n:]), session, region), view

    def _replica(self, ints: list[int], floats: list[float], tail: Any) -> ReplicaState:
        if tail is not None:
            self.accelerators[tail[0]] = tail[1]
        st = ReplicaState()
        (st.index, st.running, st.waiting, st.queued_tokens, st.kv_capacity, st.kv_used,
         st.token_budget, st.max_seqs) = ints[:8]
        st.now = floats[0]
        st.accelerator = self.accelerators[st.index]
        return st


def _waiting(ints: list[int], floats: list[float], i: int) -> Waiting:
    """The i-th record (fields as evaluators/routing/remote.py sends them)."""
    w = Waiting()
    k, f = 8 + 5 * i, 1 + 2 * i
    w.id, w.prompt_tokens, w.context_tokens, w.cached_tokens, w.preempted = ints[k:k + 5]
    w.arrival, w.waited_s = floats[f], floats[f + 1]
    return w


def _running(ints: list[int], floats: list[float], i: int) -> Running:
    r = Running()
    k = 8 + 5 * i
    r.id, r.prompt_tokens, r.context_tokens, r.generated, r.preempted = ints[k:k + 5]
    r.arrival = floats[1 + i]
    return r


# -- Landlock: what the candidate's process may read and write ----------------------------
# device files a program may use; the rest of /dev (/dev/shm: shared by every process of a
# warm sandbox) is out of reach, so no session can leave state there for the next
_DEVICES = {"/dev/null": True, "/dev/zero": True, "/dev/full": True,
            "/dev/urandom": False, "/dev/random": False}  # path -> writable


def _tmp() -> str:
    return os.environ.get("TMPDIR", "/tmp")


def _readable() -> list[str]:
    """The interpreter's library and site-packages folders, the project's code packages, the
    system directories and this process's own /proc entries. Never the project root or a
    folder above it (its ``targets/`` hold the held-out settings), even where a prefix is."""
    import site
    import sysconfig

    paths = {sysconfig.get_path(name) for name in ("stdlib", "platstdlib", "purelib",
                                                     "platlib")}
    paths |= set(site.getsitepackages()) | {os.path.dirname(os.path.realpath(sys.executable))}
    paths = {os.path.realpath(p) for p in paths if p}
    root = str(PROJECT_ROOT)
    paths = {p for p in paths if not (root + os.sep).startswith(p.rstrip(os.sep) + os.sep)}
    paths |= {str(PROJECT_ROOT / p) for p in CODE_PACKAGES}
    paths |= {"/usr", "/lib", "/lib32", "/lib64", "/bin", "/sbin", "/etc", "/sys",
              "/proc/self", "/proc/cpuinfo", "/proc/meminfo", "/proc/stat"}
    return sorted(paths)


def confine(readable: list[str], writable: list[str]) -> str:
    """Reads only beneath ``readable`` and ``writable``, writes only beneath ``writable``
    (and to the harmless devices), for this process and its descendants; a layer on top of
    whatever the sandbox applied, with abstract unix sockets and signals kept inside.
    Returns "" when applied, else why not."""
    return landlock.restrict(writable, readable, devices=_DEVICES,
                             scopes=landlock.SCOPE_ABSTRACT_UNIX_SOCKET | landlock.SCOPE_SIGNAL)


# -- seccomp (optimizer/sandbox/seccomp.py): no processes but threads, no message IPC ----
# The trusted side subtracts the run-queue wait of this process's main thread from each
# decision's time (docs/routing.md, "Decision time"); that is sound only while no other
# task of the candidate can keep the main thread waiting. Threads stay allowed (numpy's
# OpenBLAS creates them; with clone denied it hung at its first matrix product) and the
# trusted side sees their CPU time in /proc; processes, which it cannot see, are refused:
# fork, vfork and clone without CLONE_THREAD get EPERM, clone3 ENOSYS (glibc then falls
# back to clone), and syscalls of another ABI (i386, x32) EPERM. System V IPC and POSIX
# message queues are refused too: warm sessions share one IPC namespace, so a run could
# leave its choices there for the next one (files are closed by Landlock above).
