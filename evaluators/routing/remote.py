"""The trusted side of a candidate's policy: one session request per decision.

The simulator (evaluators/routing/sim.py) runs here, in the evaluator's process, and calls
a :class:`RemoteRouter` (router mode) or the hooks of :class:`RemoteHooks` (scheduler mode)
as it would call a policy in-process. Each call sends the decision's inputs by value (int
and float columns, evaluators/routing/wire.py; evaluators/routing/child.py rebuilds the
records there) and waits for the answer; answers are kept in order for the determinism
comparison.

Decision time, measured here around each request from the kernel's accounting (the
candidate cannot touch it): the CPU time the candidate's process spent in the request
(``/proc/<pid>/task/<pid>/schedstat``, nanoseconds: receiving the question, deciding,
answering). Load on the machine, a slow transport or a stolen virtual CPU do not inflate
it; only the candidate's own work does. It stands for the decision only while the
process did nothing the CPU time would miss, and that is checked:

- no other process and no other thread working: the child runs without processes (a
  seccomp filter, checked here in ``/proc/<pid>/status`` before the candidate is
  imported) and its other threads used no CPU over the run (``/proc/<pid>/stat``, all
  threads, against the main thread's schedstat);
- no waiting inside a decision (sleeping, blocking reads, locks): the transport blocks
  the process once per request (it waits in poll for the next one; 1.00 voluntary context
  switches per request measured for the seeds, where a wait in recv made it 1.96-1.99: the
  harness reading an answer woke it once more), so the main thread's voluntary switches
  over the run (``/proc/<pid>/status``) beyond one per request are waits of the policy's
  own; as many decisions as there were such waits, the slowest by the clock, are timed by
  the clock instead (a policy that sleeps in every decision is INVALID; tested). A
  request that arrives before the child polls blocks nothing, so the per-run count can
  hide a few sparse waits: counting per request would close that, and is not built.

Otherwise (not confined, or other threads worked) every decision is timed by the clock:
the perf_counter time around ``session.request`` less this thread's run-queue wait (the
time it was ready to run but had no CPU). On 2 shared cores with two busy processes added
the seed's wall-clock p99 was 4.2-4.8 ms and its CPU time per decision under 0.3 ms. The
process's CPU time over the run, per decision, must stay under the bound too: work done
between requests (after answering) shows there.

Where the candidate fails, the run stops with :class:`PolicyStopped` (a state and a reason
that names the decision): an exception is FAILED, a call that takes longer than
``call_timeout_s`` (the process is killed) or a run past its deadline is TIMEOUT, and in
router mode, where the number of decisions is known, the run stops INVALID as soon as so
many decisions have exceeded the bound that the p99 must exceed it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from itertools import chain
from operator import attrgetter
from typing import Any

from evaluators.routing import wire
from evaluators.routing.api import STATIC, RequestInfo, View
from optimizer.records import CandidateState
from optimizer.sandbox import procfs
from optimizer.sandbox.procfs import TICKS as _TICKS
from optimizer.sandbox.procfs import Schedstat as _Schedstat
from optimizer.sandbox.procfs import cpu_seconds as _cpu_s
from optimizer.sandbox.procfs import status as _status

_perf = time.perf_counter
_CPU_SLACK_S = 2.0 / _TICKS  # /proc/<pid>/stat counts clock ticks: two readings
_TRANSPORT_BLOCKS = 1  # voluntary context switches of the child per request, at most


class PolicyStopped(Exception):
    """The candidate's run cannot go on: ``state`` and ``reason`` are its verdict."""

    def __init__(self, state: CandidateState, reason: str):
        self.state, self.reason = state, reason
        super().__init__(reason)


def percentiles(times: list[float]) -> dict[str, float]:
    """p50, p99 and max of times (s), in milliseconds."""
    if not times:
        return {"p50_ms": 0.0, "p99_ms": 0.0, "max_ms": 0.0}
    s = sorted(times)
    return {"p50_ms": s[len(s) // 2] * 1e3, "p99_ms": s[min(len(s) - 1, int(len(s) * 0.99))]
            * 1e3, "max_ms": s[-1] * 1e3}


def child_pid(session: Any) -> int | None:
    """The host pid of the session's process. ``Session.pid`` misses it for a cold session
    without bwrap (it looks among the descendants of the launched process, which is the
    child itself there), so that case is recognised by the child's command line."""
    if session.pid is not None:
        return int(session.pid)
    proc = getattr(getattr(session, "launch", None), "proc", None)
    if proc is None:
        return None
    return int(proc.pid) if b"optimizer.sandbox.child" in procfs.cmdline(proc.pid) else None


def _blocks(pid: int | None) -> int | None:
    """Voluntary context switches of process ``pid``'s main thread, the one that decides
    (each a wait: for the next request, a sleep, a blocking read, a lock)."""
    if pid is None:
        return None
    try:
        return int(_status(pid)["voluntary_ctxt_switches"])
    except (KeyError, ValueError):
        return None


def _no_processes(pid: int | None) -> bool:
    """The child holds one more seccomp filter than this process (the one
    evaluators/routing/child.py installs: no processes) and runs one thread. Read before
    the candidate is imported, so only trusted code has run there."""
    if pid is None:
        return False
    child, own = _status(pid), _status("self")
    try:
        more = int(child.get("Seccomp_filters", "0")) > int(own.get("Seccomp_filters", "0"))
    except ValueError:
        return False
    return child.get("Seccomp") == "2" and more and child.get("Threads") == "1"


class _Remote:
    """Calls on one session; every answer, its message and its decision time are kept in
    order (the messages for a replay in a fresh session, :func:`replay`)."""

    def __init__(self, session: Any, *, bound_s: float, call_timeout_s: float,
                 deadline_s: float, decisions: int | None = None):
        self.session = session
        self.bound_s = bound_s
        self.call_timeout_s = call_timeout_s
        self.deadline = _perf() + deadline_s
        self.deadline_s = deadline_s
        self.answers: list[Any] = []
        self.messages: list[tuple[str, bytes]] = []  # (function, its arguments' message)
        self.clocks: list[float] = []  # the time around each request less this thread's wait
        self.cpus: list[float] = []  # the candidate's main thread's CPU time in it
        self.slow = 0
        # p99 = sorted[min(n - 1, int(0.99 n))]: it exceeds the bound once n - that index
        # decisions have (router mode knows n, the number of requests, in advance)
        self.slow_limit = (decisions - min(decisions - 1, int(decisions * 0.99))
                           if decisions else None)
        self.pid = pid = child_pid(session)
        self.confined = _no_processes(pid)
        self._own = _Schedstat("/proc/thread-self")
        self._child = _Schedstat(f"/proc/{pid}/task/{pid}" if pid else "/nonexistent")
        self._cpu0: float | None = None
        self._main0 = 0
        self._blocks0: int | None = None

    def start(self) -> None:
        """Import the candidate in the child (after the confinement was checked)."""
        _start(self.session, self.deadline - _perf(), self.deadline_s)
        self._cpu0 = _cpu_s(self.pid)
        self._main0 = self._child.read()[0]
        self._blocks0 = _blocks(self.pid)

    def ask(self, fn: str, data: bytes, where: Callable[[], str]) -> Any:
        left = self.deadline - _perf()
        if left <= 0:
            raise PolicyStopped(CandidateState.TIMEOUT, f"the run did not finish within "
                                f"{self.deadline_s:.0f} s ({len(self.answers)} decisions "
                                f"made; next: {fn}() {where()})")
        limit = self.call_timeout_s if self.call_timeout_s < left else left
        own, child = self._own, self._child
        t0 = _perf()
        a0 = own.read()[1]
        m0 = child.read()[0]
        reply = self.session.request({"op": fn, "d": data}, timeout_s=limit)
        m1 = child.read()[0]
        a1 = own.read()[1]
        wall = _perf() - t0
        if not reply.ok:
            raise _stopped(reply, self.session, fn, where(), limit)
        clock, cpu = wall - (a1 - a0) * 1e-9, (m1 - m0) * 1e-9
        self.clocks.append(clock)
        self.cpus.append(cpu)
        self.answers.append(reply.value)
        self.messages.append((fn, data))
        # the least the decision time can come out as (timing() below)
        if (cpu if self.confined else clock) > self.bound_s:
            self.slow += 1
            if self.slow_limit is not None and self.slow >= self.slow_limit:
                raise PolicyStopped(CandidateState.INVALID,
                                    f"{fn}() p99 decision time exceeds the "
                                    f"{self.bound_s * 1e3:g} ms bound: {self.slow} decisions "
                                    f"took longer (of {len(self.answers)} so far; stopped "
                                    f"{where()}; measured outside the policy's process)")
        return reply.value

    def timing(self) -> dict[str, float]:
        """The run's decision times (ms), how they were taken, and the child's CPU time
        per decision over the run."""
        cpu1, main1, blocks1 = _cpu_s(self.pid), self._child.read()[0], _blocks(self.pid)
        n = max(1, len(self.answers))
        cpu = (cpu1 - self._cpu0) if cpu1 is not None and self._cpu0 is not None else None
        main = (main1 - self._main0) * 1e-9
        # no other process, and the other threads (if any) did no work: the main thread's
        # CPU time is all the process did
        quiet = (self.confined and cpu is not None
                 and cpu - main <= _CPU_SLACK_S + 0.02 * main)
        waits = (blocks1 - self._blocks0 - _TRANSPORT_BLOCKS * len(self.answers)
                 if blocks1 is not None and self._blocks0 is not None else None)
        if quiet and waits is not None:
            times = list(self.cpus)
            # a wait inside a decision is invisible to its CPU time: as many decisions as
            # there were waits beyond the transport's, the slowest by the clock, take it
            for i in sorted(range(len(times)), key=self.clocks.__getitem__,
                            reverse=True)[:max(0, waits)]:
                times[i] = max(times[i], self.clocks[i])
        else:
            times = list(self.clocks)
        out = percentiles(times)
        out["cpu_ms"] = (max(0.0, cpu - _CPU_SLACK_S) / n * 1e3) if cpu is not None else 0.0
        out["by_cpu"] = 1.0 if quiet and waits is not None else 0.0
        out["waits"] = float(max(0, waits or 0))
        out["clock_p99_ms"] = percentiles(self.clocks)["p99_ms"]
        return out

    def close(self) -> None:
        self._own.close()
        self._child.close()


def _start(session: Any, left: float, deadline_s: float) -> None:
    if left <= 0:
        raise PolicyStopped(CandidateState.TIMEOUT, f"no time left for the import "
                            f"(the run's limit is {deadline_s:.0f} s)")
    reply = session.request({"op": "start"}, timeout_s=left)
    if _killed_for_time(reply, session):
        raise PolicyStopped(CandidateState.TIMEOUT, "the program's import did not end "
                            f"within {reply.wall_s:.1f} s (its process was killed)")
    if not reply.ok:
        raise PolicyStopped(CandidateState.FAILED,
                            f"the program failed at import: {reply.reason}"[:4000])


def _killed_for_time(reply: Any, session: Any) -> bool:
    """The request timed out, or the sandbox ended the process at its own time limit."""
    result = getattr(session, "result", None)
    return bool(reply.timed_out or (reply.died and getattr(result, "timed_out", False)))


def _stopped(reply: Any, session: Any, fn: str, where: str, limit: float) -> PolicyStopped:
    if _killed_for_time(reply, session):
        return PolicyStopped(CandidateState.TIMEOUT, f"{fn}() gave no answer {where} within "
                             f"{limit:.1f} s (its process was killed)")
    return PolicyStopped(CandidateState.FAILED, f"{fn}() failed {where}: {reply.reason}"[:4000])


def replay(session: Any, messages: list[tuple[str, bytes]], answers: list[Any], *,
           call_timeout_s: float, deadline_s: float,
           where: Callable[[int, str], str]) -> int | None:
    """Ask a fresh session the recorded questions of a run, one per round trip and in
    order; the index of the first answer that differs from ``answers``, None if none does.

    The trusted simulator is deterministic, so while the answers agree the questions are
    exactly those a second simulated run would ask; the first disagreement ends it. One
    question per round trip: the child never holds an input before it answered the one
    before (with a batch it could read the next view and infer the recorded answer)."""
    deadline = _perf() + deadline_s
    _start(session, deadline_s, deadline_s)
    request = session.request
    for k, ((fn, data), want) in enumerate(zip(messages, answers, strict=True)):
        left = deadline - _perf()
        if left <= 0:
            raise PolicyStopped(CandidateState.TIMEOUT, f"the second run did not finish "
                                f"within {deadline_s:.0f} s ({k} of {len(messages)} "
                                "decisions)")
        limit = call_timeout_s if call_timeout_s < left else left
        reply = request({"op": fn, "d": data}, timeout_s=limit)
        if not reply.ok:
            raise _stopped(reply, session, fn, where(k, fn) + " (second run)", limit)
        if reply.value != want or type(reply.value) is not type(want):
            return k
    return None


class RemoteRouter(_Remote):
    """``route(request, view)`` answered by the candidate's session (the message layout is
    :func:`route_message`'s)."""

    def __init__(self, session: Any, **kwargs: Any):
        super().__init__(session, **kwargs)
        self._regions: dict[str, int] = {}

    def __call__(self, request: RequestInfo, view: View) -> Any:
        data = route_message(request, view, self._regions)
        return self.ask("route", data, lambda: f"for request {request.id} "
                                               f"(arrival {request.arrival:.3f} s)")


_static = attrgetter(*STATIC)


def route_message(request: RequestInfo, view: View, regions: dict[str, int]) -> bytes:
    """ints ``[id, prompt_tokens, session, region, n, queue, queued_tokens, running,
    prefix_blocks, blocks...]``, floats ``[arrival, kv_used...]``; the tail carries the
    fleet's fixed lists with the first request and a region's name and round trips with
    its first request (``regions`` remembers which were sent)."""
    tail: dict[str, Any] | None = None
    reg = regions.get(request.region)
    if reg is None:
        reg = regions[request.region] = len(regions)
        tail = {"region": [reg, request.region, view.rtt_s]}
        if reg == 0:
            tail["static"] = list(_static(view))
    return wire.pack([request.id, request.prompt_tokens, request.session, reg, view.n,
                      *view.queue, *view.queued_tokens, *view.running, *view.prefix_blocks,
                      *request.blocks], [request.arrival, *view.kv_used], tail)


# the records' int and float fields, in the order they cross (evaluators/routing/child.py)
WAITING_INTS = ("id", "prompt_tokens", "context_tokens", "cached_tokens", "preempted")
WAITING_FLOATS = ("arrival", "waited_s")
RUNNING_INTS = ("id", "prompt_tokens", "context_tokens", "generated", "preempted")
REPLICA_INTS = ("index", "running", "waiting", "queued_tokens", "kv_capacity", "kv_used",
                "token_budget", "max_seqs")
_w_ints, _w_floats = attrgetter(*WAITING_INTS), attrgetter(*WAITING_FLOATS)
_r_ints, _s_ints = attrgetter(*RUNNING_INTS), attrgetter(*REPLICA_INTS)


class RemoteHooks(_Remote):
    """The scheduler hooks answered by the candidate's session (pass ``schedule``,
    ``chunk_size`` and ``evict`` to :class:`~evaluators.routing.sched.Hooks`). A message:
    ints ``[replica's REPLICA_INTS, then each record's ints]``, floats ``[replica.now, then
    each record's floats]``; the tail names a replica's accelerator the first time."""

    def __init__(self, session: Any, **kwargs: Any):
        super().__init__(session, **kwargs)
        self._accelerators: dict[int, str] = {}

    def _where(self, replica: Any) -> Callable[[], str]:
        n = len(self.answers)
        return lambda: (f"on replica {replica.index} at t = {replica.now:.3f} s "
                        f"(hook call {n})")

    def _tail(self, replica: Any) -> Any:
        if self._accelerators.get(replica.index) == replica.accelerator:
            return None
        self._accelerators[replica.index] = replica.accelerator
        return [replica.index, replica.accelerator]

    def schedule(self, queue: list[Any], replica: Any) -> Any:
        data = wire.pack([*_s_ints(replica), *chain.from_iterable(map(_w_ints, queue))],
                         [replica.now, *chain.from_iterable(map(_w_floats, queue))],
                         self._tail(replica))
        return self.ask("schedule", data, self._where(replica))

    def chunk_size(self, request: Any, replica: Any) -> Any:
        data = wire.pack([*_s_ints(replica), *_w_ints(request)],
                         [replica.now, *_w_floats(request)], self._tail(replica))
        return self.ask("chunk_size", data, self._where(replica))

    def evict(self, running: list[Any], replica: Any) -> Any:
        data = wire.pack([*_s_ints(replica), *chain.from_iterable(map(_r_ints, running))],
                         [replica.now, *(r.arrival for r in running)], self._tail(replica))
        return self.ask("evict", data, self._where(replica))
