"""The ``harness`` kind: an agent harness's context policy replayed on recorded trajectories.

The candidate is ``plan(view) -> plan``: at each LLM call of a recorded agent trajectory it
says which earlier segments the prompt shows verbatim, stubbed, cut to a head or folded into
a summary, and where cache breakpoints sit (evaluators/harness/plan.py). It returns
references, never text; the trusted side renders every prompt, counts its tokens with a real
BPE tokenizer, bills it under two providers' documented cache rules and checks it against
the information-loss oracle (evaluators/harness/replay.py).

The boundary: trajectories, tokens, oracle labels, prices and the clock stay in this process
(the engine's). The policy runs in a sandboxed session (evaluators/harness/child.py, its
own session entry), in a private folder holding a copy of the editable files only,
and is asked once per call with that call's view (the past segments' metadata and the
previous plan; each request carries the segments that arrived since the previous call, the
session keeps the rest); the future is never in its process. Static rules
(evaluators/harness/static.py) keep it from importing anything that reads files or the
project's code. A second, fresh session answers every view again in a shuffled order: a
plan that depends on anything but its view (state carried between calls, the order of the
questions) is INVALID.

Stages:
- correctness: the training workload replayed; every plan keeps the rules, every prompt
  fits the window, the p99 answer time stays under ``max_decision_ms``, the second session
  agrees, and the recoveries per task are no more than the best baseline's (the cheapest
  baseline by the primary ``usd_per_task``);
- performance: the metrics of that replay (cost is exact: nothing is timed), with the best
  baseline's next to them (``best_baseline_usd_per_task``, ``vs_best_baseline`` > 1: cheaper);
- held_out: the same on tasks the search never saw (recorded trajectories split by task;
  a second synthetic set).
"""

from __future__ import annotations

import hashlib
import itertools
import random
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evaluators._base import (
    EvalContext,
    Evaluator,
    read_source,
    text_beside,
    valid_from_metrics,
)
from evaluators.harness import synthetic
from evaluators.harness.config import Settings, SettingsError, parse
from evaluators.harness.oracle import label
from evaluators.harness.plan import PlanError
from evaluators.harness.replay import Replay, summarise
from evaluators.harness.static import violations
from evaluators.harness.trajectories import (
    Tokenized,
    Trajectory,
    held_out,
    load_recorded,
    load_taubench,
)
from optimizer.errors import ConfigError
from optimizer.records import CandidateState, EvalResult
from optimizer.sandbox.loader import load_module

SERVE = "evaluators.harness.child:serve"
SECOND_OPINION_BATCH = 256  # views a request when the policy is asked again
SHARED = ("tools",)  # view keys the same for every call of a replay: sent once a session
_loads = itertools.count()


class _Stopped(Exception):
    def __init__(self, state: CandidateState, reason: str):
        super().__init__(reason)
        self.state, self.reason = state, reason


@dataclass(frozen=True)
class BaselineReport:
    best: str
    metrics: dict[str, dict[str, float]]
    failed: dict[str, str]

    def table(self) -> str:
        lines = [f"{'baseline':24s} {'usd/task':>10s} {'cache hit':>9s} {'recoveries':>10s}"]
        for name, m in sorted(self.metrics.items(), key=lambda kv: kv[1]["usd_per_task"]):
            lines.append(f"{name:24s} {m['usd_per_task']:10.5f} {m['cache_hit_share']:9.3f} "
                         f"{m['recoveries_per_task']:10.3f}")
        lines += [f"{name:24s} not run: {why}" for name, why in sorted(self.failed.items())]
        return "\n".join(lines) + f"\nbest: {self.best}\n"


def load_plan(path: Path) -> Any:
    """A trusted baseline's ``plan`` (our own files only; candidates run in a session)."""
    name = f"_harness_baseline_{next(_loads)}"
    module = load_module(path, name)
    fn = getattr(module, "plan", None)
    if not callable(fn):
        raise AttributeError(f"{path.name} must define plan(view)")
    return fn


class HarnessEvaluator(Evaluator):
    kind = "harness"
    # per-evaluation state lives in the context and the call's locals; the shared replays,
    # baseline reports and results are built under a lock or written whole
    concurrent_evaluations = True

    def __init__(self, target: Any):
        super().__init__(target)
        try:
            self.settings: Settings = parse(dict(target.evaluator))
        except SettingsError as exc:
            raise ConfigError(str(exc), file=f"{target.rel_path}/target.toml",
                              key=f"evaluator.{exc.key}") from None
        self.policy = target.editable[0]
        self.call_timeout_s = max(2.0, 0.1 * self.settings.max_decision_ms)
        self._lock = threading.Lock()
        self._replays: dict[str, Replay] = {}
        self._reports: dict[str, BaselineReport] = {}
        self._results: dict[tuple[str, str], EvalResult] = {}

    def prompt_text(self) -> str:
        return text_beside(__file__)

    # -- workloads (trusted, built once) --------------------------------------------------
    def trajectories(self, which: str) -> list[Trajectory]:
        s = self.settings
        if s.workload == "synthetic":
            seed, tasks, trials = s.synthetic if which == "train" else s.held_out
            return synthetic.generate(seed, tasks, trials)
        if s.workload == "recorded":
            assert s.recorded_file is not None
            trajs = load_recorded(s.recorded_file)
        else:
            trajs = load_taubench(s.data_dir)
        return [t for t in trajs if held_out(t.task, s.held_out_every) == (which == "held_out")]

    def replay(self, which: str) -> Replay:
        """The workload's replay; every split's views show the tool profile learned from
        the training runs (evaluators/harness/profile.py)."""
        tools = None if which == "train" else self.replay("train").tools
        with self._lock:
            if which not in self._replays:
                trajs = self.trajectories(which)
                labels = {t.name: label(t) for t in trajs}
                self._replays[which] = Replay(Tokenized(trajs), labels, self.settings.rules,
                                              self.settings.window, tools)
            return self._replays[which]

    def baselines(self, which: str) -> BaselineReport | None:
        if self.settings.baselines is None:
            return None
        replay = self.replay(which)
        with self._lock:
            if which not in self._reports:
                metrics, failed = {}, {}
                for path in sorted(self.settings.baselines.glob("[a-z]*.py")):
                    try:
                        fn = load_plan(path)
                        costs = [replay.trajectory(t, fn) for t in replay.tokenized.trajectories]
                    except (PlanError, ImportError, AttributeError) as exc:
                        failed[path.stem] = str(exc)
                        continue
                    metrics[path.stem] = summarise(costs, self.settings.provider)
                if not metrics:
                    return None
                best = min(metrics, key=lambda n: metrics[n]["usd_per_task"])
                self._reports[which] = BaselineReport(best, metrics, failed)
            return self._reports[which]

    def prepare(self, ctx: EvalContext) -> None:
        for which in ("train", "held_out"):
            self.baselines(which)

    # -- stage 1 --------------------------------------------------------------------------
    def static_check(self, cand_dir: Path) -> EvalResult:
        res = super().static_check(cand_dir)
        if not res.ok:
            return res
        for rel in self.target.editable:
            found = violations(read_source(cand_dir / rel), rel)
            if found:
                return EvalResult(CandidateState.REJECTED, "; ".join(found[:3]), "static")
        return res

    # -- the candidate asked per call -----------------------------------------------------
    def _digest(self, cand_dir: Path) -> str:
        h = hashlib.sha256()
        for rel in sorted(self.target.editable):
            h.update(rel.encode() + b"\0" + (cand_dir / rel).read_bytes() + b"\0")
        return h.hexdigest()

    @contextmanager
    def _session(self, cand_dir: Path, ctx: EvalContext) -> Iterator[Any]:
        files = {rel: rel for rel in self.target.editable}
        payload = {"module": self.policy, "functions": ["plan"]}
        with ctx.session_on_copy(cand_dir, files, SERVE, payload, "harness-run-") as session:
            if not session.ok:
                state = (CandidateState.TIMEOUT if session.timed_out
                         else CandidateState.FAILED)
                raise _Stopped(state, session.error or "the policy's session did not start")
            yield session

    def _asker(self, session: Any, times: list[float], trajectory: str,
               shared: dict[str, Any]) -> Any:
        """Asks the policy about one trajectory's calls, in order: each request carries the
        segments that arrived since the previous one, and the views' shared part (the tool
        profile) goes once a session (evaluators/harness/child.py). ``shared``: what this
        session was sent of it."""
        sent = [0]

        def decide(view: dict[str, Any]) -> Any:
            segments = view["segments"]
            if len(segments) < sent[0]:
                raise RuntimeError("a trajectory's calls are asked in order")
            new, sent[0] = segments[sent[0]:], len(segments)
            # the previous plan is rebuilt in the policy's process from its own answer (the
            # second opinion, sent the trusted side's, would tell if the two ever differed)
            rest = {k: v for k, v in view.items()
                    if k not in ("segments", "previous") and k not in SHARED}
            request = {"op": "next", "trajectory": trajectory, "new": new, "view": rest}
            now = {k: view[k] for k in SHARED if k in view}
            if now != shared:
                request["shared"] = now
                shared.clear()
                shared.update(now)
            reply = session.request(request, timeout_s=self.call_timeout_s)
            if reply.timed_out:
                raise _Stopped(CandidateState.TIMEOUT, f"plan() for call {view['call']}: "
                               f"{reply.reason}")
            if not reply.ok:
                raise _Stopped(CandidateState.FAILED, f"plan() for call {view['call']}: "
                               f"{reply.reason}")
            times.append(reply.wall_s)
            return reply.value
        return decide

    def _run(self, cand_dir: Path, ctx: EvalContext, which: str, stage: str) -> EvalResult:
        key = (self._digest(cand_dir), which)
        if key in self._results:
            return self._results[key]
        try:
            replay = self.replay(which)
            report = self.baselines(which)
        except FileNotFoundError as exc:
            return EvalResult(CandidateState.PRUNED, str(exc), stage)
        records: dict[str, list[tuple[dict[str, Any], Any]]] = {}
        times: list[float] = []
        try:
            with self._session(cand_dir, ctx) as session:
                shared: dict[str, Any] = {}
                costs = [replay.trajectory(t, self._asker(session, times, t.name, shared),
                                           records.setdefault(t.name, []))
                         for t in replay.tokenized.trajectories]
            bad = self._second_opinion(cand_dir, ctx, replay, records, stage)
        except _Stopped as exc:
            return EvalResult(exc.state, exc.reason, stage)
        except PlanError as exc:
            return EvalResult(CandidateState.INVALID, str(exc), stage)
        if bad is not None:
            return bad
        metrics = summarise(costs, self.settings.provider)
        times.sort()
        p99_ms = 1e3 * times[min(len(times) - 1, int(0.99 * len(times)))] if times else 0.0
        metrics["decision_p99_ms"] = p99_ms
        artifacts: dict[str, str] = {}
        if report is not None:
            best = report.metrics[report.best]
            metrics["best_baseline_usd_per_task"] = best["usd_per_task"]
            metrics["best_baseline_recoveries_per_task"] = best["recoveries_per_task"]
            metrics["vs_best_baseline"] = best["usd_per_task"] / metrics["usd_per_task"]
            artifacts["best_baseline"] = report.best
            artifacts[f"baselines_{which}.txt"] = report.table()
        result = self._verdict(metrics, artifacts, report, stage)
        self._results[key] = result
        return result

    def _verdict(self, metrics: dict[str, float], artifacts: dict[str, str],
                 report: BaselineReport | None, stage: str) -> EvalResult:
        if metrics["decision_p99_ms"] > self.settings.max_decision_ms:
            return EvalResult(CandidateState.INVALID,
                              f"plan() p99 answer time {metrics['decision_p99_ms']:.2f} ms "
                              f"exceeds the {self.settings.max_decision_ms:g} ms bound "
                              "(measured outside the policy's process)", stage,
                              metrics=metrics)
        if report is not None:
            bound = report.metrics[report.best]["recoveries_per_task"]
            if metrics["recoveries_per_task"] > bound + 1e-9:
                return EvalResult(CandidateState.INVALID,
                                  f"{metrics['recoveries_per_task']:.3f} recoveries per task, "
                                  f"more than the best baseline's ({report.best}: {bound:.3f}): "
                                  "the policy drops content later calls need", stage,
                                  metrics=metrics, artifacts=artifacts)
        return valid_from_metrics(self.target, metrics, stage, artifacts=artifacts)

    def _second_opinion(self, cand_dir: Path, ctx: EvalContext, replay: Replay,
                        records: dict[str, list[tuple[dict[str, Any], Any]]], stage: str,
                        ) -> EvalResult | None:
        """A fresh session answers every view again, in a shuffled order: the plans must be
        the same (a function of the view alone). The session is sent each trajectory's
        segments first and then the views by reference (trajectory, how many segments), many
        a request: this process's answers are only compared with the first pass's, so what
        it holds of a trajectory can change no measured answer, only fail the check."""
        order = [(name, i) for name, rec in records.items() for i in range(len(rec))]
        random.Random(ctx.seed).shuffle(order)
        with self._session(cand_dir, ctx) as session:
            for name in records:
                reply = session.request({"op": "segments", "trajectory": name,
                                         "segments": replay.meta[name],
                                         "shared": {k: getattr(replay, k) for k in SHARED}},
                                        timeout_s=self.call_timeout_s)
                if not reply.ok:
                    return self._unanswered(reply, stage)
            for start in range(0, len(order), SECOND_OPINION_BATCH):
                chunk = order[start:start + SECOND_OPINION_BATCH]
                asks = []
                for name, i in chunk:
                    view = records[name][i][0]
                    asks.append([name, len(view["segments"]),
                                 {k: v for k, v in view.items()
                                  if k != "segments" and k not in SHARED}])
                # the first pass held every answer within max_decision_ms (at p99)
                reply = session.request({"op": "views", "asks": asks},
                                        timeout_s=self.call_timeout_s
                                        + 2e-3 * self.settings.max_decision_ms * len(chunk))
                if not reply.ok:
                    return self._unanswered(reply, stage)
                answers = reply.value if isinstance(reply.value, list) else []
                for key, again in itertools.zip_longest(chunk, answers):
                    first = records[key[0]][key[1]] if key is not None else None
                    if first is None or again != first[1]:
                        call = first[0]["call"] if first is not None else "?"
                        return EvalResult(CandidateState.INVALID,
                                          f"asked again in a fresh process and another order, "
                                          f"plan() answered call {call} differently: a policy "
                                          "must be a function of its view alone (no state "
                                          "carried between calls)", stage)
        return None

    @staticmethod
    def _unanswered(reply: Any, stage: str) -> EvalResult:
        state = CandidateState.TIMEOUT if reply.timed_out else CandidateState.FAILED
        return EvalResult(state, f"plan(), asked again in a fresh process: {reply.reason}",
                          stage)

    # -- stages ---------------------------------------------------------------------------
    def correctness(self, cand_dir: Path, ctx: EvalContext) -> EvalResult:
        res = self._run(cand_dir, ctx, "train", "correctness")
        if not res.ok:
            return res
        return EvalResult(CandidateState.VALID, "", "correctness",
                          metrics={"decision_p99_ms": res.metrics["decision_p99_ms"]})

    def performance(self, cand_dir: Path, ctx: EvalContext) -> EvalResult:
        res = self._run(cand_dir, ctx, "train", "correctness")
        if not res.ok:
            return res
        return EvalResult(res.state, res.reason, "performance", metrics=dict(res.metrics),
                          objectives=res.objectives, samples=res.samples,
                          artifacts=dict(res.artifacts))

    def held_out(self, cand_dir: Path, ctx: EvalContext) -> EvalResult | None:
        return self._run(cand_dir, ctx, "held_out", "held_out")

