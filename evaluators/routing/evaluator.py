"""The ``routing`` kind: a candidate policy judged in the cluster simulator.

Two modes (``[evaluator] mode``): ``router`` (the default), where the candidate is
``route(request, view)``, and ``scheduler``, where it is the replica scheduler's
``schedule``/``chunk_size``/``evict`` hooks (see evaluators/routing/sched.py) behind a
fixed, trusted router. The candidate only decides. ``evaluators.routing.child:simulate``
runs it in the sandbox and returns its decisions (a replica per request, or every hook
answer in call order) plus its decision times; this side replays those decisions through
its own simulator (deterministic, so the views match what the candidate saw) and computes
every metric. Patching the simulator inside the sandbox changes nothing here.

Stages:
- correctness: on the first ``check_requests`` requests, two fresh runs must decide the
  same (determinism), every decision is a replica index, every request finishes or is
  counted as dropped, and the policy's p99 decision time stays under ``max_decision_ms``.
- performance: the training workload; objectives from target.toml (``ttft_p99_s``,
  ``goodput_rps`` (maximise), ``min_replicas``, or any metric of metrics.compute_metrics).
- held_out: the same on ``held_out`` (another seed, window or trace).

Both measuring stages also report the best baseline of that workload (the policies of
``baselines``, run here once per evaluator: they are our code): ``best_baseline_<metric>``
for the ranking metric (the primary objective, or ttft_p99_s when the baselines cannot
compute it), ``best_baseline_ttft_p99_s``, ``vs_best_baseline`` (> 1: the candidate beats
it) and the artifacts ``best_baseline`` (its name) and ``baselines_<workload>.txt``.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from evaluators._base import EvalContext, Evaluator, result_from_call, text_beside
from evaluators.routing.baselines import BaselineReport, best_baseline, runner
from evaluators.routing.child import load_policy
from evaluators.routing.config import (
    SettingsError,
    baselines_dir,
    build_fleet_from,
    build_sim_config,
    build_slo,
    build_workload,
    check_settings,
    held_out_settings,
    mode_of,
    router_path,
)
from evaluators.routing.metrics import compute_metrics, diagnostics
from evaluators.routing.sched import HOOKS, DecisionError, replay_hooks
from evaluators.routing.sim import SimResult, replay, simulate
from evaluators.routing.workload import Workload
from optimizer.errors import ConfigError
from optimizer.records import CandidateState, EvalResult

ENTRY = "evaluators.routing.child:simulate"


class RoutingEvaluator(Evaluator):
    kind = "routing"
    preload = ("numpy",)

    def __init__(self, target: Any):
        super().__init__(target)
        self.settings = dict(target.evaluator)
        where = f"{target.rel_path}/target.toml"
        try:
            check_settings(self.settings)
            self.fleet = build_fleet_from(self.settings)
            self.sim_config = build_sim_config(self.settings)
            self.slo = build_slo(self.settings)
            self.mode = mode_of(self.settings)
            self.router = router_path(self.settings) if self.mode == "scheduler" else None
            self.baselines = baselines_dir(self.settings)
        except SettingsError as exc:
            raise ConfigError(str(exc), file=where, key=f"evaluator.{exc.key}") from None
        except (ValueError, TypeError) as exc:
            raise ConfigError(str(exc), file=where, key="evaluator") from None
        self.policy = target.editable[0]
        self.check_requests = int(self.settings.get("check_requests", 200))
        self.max_decision_ms = float(self.settings.get("max_decision_ms", 1.0))
        search = dict(self.settings.get("fleet_search", {}))
        self.search_metric = str(search.get("metric", "ttft_p99_s"))
        self.search_max = float(search.get("max", self.slo.ttft_s))
        self._workloads: dict[str, Workload] = {}
        self._reports: dict[str, BaselineReport | None] = {}
        self._log_key = "hooks" if self.mode == "scheduler" else "decisions"

    def prompt_text(self) -> str:
        return text_beside(__file__)

    def _workload(self, which: str) -> tuple[dict[str, Any], Workload]:
        raw = (held_out_settings(self.settings) if which == "held_out"
               else dict(self.settings.get("workload", {})))
        assert raw is not None
        if which not in self._workloads:
            self._workloads[which] = build_workload(raw)
        return raw, self._workloads[which]

    def _call(self, cand_dir: Path, ctx: EvalContext, stage: str, raw: dict[str, Any],
              **extra: Any) -> tuple[EvalResult | None, list[dict[str, Any]]]:
        payload = {"policy": self.policy, "settings": self.settings, "workload": raw,
                   "mode": self.mode, **extra}
        call = ctx.run(ENTRY, payload, workdir=cand_dir)
        failed = result_from_call(call, stage)
        if failed is not None:
            return failed, []
        if call.response.get("invalid"):
            return EvalResult(CandidateState.INVALID, call.response["invalid"], stage), []
        return None, list(call.response.get("runs", []))

    def _replay_hooks(self, workload: Workload, run: dict[str, Any], stage: str,
                      n: int) -> tuple[EvalResult | None, SimResult | None]:
        log = run.get("hooks")
        if (not isinstance(log, dict) or set(log) - set(HOOKS)
                or not all(isinstance(v, list) and all(type(x) is int for x in v)
                           for v in log.values())):
            return EvalResult(CandidateState.INVALID, "decision log is not a list of int "
                              f"answers per hook ({', '.join(HOOKS)})", stage), None
        assert self.router is not None
        hooks = replay_hooks(log)
        try:
            res = simulate(workload, self.fleet.first(n), load_policy(self.router),
                           self.sim_config, hooks=hooks)
        except DecisionError as exc:
            return EvalResult(CandidateState.INVALID, f"decision log does not replay: {exc}",
                              stage), None
        extra = hooks.leftovers()
        if extra:
            return EvalResult(CandidateState.INVALID, f"decision log has {extra} the "
                              "simulation never asked for", stage), None
        return None, res

    def _replay(self, workload: Workload, run: dict[str, Any], stage: str,
                size: int | None = None) -> tuple[EvalResult | None, SimResult | None]:
        n = size or len(self.fleet)
        if self.mode == "scheduler":
            bad, res = self._replay_hooks(workload, run, stage, n)
            if bad is not None or res is None:
                return bad, None
        else:
            decisions = run.get("decisions")
            if (not isinstance(decisions, list) or len(decisions) != len(workload)
                    or not all(type(d) is int and 0 <= d < n for d in decisions)):
                return EvalResult(CandidateState.INVALID,
                                  f"decision log is not one replica index in 0..{n - 1} per "
                                  f"request ({len(workload)} requests)", stage), None
            res = simulate(workload, self.fleet.first(n), replay(decisions), self.sim_config)
        unfinished = [i for i in range(len(workload))
                      if not res.dropped[i] and math.isnan(res.finish[i])]
        if unfinished:
            return EvalResult(CandidateState.INVALID,
                              f"{len(unfinished)} requests neither finished nor dropped "
                              f"(first: {unfinished[0]})", stage), None
        return None, res

    def correctness(self, cand_dir: Path, ctx: EvalContext) -> EvalResult:
        stage = "correctness"
        raw, workload = self._workload("train")
        workload = workload.head(self.check_requests)
        bad, runs = self._call(cand_dir, ctx, stage, raw, head=self.check_requests, runs=2)
        if bad is not None:
            return bad
        key = self._log_key
        if len(runs) != 2 or runs[0].get(key) != runs[1].get(key):
            first = runs[0].get(key, []) if runs else []
            second = runs[1].get(key, []) if len(runs) > 1 else []
            where = None
            if isinstance(first, list) and isinstance(second, list):
                where = next((i for i, (a, b) in enumerate(zip(first, second, strict=False))
                              if a != b), None)
            who = "the scheduler hooks" if self.mode == "scheduler" else "route()"
            return EvalResult(CandidateState.INVALID,
                              "two runs on the same requests decided differently"
                              + (f" (first at request {where})" if where is not None else "")
                              + f": {who} must be deterministic (seed any randomness)", stage)
        bad, _ = self._replay(workload, runs[0], stage)
        if bad is not None:
            return bad
        p99 = max(float(r["timing"]["p99_ms"]) for r in runs)
        if p99 > self.max_decision_ms:
            who = "the hooks'" if self.mode == "scheduler" else "route()"
            return EvalResult(CandidateState.INVALID,
                              f"{who} p99 decision time {p99:.3f} ms exceeds the "
                              f"{self.max_decision_ms} ms bound", stage,
                              metrics={"decision_p99_ms": p99})
        return EvalResult(CandidateState.VALID, "", stage, metrics={"decision_p99_ms": p99})

    def _measure(self, cand_dir: Path, ctx: EvalContext, which: str, stage: str) -> EvalResult:
        raw, workload = self._workload(which)
        want_fleet = any(o.metric == "min_replicas" for o in self.target.objectives)
        sizes = list(range(1, len(self.fleet) + 1)) if want_fleet else None
        bad, runs = self._call(cand_dir, ctx, stage, raw, sizes=sizes)
        if bad is not None:
            return bad
        by_size = {int(r.get("size", len(self.fleet))): r for r in runs}
        full = by_size.get(len(self.fleet))
        if full is None:
            return EvalResult(CandidateState.FAILED, "no run on the full fleet came back", stage)
        bad, res = self._replay(workload, full, stage)
        if bad is not None or res is None:
            return bad or EvalResult(CandidateState.FAILED, "replay failed", stage)
        metrics = compute_metrics(res, self.slo)
        metrics["decision_p99_ms"] = float(full["timing"]["p99_ms"])
        if want_fleet:
            metrics["min_replicas"] = float(len(self.fleet) + 1)  # even the full fleet misses
            for size in range(1, len(self.fleet) + 1):
                run = by_size.get(size)
                if run is None:
                    return EvalResult(CandidateState.FAILED, f"no run for {size} replicas", stage)
                bad, small = self._replay(workload, run, stage, size)
                if bad is not None or small is None:
                    return bad or EvalResult(CandidateState.FAILED, "replay failed", stage)
                if compute_metrics(small, self.slo)[self.search_metric] <= self.search_max:
                    metrics["min_replicas"] = float(size)
                    break
        objectives = []
        for obj in self.target.objectives:
            if obj.metric not in metrics or not math.isfinite(metrics[obj.metric]):
                return EvalResult(CandidateState.FAILED,
                                  f"objective metric {obj.metric!r} missing or not finite; "
                                  f"known: {sorted(metrics)}", stage, metrics=metrics)
            objectives.append(metrics[obj.metric])
        primary = self.target.primary.metric
        artifacts = {f"routing_{which}.txt": diagnostics(res)}
        report = self._baseline_report(which, workload)
        if report is not None:
            best = report.best_metrics
            metrics[f"best_baseline_{report.metric}"] = best[report.metric]
            metrics["best_baseline_ttft_p99_s"] = best["ttft_p99_s"]
            metrics["vs_best_baseline"] = report.versus(metrics[report.metric])
            artifacts["best_baseline"] = report.best
            artifacts[f"baselines_{which}.txt"] = report.table()
        return EvalResult(
            CandidateState.VALID, "", stage, metrics=metrics, objectives=tuple(objectives),
            samples={primary: (metrics[primary],)}, artifacts=artifacts,
        )

    def _baseline_report(self, which: str, workload: Workload) -> BaselineReport | None:
        """The best baseline on ``which`` (computed once per evaluator and workload)."""
        if self.baselines is None:
            return None
        if which not in self._reports:
            primary = self.target.primary
            run = runner(self.mode, workload, self.fleet, self.sim_config, self.router)
            self._reports[which] = best_baseline(self.baselines, run, self.slo,
                                                 primary.metric, primary.minimize)
        return self._reports[which]

    def performance(self, cand_dir: Path, ctx: EvalContext) -> EvalResult:
        return self._measure(cand_dir, ctx, "train", "performance")

    def held_out(self, cand_dir: Path, ctx: EvalContext) -> EvalResult | None:
        if "held_out" not in self.settings:
            return None
        return self._measure(cand_dir, ctx, "held_out", "held_out")
