"""The ``routing`` kind: a candidate policy judged in the cluster simulator.

Two modes (``[evaluator] mode``): ``router`` (the default), where the candidate is
``route(request, view)``, and ``scheduler``, where it is the replica scheduler's
``schedule``/``chunk_size``/``evict`` hooks (see evaluators/routing/sched.py) behind a
fixed, trusted router.

The boundary: the simulator, the workload, the settings and the clock stay in this
process (the engine's; it never imports candidate code). The candidate's policy runs in a
sandboxed session (evaluators/routing/child.py) that the simulator asks once per decision
(evaluators/routing/remote.py): the inputs of that decision cross by value, the answer
comes back, and the round trip is timed here. The session's folder holds a copy of the
editable files only (no target.toml), its process reads nothing of the project but code,
and every run gets a fresh session whose folders are deleted when it ends.

Stages:
- correctness: one run of the whole training workload on the full fleet; every decision
  is a valid answer, every request finishes or is counted as dropped, and the p99 of the
  decision times measured here stays under ``max_decision_ms``.
- performance: a second run of the training workload in a fresh session; every decision
  must equal the first run's (determinism over the whole run), then the metrics and
  objectives from target.toml (``ttft_p99_s``, ``goodput_rps`` (maximise),
  ``min_replicas``, or any metric of metrics.compute_metrics).
- held_out: the same on ``held_out`` (another seed, window or trace).

With ``sweep`` (a training set: workload families x rate scales, evaluators/routing/
sweep.py) the stages run every workload of the set and the objective ``vs_baselines``
aggregates the candidate against the best baseline on each; ``held_out_sweep`` is the
held-out set: ``held_out`` aggregates it the same way, and ``final_check`` (before a pull
branch) asks the candidate to beat the best baseline on each of its workloads where the
baselines differ by more than 5%, and writes the table (``evidence.md``) of both sets.

Every run of a program (by the digest of its files) on a workload and fleet size is
compared with the last one this evaluator made, so repeated measurements check
determinism too. Both measuring stages also report the best baseline of that workload
(the policies of ``baselines``, run here in-process once per evaluator: they are our
code): ``best_baseline_<metric>`` for the ranking metric (the primary objective, or
ttft_p99_s when the baselines cannot compute it), ``best_baseline_ttft_p99_s``,
``vs_best_baseline`` (> 1: the candidate beats it) and the artifacts ``best_baseline``
(its name) and ``baselines_<workload>.txt``.
"""

from __future__ import annotations

import hashlib
import math
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evaluators._base import EvalContext, Evaluator, text_beside
from evaluators.routing.baselines import BaselineReport, best_baseline, load_policy, runner
from evaluators.routing.config import (
    Case,
    SettingsError,
    baselines_dir,
    build_fleet_from,
    build_sim_config,
    build_slo,
    build_workload,
    case_fleet,
    check_settings,
    held_out_settings,
    mode_of,
    router_path,
    sweep_cases,
)
from evaluators.routing.metrics import compute_metrics, diagnostics
from evaluators.routing.remote import PolicyStopped, RemoteHooks, RemoteRouter, replay
from evaluators.routing.sched import HOOKS, DecisionError, Hooks
from evaluators.routing.sim import SimResult, simulate
from evaluators.routing.sweep import Row, losses, score, spread, table, worst_row
from evaluators.routing.workload import Workload
from optimizer.errors import ConfigError
from optimizer.records import CandidateState, EvalResult

ENTRY = "evaluators.routing.child:serve_policy"
_KEEP_RUNS = 32  # runs kept for the determinism check (Mooncake's hour: about 6 MB each)
MAXIMIZED = ("goodput_rps", "slo_attainment", "throughput_tok_s", "prefix_hit_ratio")
SETS = {"train": "training", "held_out": "held-out"}


@dataclass
class _Run:
    """A finished run: the trusted simulation and what the candidate was asked and said."""

    result: SimResult
    timing: dict[str, float]
    messages: list[tuple[str, bytes]]
    answers: list[Any]
    checked: bool = False  # a second session has answered the same questions the same way


class RoutingEvaluator(Evaluator):
    kind = "routing"
    preload = ("numpy",)

    def __new__(cls, target: Any) -> Any:
        """``mode = "deploy"``: the deployment mode's evaluator (a plan, not a policy;
        evaluators/routing/deploy/evaluator.py); ``mode = "split"``: the client/server
        split mode's (evaluators/routing/split/evaluator.py)."""
        if cls is RoutingEvaluator and target.evaluator.get("mode") == "deploy":
            from evaluators.routing.deploy.evaluator import DeployEvaluator

            return DeployEvaluator(target)
        if cls is RoutingEvaluator and target.evaluator.get("mode") == "split":
            from evaluators.routing.split.evaluator import SplitEvaluator

            return SplitEvaluator(target)
        return super().__new__(cls)

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
            self.cases: dict[str, list[Case]] = {
                which: sweep_cases(self.settings, key)
                for which, key in (("train", "sweep"), ("held_out", "held_out_sweep"))
                if key in self.settings}
        except SettingsError as exc:
            raise ConfigError(str(exc), file=where, key=f"evaluator.{exc.key}") from None
        except (ValueError, TypeError) as exc:
            raise ConfigError(str(exc), file=where, key="evaluator") from None
        self.policy = target.editable[0]
        self.functions = list(HOOKS) if self.mode == "scheduler" else ["route"]
        self.max_decision_ms = float(self.settings.get("max_decision_ms", 1.0))
        # one answer 100x over the bound (at least 2 s) is a hang: the process is killed
        self.call_timeout_s = max(2.0, 0.1 * self.max_decision_ms)
        search = dict(self.settings.get("fleet_search", {}))
        self.search_metric = str(search.get("metric", "ttft_p99_s"))
        self.search_max = float(search.get("max", self.slo.ttft_s))
        self.compare_metric = str(self.settings.get("compare", "ttft_p99_s"))
        self._case = {c.label: c for cases in self.cases.values() for c in cases}
        self._rows: dict[tuple[str, str], Row] = {}  # (program digest, workload) -> row
        # the final check stops at the first held-out loss (a night tries up to 8 contenders
        # and their reductions); bench/routing_check.py runs every workload for the table
        self.stop_at_first_loss = True
        self._workloads: dict[str, Workload] = {}
        self._reports: dict[str, BaselineReport | None] = {}
        self._runs: OrderedDict[tuple[str, str, int], _Run] = OrderedDict()

    def prompt_text(self) -> str:
        return text_beside(__file__)

    def _fleet_of(self, which: str) -> Any:
        case = self._case.get(which)
        return case_fleet(self.settings, case) if case is not None else self.fleet

    def _workload(self, which: str) -> Workload:
        if which not in self._workloads:
            case = self._case.get(which)
            raw = (dict(case.workload) if case is not None
                   else held_out_settings(self.settings) if which == "held_out"
                   else dict(self.settings.get("workload", {})))
            assert raw is not None
            self._workloads[which] = build_workload(raw)
        return self._workloads[which]

    def _digest(self, cand_dir: Path) -> str:
        h = hashlib.sha256()
        for rel in sorted(self.target.editable):
            path = cand_dir / rel
            h.update(rel.encode() + b"\0" + (path.read_bytes() if path.is_file() else b"")
                     + b"\0")
        return h.hexdigest()

    # -- runs: the trusted simulator asking a fresh session --------------------------------
    @contextmanager
    def _session(self, cand_dir: Path, ctx: EvalContext) -> Iterator[Any]:
        """A fresh session in a private folder holding a copy of the editable files only;
        the folder is deleted when it ends, so nothing of it reaches the next session."""
        files = {rel: _within(rel) for rel in self.target.editable}
        payload = {"module": _within(self.policy), "functions": self.functions}
        with ctx.session_on_copy(cand_dir, files, ENTRY, payload, "routing-run-") as session:
            yield session

    @staticmethod
    def _not_started(session: Any, stage: str) -> EvalResult | None:
        if session.ok:
            return None
        state = CandidateState.TIMEOUT if session.timed_out else CandidateState.FAILED
        return EvalResult(state, session.error or "the policy's session did not start", stage)

    def _live(self, cand_dir: Path, ctx: EvalContext, stage: str, which: str,
              size: int) -> tuple[EvalResult | None, _Run | None]:
        """One run of ``which`` on the first ``size`` replicas, checked and kept; a run of
        the same program on the same requests made before must have decided the same."""
        workload = self._workload(which)
        with self._session(cand_dir, ctx) as session:
            bad = self._not_started(session, stage)
            if bad is not None:
                return bad, None
            bound_s, deadline_s = self.max_decision_ms / 1e3, ctx.timeout_s
            fleet = self._fleet_of(which).first(size)
            remote: RemoteHooks | RemoteRouter
            if self.mode == "scheduler":
                remote = RemoteHooks(session, bound_s=bound_s, deadline_s=deadline_s,
                                     call_timeout_s=self.call_timeout_s)
            else:
                remote = RemoteRouter(session, bound_s=bound_s, deadline_s=deadline_s,
                                      call_timeout_s=self.call_timeout_s,
                                      decisions=len(workload))
            try:
                remote.start()
                if isinstance(remote, RemoteHooks):
                    assert self.router is not None
                    hooks = Hooks(remote.schedule, remote.chunk_size, remote.evict)
                    res = simulate(workload, fleet, load_policy(self.router), self.sim_config,
                                   hooks=hooks)
                else:
                    res = simulate(workload, fleet, remote, self.sim_config)
                timing = remote.timing()
            except DecisionError as exc:  # a wrong answer, not a crash
                return EvalResult(CandidateState.INVALID, str(exc), stage), None
            except PolicyStopped as exc:
                return EvalResult(exc.state, exc.reason, stage), None
            finally:
                remote.close()
        unfinished = [i for i in range(len(workload))
                      if not res.dropped[i] and math.isnan(res.finish[i])]
        if unfinished:
            return EvalResult(CandidateState.INVALID,
                              f"{len(unfinished)} requests neither finished nor dropped "
                              f"(first: {unfinished[0]})", stage), None
        who = "the hooks'" if self.mode == "scheduler" else "route()"
        metrics = {"decision_p99_ms": timing["p99_ms"], "decision_cpu_ms": timing["cpu_ms"]}
        if timing["p99_ms"] > self.max_decision_ms:
            return EvalResult(CandidateState.INVALID,
                              f"{who} p99 decision time {timing['p99_ms']:.3f} ms exceeds the "
                              f"{self.max_decision_ms:g} ms bound (measured outside the "
                              "policy's process)", stage, metrics=metrics), None
        if timing["cpu_ms"] > self.max_decision_ms:
            return EvalResult(CandidateState.INVALID,
                              f"the policy's process used {timing['cpu_ms']:.3f} ms of CPU per "
                              f"decision over the run, over the {self.max_decision_ms:g} ms "
                              "bound (work between requests counts too)", stage,
                              metrics=metrics), None
        run = _Run(res, timing, remote.messages, remote.answers)
        key = (self._digest(cand_dir), which, size)
        before = self._runs.get(key)
        self._keep(key, run)
        if before is not None:
            where = next((i for i, (a, b) in enumerate(zip(before.messages, run.messages,
                                                           strict=False))
                          if a != b), None)
            if where is None and before.answers != run.answers:
                where = next((i for i, (a, b) in enumerate(zip(before.answers, run.answers,
                                                               strict=False))
                              if a != b or type(a) is not type(b)),
                             min(len(before.answers), len(run.answers)))
            if where is not None:
                return self._nondeterministic(where, len(run.answers), stage), None
            run.checked = True
        return None, run

    def _keep(self, key: tuple[str, str, int], run: _Run) -> None:
        self._runs[key] = run
        self._runs.move_to_end(key)
        while len(self._runs) > _KEEP_RUNS:
            self._runs.popitem(last=False)

    def _second(self, cand_dir: Path, ctx: EvalContext, stage: str,
                run: _Run) -> EvalResult | None:
        """A fresh session answers the first run's questions, one per round trip: every
        answer must be the same (determinism over the whole run)."""
        with self._session(cand_dir, ctx) as session:
            bad = self._not_started(session, stage)
            if bad is not None:
                return bad
            scheduler = self.mode == "scheduler"

            def where(k: int, fn: str) -> str:
                return f"(hook call {k})" if scheduler else f"for request {k}"

            try:
                first = replay(session, run.messages, run.answers, where=where,
                               call_timeout_s=self.call_timeout_s, deadline_s=ctx.timeout_s)
            except PolicyStopped as exc:
                return EvalResult(exc.state, exc.reason, stage)
        if first is not None:
            return self._nondeterministic(first, len(run.answers), stage)
        run.checked = True
        return None

    def _nondeterministic(self, where: int, n: int, stage: str) -> EvalResult:
        at, who = ((f"hook call {where}", "the scheduler hooks") if self.mode == "scheduler"
                   else (f"request {where}", "route()"))
        return EvalResult(CandidateState.INVALID,
                          f"two runs on the same requests, in fresh processes, decided "
                          f"differently (first at {at} of {n}): {who} must be "
                          "deterministic (seed any randomness; keep no state outside the "
                          "process)", stage)

    @staticmethod
    def _timing(run: _Run) -> dict[str, float]:
        return {"decision_p99_ms": run.timing["p99_ms"],
                "decision_cpu_ms": run.timing["cpu_ms"]}

    @staticmethod
    def _timing_text(run: _Run) -> str:
        t = run.timing
        how = (f"the policy process's CPU time in each request ({t['waits']:.0f} decisions "
               "that waited timed by the clock)" if t["by_cpu"]
               else "the round trip timed here, less this side's run-queue wait (other "
                    "threads worked, or the process is not confined)")
        return (f"decisions: {len(run.answers)}\n"
                f"decision time (ms; {how}): "
                f"p50 {t['p50_ms']:.4f}, p99 {t['p99_ms']:.4f}, max {t['max_ms']:.4f}\n"
                f"round trip less this side's wait, p99 (ms): {t['clock_p99_ms']:.4f}\n"
                f"the policy process's CPU per decision over the run: {t['cpu_ms']:.4f} ms\n"
                f"second session decided the same: {'yes' if run.checked else 'not yet'}\n")

    # -- stages --------------------------------------------------------------------------
    def correctness(self, cand_dir: Path, ctx: EvalContext) -> EvalResult:
        stage = "correctness"
        run: _Run | None = None
        for which in self._labels("train"):
            bad, run = self._live(cand_dir, ctx, stage, which, len(self._fleet_of(which)))
            if bad is not None or run is None:
                bad = bad or EvalResult(CandidateState.FAILED, "the run gave no result", stage)
                if which != "train":
                    bad = EvalResult(bad.state, f"on workload {which}: {bad.reason}", stage,
                                     metrics=bad.metrics)
                return bad
        assert run is not None
        return EvalResult(CandidateState.VALID, "", stage, metrics=self._timing(run),
                          artifacts={"decision_times.txt": self._timing_text(run)})

    def _labels(self, which: str) -> list[str]:
        """The workloads of a set: its sweep's, or the one workload ``which``."""
        return [c.label for c in self.cases[which]] if which in self.cases else [which]

    def _checked(self, cand_dir: Path, ctx: EvalContext, which: str,
                 stage: str) -> tuple[EvalResult | None, _Run | None]:
        """The run of ``which`` on its full fleet: a first session's, or the correctness
        stage's run with its second session now, or the same result again."""
        size = len(self._fleet_of(which))
        full = self._runs.get((self._digest(cand_dir), which, size))
        if full is None:
            bad, full = self._live(cand_dir, ctx, stage, which, size)
        elif not full.checked:  # the correctness stage's run: its second session now
            bad = self._second(cand_dir, ctx, stage, full)
        else:  # two sessions have decided it the same way: the same result again
            bad = None
        if bad is not None or full is None:
            return bad or EvalResult(CandidateState.FAILED, "the run gave no result", stage), None
        return None, full

    def _measure(self, cand_dir: Path, ctx: EvalContext, which: str, stage: str) -> EvalResult:
        if which in self.cases:
            return self._measure_sweep(cand_dir, ctx, which, stage)
        workload = self._workload(which)
        bad, full = self._checked(cand_dir, ctx, which, stage)
        if bad is not None or full is None:
            return bad or EvalResult(CandidateState.FAILED, "the run gave no result", stage)
        res = full.result
        metrics = compute_metrics(res, self.slo)
        metrics.update(self._timing(full))
        if any(o.metric == "min_replicas" for o in self.target.objectives):
            metrics["min_replicas"] = float(len(self.fleet) + 1)  # even the full fleet misses
            for size in range(1, len(self.fleet) + 1):
                if size == len(self.fleet):
                    small = res
                else:
                    bad, run = self._live(cand_dir, ctx, stage, which, size)
                    if bad is not None or run is None:
                        return bad or EvalResult(CandidateState.FAILED, "no result", stage)
                    small = run.result
                if compute_metrics(small, self.slo)[self.search_metric] <= self.search_max:
                    metrics["min_replicas"] = float(size)
                    break
        objectives = self._objectives(metrics)
        if isinstance(objectives, str):
            return EvalResult(CandidateState.FAILED, objectives, stage, metrics=metrics)
        primary = self.target.primary.metric
        artifacts = {f"routing_{which}.txt": diagnostics(res),
                     "decision_times.txt": self._timing_text(full)}
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

    def _objectives(self, metrics: Mapping[str, float],
                    over: str = "") -> tuple[float, ...] | str:
        """The target's objective values in ``metrics``, or why one is missing."""
        for obj in self.target.objectives:
            if obj.metric not in metrics or not math.isfinite(metrics[obj.metric]):
                return (f"objective metric {obj.metric!r} missing or not finite{over}; "
                        f"known: {sorted(metrics)}")
        return tuple(metrics[obj.metric] for obj in self.target.objectives)

    def _baseline_report(self, which: str, workload: Workload) -> BaselineReport | None:
        """The best baseline on ``which`` (computed once per evaluator and workload; a
        sweep's workloads are ranked by ``compare``)."""
        if self.baselines is None:
            return None
        if which not in self._reports:
            metric, minimize = self.target.primary.metric, self.target.primary.minimize
            if which in self._case:
                metric = self.compare_metric
                minimize = metric not in MAXIMIZED
            run = runner(self.mode, workload, self._fleet_of(which), self.sim_config,
                         self.router)
            self._reports[which] = best_baseline(self.baselines, run, self.slo, metric,
                                                 minimize)
        return self._reports[which]

    # -- sweeps: a set of workloads against the best baseline on each ----------------------
    def _row(self, cand_dir: Path, ctx: EvalContext, which: str, label: str,
             stage: str) -> tuple[EvalResult | None, Row | None, SimResult | None]:
        case = self._case[label]
        fleet = case.fleet_label or "target's"
        digest = self._digest(cand_dir)
        if (digest, label) in self._rows:  # measured (and checked) before: the same row
            return None, self._rows[(digest, label)], None
        if case.missing():
            return None, Row(SETS[which], label, fleet, 0, self.compare_metric, True, math.nan,
                             "-", math.nan, 0.0, missing=case.missing()), None
        bad, full = self._checked(cand_dir, ctx, label, stage)
        if bad is not None or full is None:
            bad = bad or EvalResult(CandidateState.FAILED, "the run gave no result", stage)
            return EvalResult(bad.state, f"on workload {label}: {bad.reason}", stage,
                              metrics=bad.metrics), None, None
        workload = self._workload(label)
        report = self._baseline_report(label, workload)
        if report is None:
            raise ConfigError("a sweep needs baselines to compare with (baselines = '' "
                              "switches them off)", file=f"{self.target.rel_path}/target.toml",
                              key="evaluator.baselines")
        value = compute_metrics(full.result, self.slo)[report.metric]
        values = [m[report.metric] for m in report.metrics.values()]
        row = Row(SETS[which], label, fleet, len(workload), report.metric, report.minimize,
                  value, report.best, report.best_metrics[report.metric],
                  spread(values, report.minimize))
        self._rows[(digest, label)] = row
        return None, row, full.result

    def _measure_sweep(self, cand_dir: Path, ctx: EvalContext, which: str,
                       stage: str) -> EvalResult:
        metrics: dict[str, float] = {}
        artifacts: dict[str, str] = {}
        rows: list[Row] = []
        for label in self._labels(which):
            bad, row, res = self._row(cand_dir, ctx, which, label, stage)
            if bad is not None or row is None:
                return bad or EvalResult(CandidateState.FAILED, "no result", stage)
            rows.append(row)
            if row.missing:
                continue
            metrics[f"{row.metric}/{label}"] = row.candidate
            metrics[f"vs_best_baseline/{label}"] = row.versus
            if res is not None and which == "train":
                artifacts[f"routing_{label}.txt"] = diagnostics(res)
        ran = [r for r in rows if not r.missing]
        if not ran:
            return EvalResult(CandidateState.FAILED, f"no workload of the {SETS[which]} set "
                              "could run: " + "; ".join(r.missing for r in rows), stage)
        metrics.update(score([r.versus for r in ran]))
        artifacts[f"sweep_{which}.md"] = table(rows)
        objectives = self._objectives(metrics, " over a sweep")
        if isinstance(objectives, str):
            return EvalResult(CandidateState.FAILED, objectives, stage, metrics=metrics)
        primary = self.target.primary.metric
        return EvalResult(CandidateState.VALID, "", stage, metrics=metrics,
                          objectives=tuple(objectives),
                          samples={primary: (metrics[primary],)}, artifacts=artifacts)

    def final_check(self, cand_dir: Path, ctx: EvalContext) -> EvalResult | None:
        """Before a pull branch: the candidate beats the best baseline on every held-out
        workload where the baselines differ by more than 5%; ``evidence.md`` is the table
        of both sets (the pull branch's text carries it)."""
        if "held_out" not in self.cases:
            return None
        stage = "final_check"
        rows: list[Row] = []
        for which in ("train", "held_out"):
            for label in self._labels(which):
                bad, row, _ = self._row(cand_dir, ctx, which, label, stage)
                if bad is not None or row is None:
                    return bad or EvalResult(CandidateState.FAILED, "no result", stage)
                rows.append(row)
                if losses([row]) and self.stop_at_first_loss:  # one loss decides
                    break
        lost = losses(rows)
        held = [r for r in rows if r.set == "held-out"]
        counts = (f"{sum(r.verdict == 'win' for r in held)} held-out workloads won, "
                  f"{sum(r.tie for r in held if not r.missing)} ties, "
                  f"{sum(bool(r.missing) for r in held)} not run")
        worst = worst_row(rows)
        head = (f"worst row: {worst.workload} ({worst.set}, {worst.fleet}) {worst.versus:.3f}x "
                f"the best baseline ({worst.best})" if worst is not None else "")
        text = ("### Against the best production baseline, per workload\n\n"
                f"`{rows[0].metric}` of the winner and of the best baseline on each workload "
                "(winner vs best: the best baseline's value over the winner's where lower "
                "is better, the winner's over the best's where higher is better; above 1 "
                "the winner is better; a tie: every baseline within 5% of the others, load "
                "does not matter there). Training: the objective's "
                "sweep; held-out: families, windows and loads the search never saw.\n\n"
                + table(rows) + f"\n{counts}; {head}.\n")
        artifacts = {"evidence.md": text}
        if lost:
            r = lost[0]
            left = len(self._labels("held_out")) - len(held)
            more = (f"the check stops at the first loss; {left} held-out workload(s) not run"
                    if left else f"{len(lost)} held-out loss(es) in all")
            return EvalResult(CandidateState.INVALID,
                              f"does not beat the best production baseline on held-out "
                              f"workload {r.workload} ({r.fleet} fleet): {r.versus:.3f}x "
                              f"{r.best}'s {r.metric}, and the baselines differ by "
                              f"{r.spread:.0%} there ({more})", stage, artifacts=artifacts)
        return EvalResult(CandidateState.VALID,
                          f"held-out against the best production baseline: {counts}; {head}",
                          stage, artifacts=artifacts)

    def confirmation_evaluations(self, repeats: int) -> float:
        """The held-out set's runs (candidate and seed) and its baselines, in training
        evaluations (two sessions over the training set)."""
        if "held_out" not in self.cases:
            return super().confirmation_evaluations(repeats)
        train = sum(len(self._workload(label)) for label in self._labels("train"))
        held = sum(len(self._workload(c.label)) for c in self.cases["held_out"]
                   if not c.missing())
        n_base = len(list(self.baselines.glob("*.py"))) if self.baselines else 0
        # a baseline decides in-process: about a quarter of a session's round trip
        return 2.0 + (2 * held + 0.25 * n_base * held) / max(2 * train, 1)

    def performance(self, cand_dir: Path, ctx: EvalContext) -> EvalResult:
        return self._measure(cand_dir, ctx, "train", "performance")

    def held_out(self, cand_dir: Path, ctx: EvalContext) -> EvalResult | None:
        if "held_out" not in self.settings and "held_out" not in self.cases:
            return None
        return self._measure(cand_dir, ctx, "held_out", "held_out")


def _within(rel: str) -> str:
    """An editable file's place in a session folder: a policy elsewhere in the repository
    ("../../router/policy.py") sits at "router/policy.py" there, never above the folder."""
    import posixpath

    parts = posixpath.normpath(rel.replace("\\", "/")).split("/")
    while parts and parts[0] == "..":
        parts.pop(0)
    return "/".join(parts)
