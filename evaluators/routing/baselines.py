"""The best baseline on a workload: our own policies, run in-process (trusted code).

The done-criterion of a routing or scheduler winner is that it beats the best published
baseline on the training and the held-out workload, so the evaluator reports the best
baseline next to every candidate. Baselines are files of a folder (route() for router
mode, the scheduler hooks for scheduler mode); each runs once per workload and evaluator
instance: the nightly routing target's 8 baselines x 2 workloads take about 3 s of one
core (measured with bench/routing_search.py's settings, 2026-11-29).
"""

from __future__ import annotations

import hashlib
import itertools
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evaluators.routing.fleet import Fleet
from evaluators.routing.metrics import Slo, compute_metrics
from evaluators.routing.sched import DecisionError, Hooks
from evaluators.routing.sim import SimConfig, SimResult, simulate
from evaluators.routing.workload import Workload
from optimizer.sandbox import loader

_loads = itertools.count()


def editable_digest(cand_dir: Path, editable: Iterable[str]) -> str:
    """A digest of a candidate's editable files (a missing one counts as empty): the key
    under which an evaluator keeps what one program answered."""
    h = hashlib.sha256()
    for rel in sorted(editable):
        path = cand_dir / rel
        h.update(rel.encode() + b"\0" + (path.read_bytes() if path.is_file() else b""))
    return h.hexdigest()


def load_module(path: Path) -> Any:
    """Import a trusted policy file as a fresh module (module state never leaks between
    runs). Only for our own files: candidates run in a session (evaluators/routing/child.py)."""
    return loader.load_module(path, f"_routing_policy_{next(_loads)}")


def load_policy(path: Path) -> Any:
    """A trusted policy file's ``route`` (a fresh module per call)."""
    route = getattr(load_module(path), "route", None)
    if not callable(route):
        raise AttributeError(f"{path.name} must define route(request, view) -> int")
    return route


@dataclass(frozen=True)
class BaselineReport:
    """Every baseline's metrics on one workload and which is best by ``metric``."""

    metric: str
    minimize: bool
    best: str
    metrics: dict[str, dict[str, float]]  # baseline name -> metrics
    failed: dict[str, str]  # baseline name -> why it could not run here

    @property
    def best_metrics(self) -> dict[str, float]:
        return self.metrics[self.best]

    def versus(self, value: float) -> float:
        """Best baseline / candidate for a minimised metric (candidate / best otherwise):
        above 1 means the candidate beats the best baseline."""
        base = self.best_metrics[self.metric]
        num, den = (base, value) if self.minimize else (value, base)
        if den <= 0:
            return math.inf if num > 0 else 1.0
        return num / den

    def table(self) -> str:
        order = sorted(self.metrics, key=lambda k: self.metrics[k][self.metric],
                       reverse=not self.minimize)
        lines = [f"baselines by {self.metric} ({'lower' if self.minimize else 'higher'} is "
                 f"better); best: {self.best}"]
        for name in order:
            m = self.metrics[name]
            shown = dict.fromkeys((self.metric, "ttft_p99_s", "slo_attainment"))
            lines.append(f"{name}: " + ", ".join(f"{k} {m[k]:.4g}" for k in shown))
        lines += [f"{name}: not run ({why})" for name, why in sorted(self.failed.items())]
        return "\n".join(lines) + "\n"


def runner(mode: str, workload: Workload, fleet: Fleet, cfg: SimConfig,
           router: Path | None = None) -> Callable[[Path], SimResult]:
    """Run one baseline file in ``mode`` ("router" or "scheduler" with the trusted router)."""

    def run(path: Path) -> SimResult:
        if mode == "scheduler":
            assert router is not None
            hooks = Hooks.from_module(load_module(path))
            return simulate(workload, fleet, load_policy(router), cfg, hooks=hooks)
        return simulate(workload, fleet, load_policy(path), cfg)

    return run


def best_baseline(folder: Path, run: Callable[[Path], SimResult], slo: Slo, metric: str,
                  minimize: bool) -> BaselineReport | None:
    """Every ``*.py`` of ``folder`` through ``run``, ranked by ``metric`` (ttft_p99_s, lower
    is better, when ``metric`` is not one of compute_metrics', e.g. min_replicas); None when
    none could run."""
    metrics: dict[str, dict[str, float]] = {}
    failed: dict[str, str] = {}
    for path in sorted(folder.glob("*.py")):
        try:
            m = compute_metrics(run(path), slo)
        except (DecisionError, AttributeError) as exc:  # e.g. a router blind to a pool
            failed[path.stem] = str(exc)[:200]
            continue
        if metric not in m:
            metric, minimize = "ttft_p99_s", True
        if not math.isfinite(m.get(metric, math.nan)):
            failed[path.stem] = f"{metric} is not finite"
            continue
        metrics[path.stem] = m
    if not metrics:
        return None
    pick = min if minimize else max
    best = pick(metrics, key=lambda k: metrics[k][metric])
    return BaselineReport(metric, minimize, best, metrics, failed)
