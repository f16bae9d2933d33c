"""A candidate against the best baseline over a set of workloads: the objective and the table.

Each workload of a sweep (a family at one rate scale, on a fleet) gives the candidate's
value of the compared metric (p99 TTFT by default) and the best baseline's there, so a
ratio ``versus`` (best baseline / candidate for a minimised metric, candidate / best for a
maximised one: above 1 the candidate is better). The objective ``vs_baselines`` (maximise)
is their geometric mean times the worst ratio when that is below 1::

    vs_baselines = gmean(versus) * min(1, min(versus))

so a candidate that loses on one workload by a factor L has its score divided by L on top
of the mean: losing 2x on one of six workloads needs a 2.6x win on each of the other five
to break even, and the average alone never carries a loss. A workload where every
baseline is within ``TIE`` (5%) of the others is a tie: load does not matter there (no
queue to route around, or every policy drowns alike). The held-out check asks the
candidate to beat the best baseline (``versus`` > 1) on every held-out workload that is
not a tie.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

TIE = 0.05


@dataclass(frozen=True)
class Row:
    """One workload: the candidate against the best baseline there."""

    set: str  # "training" or "held-out"
    workload: str
    fleet: str
    requests: int
    metric: str
    minimize: bool
    candidate: float
    best: str  # the best baseline's name
    best_value: float
    spread: float  # worst baseline against the best, minus 1 (0.05: within 5%)
    missing: str = ""  # why it did not run (an absent trace)

    @property
    def versus(self) -> float:
        num, den = ((self.best_value, self.candidate) if self.minimize
                    else (self.candidate, self.best_value))
        if den <= 0:
            return math.inf if num > 0 else 1.0
        return num / den

    @property
    def tie(self) -> bool:
        return self.spread <= TIE

    @property
    def verdict(self) -> str:
        if self.missing:
            return "not run"
        if self.tie:
            return "tie (baselines within 5%)"
        return "win" if self.versus > 1.0 else "LOSS"


def spread(values: Sequence[float], minimize: bool) -> float:
    """The worst value against the best, minus 1 (how much the policies differ)."""
    del minimize  # the ratio of the extremes either way
    lo, hi = min(values), max(values)
    return hi / lo - 1 if lo > 0 else (0.0 if hi <= 0 else math.inf)


def score(versus: Sequence[float]) -> dict[str, float]:
    """``vs_baselines`` and its parts (see the module docstring)."""
    if not versus:
        raise ValueError("no workloads to score")
    logs = [math.log(max(v, 1e-12)) for v in versus]
    gmean = math.exp(sum(logs) / len(logs))
    worst = min(versus)
    return {"vs_baselines": gmean * min(1.0, worst), "vs_baselines_gmean": gmean,
            "vs_baselines_worst": worst}


def losses(rows: Sequence[Row]) -> list[Row]:
    """Held-out workloads where load matters and the candidate does not beat the best."""
    return [r for r in rows if r.set == "held-out" and r.verdict == "LOSS"]


def table(rows: Sequence[Row]) -> str:
    """Markdown: the candidate against the best baseline per workload, worst row first
    within each set."""
    if not rows:
        return ""
    m = rows[0].metric
    unit = " (s)" if m.endswith("_s") else ""
    lines = [f"| set | workload | fleet | requests | best baseline | its {m}{unit} | "
             f"winner's {m}{unit} | winner vs best | verdict |",
             "|---|---|---|---|---|---|---|---|---|"]
    for which in ("training", "held-out"):
        mine = [r for r in rows if r.set == which]
        mine.sort(key=lambda r: (bool(r.missing), r.versus if not r.missing else 0.0))
        for r in mine:
            if r.missing:
                lines.append(f"| {r.set} | {r.workload} | {r.fleet} | - | - | - | - | - | "
                             f"not run: {r.missing} |")
                continue
            lines.append(f"| {r.set} | {r.workload} | {r.fleet} | {r.requests} | {r.best} | "
                         f"{r.best_value:.4g} | {r.candidate:.4g} | {r.versus:.3f}x | "
                         f"{r.verdict} |")
    return "\n".join(lines) + "\n"


def worst_row(rows: Sequence[Row]) -> Row | None:
    """The row a headline figure quotes: the lowest ratio among workloads that ran and are
    not ties (held-out first), else the lowest of any that ran."""
    ran = [r for r in rows if not r.missing]
    for pool in ([r for r in ran if r.set == "held-out" and not r.tie],
                 [r for r in ran if not r.tie], ran):
        if pool:
            return min(pool, key=lambda r: r.versus)
    return None
