"""The routing kind's deployment mode (``mode = "deploy"``): a plan judged by capacity per
dollar.

The candidate's program defines ``plan() -> dict`` (evaluators/routing/deploy/plan.py has
the form). It runs in the routing kind's sandboxed session (evaluators/routing/child.py:
Landlock, no processes, a private copy of the editable file, no target.toml), is asked once
per session, and only plain data comes back. Everything else happens here, in the
evaluator's process: the plan is checked against the target's model, GPU budget and
prompt range (a broken rule is INVALID with the rule and the numbers), the fleet is built
with the tensor/pipeline-parallel step model (deploy/instance.py) as each instance's step
model, a trusted class router sends each request to its prompt length's class, and the
arrival-rate scale of the workload is bisected for the highest load that keeps TTFT p90
and TBT p99 within the SLO (deploy/capacity.py).

Stages: correctness asks for the plan and checks it; performance asks again in a fresh
session (the same plan, or INVALID: a plan must not depend on the process) and measures
capacity per dollar on the training workload; held_out measures it on each held-out
workload (the objective there is their geometric mean); final_check writes the plan as
vLLM flags and the table against the best baseline (evidence.md, the pull branch's text)
and refuses a plan that loses to the best baseline on a held-out workload by more than the
bisection's resolution. Baselines: the plan files of ``baselines`` and a grid of
single-class plans (Vidur-Search's method: simulate every configuration, keep the best),
run in-process once per evaluator and workload.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from evaluators._base import EvalContext, Evaluator, valid_from_metrics
from evaluators.routing.baselines import editable_digest, load_module
from evaluators.routing.config import parse_settings
from evaluators.routing.deploy import settings as st
from evaluators.routing.deploy.capacity import Capacity, beyond_resolution, capacity, clip
from evaluators.routing.deploy.export import plan_markdown
from evaluators.routing.deploy.plan import Plan, PlanError, check_plan
from evaluators.routing.remote import PolicyStopped, _start
from evaluators.routing.workload import Workload
from optimizer.errors import ConfigError
from optimizer.records import CandidateState, EvalResult

ENTRY = "evaluators.routing.child:serve_policy"
PLAN_TIMEOUT_S = 10.0
METRICS = ("ttft_p50_s", "ttft_p90_s", "ttft_p99_s", "tbt_p99_s", "drops", "preemptions",
           "gpu_hours_per_mtok", "prefix_hit_ratio", "host_hit_ratio")


class DeployEvaluator(Evaluator):
    kind = "routing"
    preload = ("numpy",)

    def __init__(self, target: Any):
        super().__init__(target)
        where = f"{target.rel_path}/target.toml"
        self.cfg = parse_settings(target, st.parse)
        self.limits = self.cfg.limits
        self.baseline_plans = self._baselines(where)
        self._plans: dict[str, Any] = {}  # program digest -> the plan it returned
        self._workloads: dict[str, Workload] = {}
        self._caps: dict[tuple[str, str], Capacity] = {}  # (digest or baseline, workload)

    def prompt_text(self) -> str:
        return (Path(__file__).with_name("prompt.txt").read_text()
                + f"\nThis target: {self.limits.gpu_budget} x "
                  f"{'/'.join(self.limits.accelerators)} for {self.limits.model.name}; prompts "
                  f"up to {self.limits.max_prompt_tokens} tokens, outputs up to "
                  f"{self.limits.max_output_tokens}.\n")

    def _baselines(self, where: str) -> dict[str, Plan]:
        out: dict[str, Plan] = {}
        for path in [p for folder in self.cfg.baselines for p in sorted(folder.glob("*.py"))]:
            if path.stem in out:
                raise ConfigError(f"two baseline plans named {path.stem!r}", file=where,
                                  key="evaluator.baselines")
            module = load_module(path)  # our own files: trusted code
            try:
                out[path.stem] = check_plan(module.plan(), self.limits)
            except PlanError as exc:
                raise ConfigError(f"baseline {path.name}: {exc}", file=where,
                                  key="evaluator.baselines") from None
        for name, raw in st.grid_plans(self.cfg):
            try:
                out[name] = check_plan(raw, self.limits)
            except PlanError:
                continue  # a grid point that does not fit is skipped, as Vidur-Search does
        return out

    def _workload(self, label: str) -> Workload:
        if label not in self._workloads:
            case = self.cfg.cases[label]
            self._workloads[label] = clip(st.build(case.workload),
                                          self.limits.max_prompt_tokens,
                                          self.limits.max_output_tokens)
        return self._workloads[label]

    def _digest(self, cand_dir: Path) -> str:
        return editable_digest(cand_dir, self.target.editable)

    # -- the candidate: one plan per fresh session ---------------------------------------
    @contextmanager
    def _session(self, cand_dir: Path, ctx: EvalContext) -> Iterator[Any]:
        rel = self.target.editable[0]
        files = {r: Path(r).name for r in self.target.editable}
        payload = {"module": Path(rel).name, "functions": ["plan"]}
        with ctx.session_on_copy(cand_dir, files, ENTRY, payload, "deploy-plan-") as session:
            yield session

    def _ask(self, cand_dir: Path, ctx: EvalContext, stage: str) -> tuple[EvalResult | None,
                                                                            Plan | None]:
        """The plan of a fresh session, checked; the same program must return the same
        plan every time."""
        with self._session(cand_dir, ctx) as session:
            if not session.ok:
                state = CandidateState.TIMEOUT if session.timed_out else CandidateState.FAILED
                return EvalResult(state, session.error or "the session did not start",
                                  stage), None
            try:
                _start(session, min(ctx.timeout_s, 60.0), ctx.timeout_s)
            except PolicyStopped as exc:
                return EvalResult(exc.state, exc.reason, stage), None
            reply = session.request({"op": "plan"}, timeout_s=PLAN_TIMEOUT_S)
        if reply.timed_out:
            return EvalResult(CandidateState.TIMEOUT, f"plan() gave no answer within "
                              f"{PLAN_TIMEOUT_S:g} s", stage), None
        if not reply.ok:
            return EvalResult(CandidateState.FAILED, f"plan() failed: {reply.reason}"[:4000],
                              stage), None
        digest = self._digest(cand_dir)
        before = self._plans.setdefault(digest, reply.value)
        if before != reply.value:
            return EvalResult(CandidateState.INVALID, "plan() returned a different plan in a "
                              "fresh process: a plan must be plain data that does not "
                              "depend on the process, the clock or randomness", stage), None
        try:
            return None, check_plan(reply.value, self.limits)
        except PlanError as exc:
            return EvalResult(CandidateState.INVALID, f"plan: {exc}", stage), None

    # -- measurements --------------------------------------------------------------------
    def _capacity(self, key: str, plan: Plan, label: str) -> Capacity:
        if (key, label) not in self._caps:
            case = self.cfg.cases[label]
            self._caps[(key, label)] = capacity(plan, self.limits, self._workload(label),
                                                case.slo, case.scale_range,
                                                self.cfg.bisect_steps)
        return self._caps[(key, label)]

    def _best_baseline(self, label: str) -> tuple[str, Capacity] | None:
        caps = {name: self._capacity(f"baseline:{name}", p, label)
                for name, p in self.baseline_plans.items()}
        if not caps:
            return None
        name = max(caps, key=lambda n: (caps[n].per_usd, n))
        return name, caps[name]

    def _baseline_names(self) -> str:
        """The target's own baseline plans by name (the grid's are summed up apart)."""
        named = sorted(n for n in self.baseline_plans if not n.startswith("grid_"))
        return "the plans " + ", ".join(named) if named else "none of the target's own"

    def _baseline_table(self, label: str) -> str:
        rows = [(name, self._caps[(f"baseline:{name}", label)])
                for name in self.baseline_plans if (f"baseline:{name}", label) in self._caps]
        rows.sort(key=lambda r: -r[1].per_usd)
        lines = [f"workload {label}: capacity per dollar (req/s per $/h) of every baseline",
                 "baseline | GPUs | scale | req/s | req/s per $/h | TTFT p90 (s) | TBT p99 (s)"]
        lines += [f"{n} | {c.gpus} | {c.scale:.3f} | {c.rps:.3f} | {c.per_usd:.4f} | "
                  f"{c.metrics['ttft_p90_all_s']:.3f} | {c.metrics['tbt_p99_s']:.3f}"
                  for n, c in rows]
        return "\n".join(lines) + "\n"

    def _metrics(self, cap: Capacity, label: str, suffix: str = "") -> dict[str, float]:
        m = {f"capacity_per_usd{suffix}": cap.per_usd, f"capacity_scale{suffix}": cap.scale,
             f"capacity_rps{suffix}": cap.rps, f"usd_per_hour{suffix}": cap.usd_per_hour,
             f"gpus{suffix}": float(cap.gpus)}
        m.update({f"{k}{suffix}": float(cap.metrics[k]) for k in METRICS})
        best = self._best_baseline(label)
        if best is not None:
            m[f"best_baseline_capacity_per_usd{suffix}"] = best[1].per_usd
            m[f"vs_best_baseline{suffix}"] = (cap.per_usd / best[1].per_usd
                                              if best[1].per_usd > 0 else math.inf)
        return m

    # -- stages --------------------------------------------------------------------------
    def correctness(self, cand_dir: Path, ctx: EvalContext) -> EvalResult:
        bad, plan = self._ask(cand_dir, ctx, "correctness")
        if bad is not None or plan is None:
            return bad or EvalResult(CandidateState.FAILED, "no plan", "correctness")
        return EvalResult(CandidateState.VALID, "", "correctness", metrics={
            "gpus": float(plan.gpus), "classes": float(len(plan.classes))},
            artifacts={"plan.md": plan_markdown(plan, self.limits)})

    def performance(self, cand_dir: Path, ctx: EvalContext) -> EvalResult:
        stage = "performance"
        bad, plan = self._ask(cand_dir, ctx, stage)
        if bad is not None or plan is None:
            return bad or EvalResult(CandidateState.FAILED, "no plan", stage)
        label = self.cfg.train
        cap = self._capacity(self._digest(cand_dir), plan, label)
        metrics = self._metrics(cap, label)
        best = self._best_baseline(label)
        artifacts = {"plan.md": plan_markdown(plan, self.limits),
                     "capacity.txt": _tried(cap), f"baselines_{label}.txt":
                     self._baseline_table(label)}
        if best is not None:
            artifacts["best_baseline"] = best[0]
        return self._result(metrics, stage, artifacts)

    def _result(self, metrics: dict[str, float], stage: str,
                artifacts: dict[str, str]) -> EvalResult:
        return valid_from_metrics(self.target, metrics, stage, artifacts=artifacts)

    def held_out(self, cand_dir: Path, ctx: EvalContext) -> EvalResult | None:
        if not self.cfg.held_out:
            return None
        stage = "held_out"
        bad, plan = self._ask(cand_dir, ctx, stage)
        if bad is not None or plan is None:
            return bad or EvalResult(CandidateState.FAILED, "no plan", stage)
        metrics: dict[str, float] = {}
        values = []
        for label in self.cfg.held_out:
            cap = self._capacity(self._digest(cand_dir), plan, label)
            metrics.update(self._metrics(cap, label, f"/{label}"))
            values.append(cap.per_usd)
        metrics["capacity_per_usd"] = _geomean(values)
        return self._result(metrics, stage, {f"baselines_{label}.txt": self._baseline_table(label)
                                             for label in self.cfg.held_out})

    def final_check(self, cand_dir: Path, ctx: EvalContext) -> EvalResult | None:
        """The plan as vLLM flags and its table against the best baseline per workload
        (evidence.md); INVALID when a held-out workload's best baseline does better by
        more than the bisection's resolution."""
        stage = "final_check"
        bad, plan = self._ask(cand_dir, ctx, stage)
        if bad is not None or plan is None:
            return bad or EvalResult(CandidateState.FAILED, "no plan", stage)
        slack = self.cfg.resolution
        rows, lost = [], []
        for which, label in [("training", self.cfg.train)] + [("held-out", h)
                                                               for h in self.cfg.held_out]:
            cap = self._capacity(self._digest(cand_dir), plan, label)
            best = self._best_baseline(label)
            name, value = (best[0], best[1].per_usd) if best else ("-", math.nan)
            ratio = cap.per_usd / value if value and value > 0 else math.inf
            rows.append(f"| {label} | {which} | {cap.per_usd:.4f} | {cap.scale:.3f} | "
                        f"{cap.gpus} | {name} | {value:.4f} | {ratio:.3f} |")
            if which == "held-out" and beyond_resolution(ratio, slack):
                lost.append(f"{label}: {ratio:.3f}x {name}'s capacity per dollar")
        text = ("### The deployment plan\n\n" + plan_markdown(plan, self.limits)
                + "\n### Capacity per dollar against the best baseline, per workload\n\n"
                "Requests per second served within the SLO (TTFT p90, TBT p99) per dollar an "
                f"hour; baselines: {self._baseline_names()} and the best of a grid of "
                "single-class plans.\n\n"
                "| workload | set | winner | scale | GPUs | best baseline | its value | "
                "winner / best |\n|---|---|---|---|---|---|---|---|\n" + "\n".join(rows) + "\n")
        if lost:
            return EvalResult(CandidateState.INVALID, "loses to the best baseline on "
                              "held-out workload " + "; ".join(lost), stage,
                              artifacts={"evidence.md": text})
        return EvalResult(CandidateState.VALID, f"held-out: at least the best baseline's "
                          f"capacity per dollar (within {slack - 1:.1%}) on "
                          f"{len(self.cfg.held_out)} workloads", stage,
                          artifacts={"evidence.md": text})


def _geomean(values: list[float]) -> float:
    if not values or min(values) <= 0:
        return 0.0
    return math.exp(sum(math.log(v) for v in values) / len(values))


def _tried(cap: Capacity) -> str:
    steps = ", ".join(f"x{s:.3f} {'meets' if ok else 'misses'}" for s, ok in cap.tried)
    return (f"capacity: rate scale {cap.scale:.4f} ({cap.rps:.3f} req/s) on {cap.gpus} GPUs "
            f"at {cap.usd_per_hour:.2f} $/h: {cap.per_usd:.4f} req/s per $/h\n"
            f"bisection: {steps}\n")


__all__ = ["DeployEvaluator"]
