"""Deterministic means reproducible: a winner of a deterministic target is evaluated again.

A target with ``noise = "deterministic"`` is confirmed by exact values (and its held-out
workload), not by repeated timings. Exact only means something when the values repeat:
a policy that adds ``os.urandom`` jitter to its scores and memoises only its last call
passes a call-twice check, yet gives another hit ratio in every process (0.4711, 0.4745,
0.4706 in three evaluations of the prefix-cache target). So before a program of such a
target is confirmed, it is evaluated once more, every stage, in fresh sandboxed processes
on the same inputs, and its objective metrics must come out bit for bit as recorded;
otherwise it is INVALID, "not reproducible", with both values. The seed is checked the
same way, once a night per target (a seed that does not repeat makes every exact
comparison with it meaningless). Each check's cost is kept with the night's summary.

    check = reproduce.verify(target, evaluator, cand_dir, ctx, recorded_metrics)
    if not check.ok: ...  # check.reason names the metric and both values

The engine calls :func:`before_confirmation` with the night's summary (it keeps the
checks and their cost) and :func:`pr_lines` for the pull branch's text.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from optimizer.records import CandidateState, EvalResult

NOT_REPRODUCIBLE = "not reproducible"


@dataclass(frozen=True)
class Reproduction:
    """One program evaluated again: ``ok`` when every objective metric repeated bit for bit
    (``first`` as recorded, ``again`` from the fresh run); ``cost_s`` is the re-run's wall
    time."""

    ok: bool
    reason: str = ""
    first: Mapping[str, float] = field(default_factory=dict)
    again: Mapping[str, float] = field(default_factory=dict)
    cost_s: float = 0.0

    def result(self, stage: str = "reproduce") -> EvalResult:
        """The verdict as an evaluation result: VALID, or INVALID with the reason."""
        state = CandidateState.VALID if self.ok else CandidateState.INVALID
        return EvalResult(state, self.reason, stage, metrics=dict(self.again),
                          cost_s=self.cost_s)


def applies(target: Any) -> bool:
    """Whether ``target``'s programs must reproduce (its ``noise`` is "deterministic")."""
    return getattr(target, "noise", "timing") == "deterministic"


def _same(a: float, b: float) -> bool:
    """Bit for bit: equal floats, or both NaN (a NaN never equals itself)."""
    return a == b or (math.isnan(a) and math.isnan(b))


def differences(names: tuple[str, ...], first: Mapping[str, float],
                again: Mapping[str, float]) -> list[str]:
    """``name first then again`` for each of ``names`` whose value differs at all (a
    metric missing from one side differs)."""
    out = []
    for name in names:
        a, b = first.get(name), again.get(name)
        if a is None or b is None or not _same(float(a), float(b)):
            out.append(f"{name} {_fmt(a)} then {_fmt(b)}")
    return out


def _fmt(v: float | None) -> str:
    return "missing" if v is None else repr(float(v))


def verify(target: Any, evaluator: Any, folder: Path, ctx: Any,
           recorded: Mapping[str, float]) -> Reproduction:
    """Evaluate the program in ``folder`` again (every stage; the sandbox runs it in fresh
    processes) and compare its objective metrics with ``recorded`` bit for bit."""
    names = tuple(o.metric for o in target.objectives)
    first = {n: float(recorded[n]) for n in names if n in recorded}
    start = time.perf_counter()
    try:
        res = evaluator.evaluate(folder, ctx)
    except Exception as exc:  # noqa: BLE001 - a broken re-run is a verdict, not a crash
        res = EvalResult(CandidateState.FAILED, f"{type(exc).__name__}: {exc}")
    cost = time.perf_counter() - start
    if not res.ok:
        return Reproduction(False, f"{NOT_REPRODUCIBLE}: evaluated again in a fresh process it "
                            f"was {res.state.value} ({res.reason[:300]})", first, {}, cost)
    again = {n: float(res.metrics[n]) for n in names if n in res.metrics}
    diff = differences(names, first, again)
    if diff:
        return Reproduction(False, f"{NOT_REPRODUCIBLE}: evaluated again in a fresh process "
                            f"on the same inputs: {'; '.join(diff)}", first, again, cost)
    return Reproduction(True, "", first, again, cost)


# -- the engine's use ---------------------------------------------------------------------


def _checks(summary: Any) -> list[dict[str, Any]]:
    """The night's checks, kept on its summary (``RunSummary.reproduced``)."""
    checks: list[dict[str, Any]] = summary.reproduced
    return checks


def before_confirmation(summary: Any, target: Any, evaluator: Any, ctx: Any,
                        seed: tuple[Any, Path], best: tuple[Any, Path]
                        ) -> dict[str, Any] | None:
    """For a deterministic target: the seed (once a night) and then ``best`` evaluated
    again (each an archive entry and the folder holding its files), each check kept on
    ``summary``. None when both reproduce (or the target is not deterministic), else the
    confirmation's failure: ``{"confirmed": False, "wrong": True, "headline": reason,
    "state": "INVALID"}``."""
    if not applies(target):
        return None
    done = _checks(summary)
    for role, (entry, folder) in (("seed", seed), ("candidate", best)):
        earlier = [c for c in done if c["target"] == target.name and c["program"] == entry.id]
        if earlier and role == "seed":  # once a night
            check = earlier[-1]
        else:
            rep = verify(target, evaluator, folder, ctx, entry.metrics)
            check = {"target": target.name, "program": entry.id, "role": role,
                     "ok": rep.ok, "reason": rep.reason, "cost_s": round(rep.cost_s, 3),
                     "first": dict(rep.first), "again": dict(rep.again)}
            done.append(check)
        if not check["ok"]:
            who = "the seed" if role == "seed" else entry.id
            return {"confirmed": False, "wrong": role == "candidate",
                    "state": CandidateState.INVALID.value,
                    "headline": f"{who}: {check['reason']}"}
    return None


def pr_lines(summary: Any, target: str, program: str) -> list[str]:
    """The pull branch's evidence line for ``program`` of ``target`` ([] when it was not
    checked: a target that is not deterministic)."""
    checks = [c for c in _checks(summary) if c["target"] == target]
    mine = [c for c in checks if c["program"] == program and c["role"] == "candidate"]
    if not mine or not mine[-1]["ok"]:
        return []
    seed = [c for c in checks if c["role"] == "seed"]
    values = ", ".join(f"{k} = {v!r}" for k, v in mine[-1]["again"].items())
    line = (f"- Reproduced: evaluated again in a fresh process on the same inputs, every "
            f"stage, before confirmation: {values}, bit for bit as first measured "
            f"({mine[-1]['cost_s']:.1f} s)")
    if seed and seed[-1]["ok"]:
        line += "; the seed reproduced the same way"
    return [line + "."]


def night_cost(summary: Any) -> str:
    """One line for the night's summary: how many programs were evaluated again and what
    it cost ('' when none was)."""
    checks = list(getattr(summary, "reproduced", []))
    if not checks:
        return ""
    bad = [c for c in checks if not c["ok"]]
    spent = sum(float(c["cost_s"]) for c in checks)
    return (f"reproduced in a fresh process: {len(checks) - len(bad)} of {len(checks)} "
            f"programs (deterministic targets), {spent:.1f} s"
            + (f"; not reproducible: {', '.join(c['program'] for c in bad)}" if bad else ""))


def judged(result: EvalResult, rep: Reproduction) -> EvalResult:
    """``result`` when ``rep`` reproduced it; else INVALID with the reproduction's reason
    (its metrics and artifacts kept, the re-run's cost added)."""
    if rep.ok:
        return replace(result, cost_s=result.cost_s + rep.cost_s)
    return replace(result, state=CandidateState.INVALID, reason=rep.reason, stage="reproduce",
                   objectives=(), cost_s=result.cost_s + rep.cost_s)
