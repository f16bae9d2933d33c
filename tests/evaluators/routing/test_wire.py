"""What crosses the boundary: a policy in the session sees exactly what it would in-process."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from evaluators.routing import wire
from evaluators.routing.api import STATIC
from evaluators.routing.child import PolicyHandler
from evaluators.routing.config import build_fleet_from, build_workload
from evaluators.routing.remote import RemoteHooks, RemoteRouter
from evaluators.routing.sched import Hooks
from evaluators.routing.sim import SimConfig, simulate

ROOT = Path(__file__).resolve().parents[3]
FIELDS = ("now", *STATIC, "queue", "queued_tokens", "running", "kv_used", "prefix_blocks",
          "outstanding", "rtt_s")


@pytest.mark.parametrize("ints, floats, tail", [
    ([1, -2, 2**62], [0.1, 1e-300, float("inf")], None),
    ([], [], {"region": [0, "eu", [0.08]]}),
    ([2**70], [1.5], [1, "L40S"]),  # beyond int64: the JSON form, same values
    ([1.5], [], None),  # a float where an int belongs: the JSON form too
])
def test_messages_come_back_as_they_went(ints, floats, tail):
    data = wire.pack(ints, floats, tail)
    assert data[:1] == (b"J" if any(type(i) is not int or abs(i) >= 2**63 for i in ints)
                        else b"B")
    assert wire.unpack(data) == (ints, floats, tail)


class _Recorder:
    """A session stand-in: the handler answers in this process, the messages are kept."""

    pid = None

    def __init__(self, handler: PolicyHandler):
        self.handler = handler

    def request(self, message: dict[str, Any], timeout_s: float) -> Any:
        class Reply:
            ok, wall_s, error, timed_out, died = True, 0.0, "", False, ""
            value = self.handler.handle(message)

        return Reply


def _view_of(view: Any) -> dict[str, Any]:
    return {name: getattr(view, name) for name in FIELDS}


def test_the_rebuilt_request_and_view_equal_the_simulators(tmp_path):
    seen: list[tuple[Any, ...]] = []
    (tmp_path / "policy.py").write_text(
        "SEEN = []\n"
        "def route(request, view):\n"
        "    SEEN.append((tuple(getattr(request, n) for n in request.__slots__),\n"
        "                 {n: getattr(view, n) for n in " + repr(FIELDS) + "}))\n"
        "    return min(range(view.n), key=lambda i: (view.outstanding[i], i))\n")
    settings = {"pools": [{"accelerator": "H100", "count": 2, "region": "us"},
                          {"accelerator": "L40S", "count": 2, "region": "eu"}],
                "rtt_ms": {"us-eu": 80}}
    workload = build_workload({"kind": "synthetic", "seed": 5, "duration_s": 30,
                               "sessions_per_s": 3.0, "regions": {"us": 0.5, "eu": 0.5}})
    fleet = build_fleet_from(settings)

    def here(request, view):
        seen.append((tuple(getattr(request, n) for n in request.__slots__),
                     {k: list(v) if isinstance(v, list) else v
                      for k, v in _view_of(view).items()}))
        return min(range(view.n), key=lambda i: (view.outstanding[i], i))

    local = simulate(workload, fleet, here)
    handler = PolicyHandler(tmp_path / "policy.py", ["route"])
    handler._start()
    remote = RemoteRouter(_Recorder(handler), bound_s=1.0, call_timeout_s=5.0,
                          deadline_s=60.0)
    crossed = simulate(workload, fleet, remote)
    module = __import__("sys").modules["candidate_policy"]
    assert crossed.decisions == local.decisions and len(seen) == len(workload) > 50
    assert module.SEEN == seen  # every field, every request, types included
    assert {type(v) for _, view in module.SEEN for v in view["kv_used"]} == {float}


def test_the_rebuilt_scheduler_records_equal_the_simulators(tmp_path):
    def fields(obj: Any) -> tuple[Any, ...]:
        return tuple((n, type(getattr(obj, n)), getattr(obj, n)) for n in type(obj).__slots__)

    log: list[Any] = []

    def schedule(queue, replica):
        log.append(("schedule", [fields(w) for w in queue], fields(replica)))
        return min(range(len(queue)), key=lambda i: (queue[i].prompt_tokens, i))

    def chunk_size(request, replica):
        log.append(("chunk_size", fields(request), fields(replica)))
        return 1024

    def evict(running, replica):
        log.append(("evict", [fields(r) for r in running], fields(replica)))
        return 0

    (tmp_path / "policy.py").write_text(
        "LOG = []\n"
        "def fields(obj):\n"
        "    return tuple((n, type(getattr(obj, n)), getattr(obj, n)) for n in "
        "type(obj).__slots__)\n"
        "def schedule(queue, replica):\n"
        "    LOG.append(('schedule', [fields(w) for w in queue], fields(replica)))\n"
        "    return min(range(len(queue)), key=lambda i: (queue[i].prompt_tokens, i))\n"
        "def chunk_size(request, replica):\n"
        "    LOG.append(('chunk_size', fields(request), fields(replica)))\n"
        "    return 1024\n"
        "def evict(running, replica):\n"
        "    LOG.append(('evict', [fields(r) for r in running], fields(replica)))\n"
        "    return 0\n")
    workload = build_workload({"kind": "synthetic", "seed": 2, "duration_s": 30,
                               "sessions_per_s": 6.0, "output_median": 600})
    fleet = build_fleet_from({"pools": [{"accelerator": "H100", "count": 2}]})
    cfg = SimConfig(kv_capacity_tokens=40_000)

    def least(request, view):
        return min(range(view.n), key=view.outstanding.__getitem__)

    simulate(workload, fleet, least, cfg, hooks=Hooks(schedule, chunk_size, evict))
    handler = PolicyHandler(tmp_path / "policy.py", ["schedule", "chunk_size", "evict"])
    handler._start()
    remote = RemoteHooks(_Recorder(handler), bound_s=1.0, call_timeout_s=5.0,
                         deadline_s=60.0)
    simulate(workload, fleet, least, cfg,
             hooks=Hooks(remote.schedule, remote.chunk_size, remote.evict))
    module = __import__("sys").modules["candidate_policy"]
    assert {entry[0] for entry in log} == {"schedule", "chunk_size", "evict"}
    assert module.LOG == log
