"""Sandboxed entry: run the candidate through the simulator, log its decisions.

``simulate(payload, io_dir)`` runs in the candidate's folder. It returns only the
candidate's decisions and its own decision times: in ``router`` mode the replica chosen
for every request, in ``scheduler`` mode every answer of its ``schedule``/``chunk_size``/
``evict`` hooks in call order (the fixed router is trusted code). The trusted side replays
the decisions through its own simulator and computes every metric, so nothing the
candidate does to this process's simulator changes the result.

payload: ``policy`` (file name), ``settings`` (the evaluator settings), ``workload`` (the
workload settings to use), ``runs`` (how many fresh runs: 2 for the determinism check),
``head`` (only the first N requests, optional), ``sizes`` (fleet sizes to run, optional:
the smallest-fleet search), ``mode`` ("router" or "scheduler").
"""

from __future__ import annotations

import importlib.util
import itertools
import sys
from pathlib import Path
from typing import Any

from evaluators.routing.config import (
    build_fleet_from,
    build_sim_config,
    build_workload,
    router_path,
)
from evaluators.routing.sched import Hooks
from evaluators.routing.sim import DecisionError
from evaluators.routing.sim import simulate as run_sim

_loads = itertools.count()


def load_policy(path: Path) -> Any:
    """Import ``path`` as a fresh module and return its ``route``."""
    route = getattr(load_module(path), "route", None)
    if not callable(route):
        raise AttributeError(f"{path.name} must define route(request, view) -> int")
    return route


def load_module(path: Path) -> Any:
    """Import ``path`` as a fresh module (module state never leaks between runs)."""
    name = f"_routing_policy_{next(_loads)}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _percentiles(xs: list[float]) -> dict[str, float]:
    if not xs:
        return {"p50_ms": 0.0, "p99_ms": 0.0, "max_ms": 0.0}
    s = sorted(xs)
    return {
        "p50_ms": s[len(s) // 2] * 1e3,
        "p99_ms": s[min(len(s) - 1, int(len(s) * 0.99))] * 1e3,
        "max_ms": s[-1] * 1e3,
    }


def simulate(payload: dict[str, Any], io_dir: Path) -> dict[str, Any]:
    settings = payload["settings"]
    workload = build_workload(payload["workload"])
    if payload.get("head"):
        workload = workload.head(int(payload["head"]))
    fleet = build_fleet_from(settings)
    cfg = build_sim_config(settings)
    sizes = payload.get("sizes") or [len(fleet)]
    scheduler = payload.get("mode", "router") == "scheduler"
    policy = Path.cwd() / payload.get("policy", "policy.py")
    runs = []
    for size in sizes:
        for _ in range(int(payload.get("runs", 1))):
            try:
                if scheduler:
                    hooks = Hooks.from_module(load_module(policy), record=True, timed=True)
                    route = load_policy(router_path(settings))
                    run_sim(workload, fleet.first(int(size)), route, cfg, hooks=hooks)
                    assert hooks.log is not None and hooks.times is not None
                    runs.append({"size": int(size), "hooks": hooks.log,
                                 "timing": _percentiles(hooks.times)})
                    continue
                res = run_sim(workload, fleet.first(int(size)), load_policy(policy), cfg,
                              time_policy=True)
            except DecisionError as exc:  # an invalid decision: a wrong answer, not a crash
                return {"invalid": str(exc)}
            runs.append({"size": int(size), "decisions": res.decisions,
                         "timing": _percentiles(res.decision_s)})
    return {"runs": runs}
