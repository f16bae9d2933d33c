"""The morning report: what a night of search found, as markdown plus PNG plots.

Reads only the Optuna storage (studies ``<experiment>/<target>``; the trial user attrs the
loop writes: ``candidate``, ``state``, ``reason``, ``branch``, ``commit``,
``mlflow_run_id``, ``proposer``, ``parent``, ``metrics``, ``summary``; the study user attr
``winner``), so it works from any machine that can reach the storage, without MLflow or
git. Layout of ``out_dir``::

    report.md                 summary table per target, sections with top candidates or
                              the Pareto front, failure reasons; embeds the plots below
    states.png                stacked candidate states per target
    improvements.png          gain over the seed of every VALID candidate, per target
    best_so_far_<target>.png  best objective so far per trial number, seed as a line

Gains follow :func:`optimizer.stats.relative_gain`: ``seed/value - 1`` for a minimized
positive objective, so a 1.25x speedup reads +25%, the same scale as the winners' CIs.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cached_property
from pathlib import Path
from typing import Any

from optimizer.errors import WorkspaceError
from optimizer.records import CandidateState
from optimizer.stats import relative_gain

SEED_CANDIDATE = "c0001"
_TOP_CANDIDATES = 5
_TOP_REASONS = 3
_REASON_CHARS = 80
# Colours per state: greens for usable, reds for broken, greys for skipped.
_STATE_COLOURS = {
    "VALID": "#2ca02c",
    "INVALID": "#d62728",
    "FAILED": "#8c1c13",
    "TIMEOUT": "#ff7f0e",
    "REJECTED": "#9467bd",
    "DUPLICATE": "#bbbbbb",
    "PRUNED": "#7f7f7f",
    "RUNNING": "#1f77b4",
    "PENDING": "#aec7e8",
}
_FAILURE_STATES = ("INVALID", "FAILED", "TIMEOUT", "REJECTED")
_FROM_OPTUNA = {  # trial state -> candidate state, for trials without a ``state`` attr
    "COMPLETE": "VALID",
    "FAIL": "FAILED",
    "PRUNED": "PRUNED",
    "RUNNING": "RUNNING",
    "WAITING": "PENDING",
}


@dataclass(frozen=True)
class TrialRow:
    """One candidate as the report sees it (a flattened Optuna trial)."""

    number: int
    candidate: str
    state: str  # a CandidateState value
    reason: str
    values: tuple[float, ...] | None  # objective values; None unless the trial COMPLETEd
    branch: str = ""
    proposer: str = ""
    parent: str = ""
    summary: str = ""

    @property
    def valid(self) -> bool:
        return self.state == CandidateState.VALID.value and self.values is not None


@dataclass(frozen=True)
class TargetReport:
    """Everything the report says about one study."""

    target: str
    directions: tuple[str, ...]  # "minimize" / "maximize", one per objective
    metric_names: tuple[str, ...]
    rows: tuple[TrialRow, ...]
    pareto: tuple[TrialRow, ...]  # study.best_trials for multi-objective studies
    winner: Mapping[str, Any] | None

    @property
    def minimize(self) -> tuple[bool, ...]:
        return tuple(d == "minimize" for d in self.directions)

    @cached_property  # rows never change; gain() asks for the seed once per candidate
    def valid(self) -> tuple[TrialRow, ...]:
        return tuple(r for r in self.rows if r.valid)

    @cached_property
    def seed(self) -> TrialRow | None:
        for row in self.rows:
            if row.candidate == SEED_CANDIDATE:
                return row
        # Studies written without candidate ids: the first trial is the seed.
        return self.rows[0] if self.rows and not any(r.candidate for r in self.rows) else None

    def best(self, i: int = 0) -> TrialRow | None:
        sign = 1.0 if self.minimize[i] else -1.0
        scored = [(sign * r.values[i], r.number, r) for r in self.valid if r.values is not None]
        return min(scored)[2] if scored else None

    def gain(self, row: TrialRow, i: int = 0) -> float | None:
        """Gain of ``row`` over the seed on objective ``i`` (None when not comparable)."""
        seed = self.seed
        if seed is None or not seed.valid or seed.values is None or row.values is None:
            return None
        base, value = seed.values[i], row.values[i]
        if not (math.isfinite(base) and math.isfinite(value)):
            return None
        return relative_gain(base, value, minimize=self.minimize[i])

    def best_so_far(self) -> list[tuple[int, float]]:
        """``(trial number, best first objective among VALID trials up to it)``."""
        out: list[tuple[int, float]] = []
        for row in sorted(self.valid, key=lambda r: r.number):
            value = row.values[0] if row.values else math.nan
            if out:
                prev = out[-1][1]
                value = min(prev, value) if self.minimize[0] else max(prev, value)
            out.append((row.number, value))
        return out

    def failure_reasons(self) -> list[tuple[str, int]]:
        """Most common ``STATE: reason`` among broken candidates.

        PRUNED and DUPLICATE are the search working as intended, not failures; they show
        in the state counts instead.
        """
        counts: Counter[str] = Counter()
        for row in self.rows:
            if row.state not in _FAILURE_STATES:
                continue
            first = row.reason.strip().splitlines()[0] if row.reason.strip() else "(no reason)"
            if len(first) > _REASON_CHARS:
                first = first[: _REASON_CHARS - 3] + "..."
            counts[f"{row.state}: {first}"] += 1
        return counts.most_common(_TOP_REASONS)


def default_storage(state_dir: Path) -> str:
    """The storage URL the loop uses by default: ``sqlite:///<state_dir>/optuna.db``."""
    return f"sqlite:///{Path(state_dir) / 'optuna.db'}"


def _shown_url(storage: str) -> str:
    from sqlalchemy.engine import make_url

    try:
        return make_url(storage).render_as_string(hide_password=True)
    except Exception:  # an unparsable URL is reported as given; it has no password to hide
        return storage


def _open_storage(storage: str) -> Any:
    import optuna
    from sqlalchemy.engine import make_url

    try:
        url = make_url(storage)
    except Exception as exc:
        raise WorkspaceError(
            f"cannot parse the Optuna storage URL {storage!r}: {exc}; expected an SQLAlchemy "
            "URL such as sqlite:///.optimizer/optuna.db or postgresql://host/db"
        ) from None
    if url.get_backend_name() == "sqlite" and url.database not in (None, "", ":memory:"):
        path = Path(url.database).resolve()
        if not path.is_file():
            raise WorkspaceError(
                f"no Optuna storage at {path}: run the optimizer first, or pass the storage "
                "that holds the experiment (--storage sqlite:///path/to/optuna.db)"
            )
    try:
        # skip_table_creation: a report must not write a schema into somebody's database.
        return optuna.storages.RDBStorage(storage, skip_table_creation=True)
    except Exception as exc:
        raise WorkspaceError(
            f"cannot open the Optuna storage {_shown_url(storage)}: {type(exc).__name__}: "
            f"{str(exc).strip()} (is it a database the optimizer wrote, and is its driver "
            "installed?)"
        ) from None


def _row(trial: Any) -> TrialRow:
    attrs = trial.user_attrs
    state = str(attrs.get("state") or _FROM_OPTUNA.get(trial.state.name, trial.state.name))
    values = tuple(float(v) for v in trial.values) if trial.values is not None else None
    return TrialRow(
        number=trial.number,
        candidate=str(attrs.get("candidate", "")),
        state=state,
        reason=str(attrs.get("reason", "")),
        values=values,
        branch=str(attrs.get("branch", "")),
        proposer=str(attrs.get("proposer", "")),
        parent=str(attrs.get("parent") or ""),
        summary=str(attrs.get("summary", "")),
    )


def _study_names(rdb: Any, storage: str) -> list[str]:
    import optuna

    try:
        return list(optuna.get_all_study_names(rdb))
    except Exception as exc:
        raise WorkspaceError(
            f"{_shown_url(storage)} is not a readable Optuna storage: {type(exc).__name__}: {exc}"
        ) from None


def _collect(rdb: Any, names: Sequence[str], experiment: str) -> list[TargetReport]:
    import optuna

    prefix = f"{experiment}/"
    out = []
    for name in sorted(n for n in names if n.startswith(prefix)):
        study = optuna.load_study(study_name=name, storage=rdb)
        directions = tuple(d.name.lower() for d in study.directions)
        metric_names = tuple(
            study.metric_names or (f"objective {i}" for i in range(len(directions)))
        )
        rows = tuple(_row(t) for t in study.get_trials(deepcopy=False))
        pareto: tuple[TrialRow, ...] = ()
        if len(directions) > 1:
            pareto = tuple(sorted((_row(t) for t in study.best_trials), key=lambda r: r.number))
        winner = study.user_attrs.get("winner")
        out.append(
            TargetReport(
                target=name[len(prefix) :],
                directions=directions,
                metric_names=metric_names,
                rows=rows,
                pareto=pareto,
                winner=winner if isinstance(winner, Mapping) else None,
            )
        )
    return out


def _close(rdb: Any) -> None:
    # Release the sqlite file (and pooled connections) now, not at interpreter exit.
    rdb.remove_session()
    rdb.engine.dispose()


def collect(storage: str, experiment: str) -> list[TargetReport]:
    """Read every ``<experiment>/<target>`` study from ``storage``, sorted by target."""
    rdb = _open_storage(storage)
    try:
        return _collect(rdb, _study_names(rdb, storage), experiment)
    finally:
        _close(rdb)


# --- markdown ---------------------------------------------------------------------------


def _num(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.4g}"


def _pct(gain: float | None) -> str:
    if gain is None:
        return "n/a"
    return f"{gain:+.1%}" if math.isfinite(gain) else ("+inf" if gain > 0 else "-inf")


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def _code(text: str) -> str:
    return f"`{_cell(text)}`" if text else ""


def plot_name(target: str) -> str:
    return "best_so_far_" + re.sub(r"[^A-Za-z0-9_.-]", "_", target) + ".png"


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return lines


def _winner_text(t: TargetReport) -> tuple[str, str]:
    w = t.winner
    if not w:
        return "none", ""
    text = f"{w.get('candidate', '?')}"
    try:
        text += f" {float(w['speedup']):.3f}x"
        text += f" (CI {float(w['low']):.3f}-{float(w['high']):.3f})"
    except (KeyError, TypeError, ValueError):
        pass  # a winner recorded without (numeric) evidence is still named
    return text, _code(str(w.get("pull_branch") or w.get("branch", "")))


def _summary_row(t: TargetReport) -> list[str]:
    seed = t.seed
    best_vs_seed, gains = [], []
    for i in range(len(t.directions)):
        best = t.best(i)
        seed_v = seed.values[i] if seed is not None and seed.valid and seed.values else None
        best_v = best.values[i] if best is not None and best.values else None
        best_vs_seed.append(f"{_num(best_v)} vs {_num(seed_v)}")
        gains.append(_pct(t.gain(best, i)) if best is not None else "n/a")
    reasons = "; ".join(f"{r} ({n})" for r, n in t.failure_reasons()) or "none"
    winner, branch = _winner_text(t)
    return [
        t.target,
        ", ".join(f"{m} ({d[:3]})" for m, d in zip(t.metric_names, t.directions, strict=True)),
        str(sum(1 for r in t.rows if r.state != "DUPLICATE")),
        str(len(t.valid)),
        " / ".join(best_vs_seed),
        " / ".join(gains),
        winner,
        branch,
        reasons,
    ]


def _candidate_row(t: TargetReport, row: TrialRow) -> list[str]:
    values = row.values or ()
    return [
        row.candidate or f"#{row.number}",
        *(_num(v) for v in values),
        *(_pct(t.gain(row, i)) for i in range(len(values))),
        row.state,
        row.proposer,
        row.parent,
        _code(row.branch),
        row.summary[:_REASON_CHARS],
    ]


def _target_section(t: TargetReport) -> list[str]:
    lines = [f"## {t.target}", ""]
    counts = Counter(r.state for r in t.rows)
    states = ", ".join(f"{s} {n}" for s, n in sorted(counts.items())) or "no trials yet"
    lines += [f"States: {states}.", ""]
    if t.winner:
        w, b = _winner_text(t)
        lines += [f"Winner: {w}, pull branch {b or '(none)'}.", ""]
    lines += [f"![best so far]({plot_name(t.target)})", ""]
    objs = [f"{m} ({d})" for m, d in zip(t.metric_names, t.directions, strict=True)]
    header = ["candidate", *objs, *(f"gain {m}" for m in t.metric_names)]
    header += ["state", "proposer", "parent", "branch", "summary"]
    if len(t.directions) > 1:
        lines += [f"Pareto front ({len(t.pareto)} trials):", ""]
        chosen: Sequence[TrialRow] = t.pareto
    else:
        lines += [f"Top {_TOP_CANDIDATES} valid candidates:", ""]
        best_first = sorted(t.valid, key=lambda r: r.values[0] if r.values else 0.0)
        chosen = (best_first if t.minimize[0] else best_first[::-1])[:_TOP_CANDIDATES]
    if chosen:
        lines += _table(header, [_candidate_row(t, r) for r in chosen])
    else:
        lines += ["(no valid candidates)"]
    return [*lines, ""]


def render_markdown(experiment: str, targets: Sequence[TargetReport], storage_shown: str) -> str:
    now = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines = [f"# Optimizer report: {experiment}", ""]
    lines += [f"Generated {now} from `{storage_shown}`.", ""]
    header = [
        "target",
        "objectives",
        "candidates",
        "valid",
        "best vs seed",
        "gain",
        "winner",
        "pull branch",
        "top failure reasons",
    ]
    lines += _table(header, [_summary_row(t) for t in targets])
    lines += [
        "",
        "Gain is over the seed (c0001): seed/best - 1 for minimized objectives, best/seed - 1 "
        "for maximized ones, so a 1.25x speedup reads +25.0%. Multi-objective rows give each "
        "objective's best separately; see the Pareto front below.",
        "",
        "![candidate states per target](states.png)",
        "",
        "![gain over the seed of VALID candidates](improvements.png)",
        "",
    ]
    for t in targets:
        lines += _target_section(t)
    return "\n".join(lines)


# --- plots --------------------------------------------------------------------------------


def _figure(width: float = 7.0, height: float = 4.0) -> Any:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)  # draw with Agg whatever backend pyplot would pick
    return fig


def _placeholder(ax: Any, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, color="grey")
    ax.set_xticks([])
    ax.set_yticks([])


def plot_best_so_far(t: TargetReport, path: Path) -> None:
    fig = _figure()
    ax = fig.add_subplot()
    valid = sorted(t.valid, key=lambda r: r.number)
    name = t.metric_names[0] if t.metric_names else "objective"
    if not valid:
        _placeholder(ax, f"{t.target}: no valid candidates")
    else:
        xs = [r.number for r in valid]
        ys = [r.values[0] if r.values else math.nan for r in valid]
        ax.scatter(xs, ys, s=10, color="#999999", label="valid candidates")
        best = [v for _, v in t.best_so_far()]
        ax.step(xs, best, where="post", color="#1f77b4", label="best so far")
        seed = t.seed
        if seed is not None and seed.valid and seed.values:
            ax.axhline(seed.values[0], color="#d62728", linestyle="--", label="seed")
        ax.set_xlabel("trial number")
        ax.set_ylabel(f"{name} ({t.directions[0]})")
        finite = [y for y in ys if math.isfinite(y)]
        # a few candidates 1000x off the rest (a routing policy that sends everything to
        # one replica) would flatten the curve that matters: log scale when that happens
        if finite and min(finite) > 0 and max(finite) / min(finite) > 50:
            ax.set_yscale("log")
        ax.legend(loc="best", fontsize="small")
    ax.set_title(f"{t.target}: best {name} so far")
    fig.savefig(path)


def plot_states(targets: Sequence[TargetReport], path: Path) -> None:
    fig = _figure(max(5.0, 1.2 * len(targets) + 3.0), 4.0)
    ax = fig.add_subplot()
    names = [t.target for t in targets]
    counts = [Counter(r.state for r in t.rows) for t in targets]
    present = [s for s in _STATE_COLOURS if any(c[s] for c in counts)]
    present += sorted({s for c in counts for s in c} - set(_STATE_COLOURS))
    if not present:
        _placeholder(ax, "no candidates yet")
    else:
        bottom = [0] * len(targets)
        for state in present:
            heights = [c[state] for c in counts]
            ax.bar(names, heights, bottom=bottom, label=state, color=_STATE_COLOURS.get(state))
            bottom = [b + h for b, h in zip(bottom, heights, strict=True)]
        ax.set_ylabel("candidates")
        ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize="small")
        ax.tick_params(axis="x", labelrotation=30)
    ax.set_title("candidate states per target")
    fig.savefig(path)


def plot_improvements(targets: Sequence[TargetReport], path: Path) -> None:
    fig = _figure(max(5.0, 1.2 * len(targets) + 2.0), 4.0)
    ax = fig.add_subplot()
    data, labels = [], []
    for t in targets:
        gains = [t.gain(r) for r in t.valid if t.seed is None or r.number != t.seed.number]
        finite = [100.0 * g for g in gains if g is not None and math.isfinite(g)]
        if finite:
            data.append(finite)
            labels.append(t.target)
    if not data:
        _placeholder(ax, "no VALID candidates to compare with a valid seed")
    else:
        ax.boxplot(data, showfliers=False)
        for i, ys in enumerate(data, start=1):
            # Deterministic jitter so that re-running the report gives the same picture.
            xs = [i + 0.25 * (((k * 0.618034) % 1.0) - 0.5) for k in range(len(ys))]
            ax.scatter(xs, ys, s=8, alpha=0.6, color="#1f77b4")
        ax.set_xticks(range(1, len(labels) + 1), labels, rotation=30)
        ax.axhline(0.0, color="#d62728", linestyle="--", linewidth=1)
        ax.set_ylabel("gain over seed (%), first objective")
    ax.set_title("VALID candidates vs the seed")
    fig.savefig(path)


def build_report(storage: str, experiment: str, out_dir: Path) -> Path:
    """Write ``out_dir/report.md`` and its PNGs for ``experiment``; return the markdown path.

    Raises :class:`WorkspaceError` when the storage is missing or unreadable.
    """
    rdb = _open_storage(storage)
    try:
        names = _study_names(rdb, storage)
        targets = _collect(rdb, names, experiment)
    finally:
        _close(rdb)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    shown = _shown_url(storage)
    md_path = out_dir / "report.md"
    if not targets:
        others = sorted({n.split("/", 1)[0] for n in names if "/" in n})
        md_path.write_text(
            f"# Optimizer report: {experiment}\n\nNo studies named `{experiment}/<target>` "
            f"in `{shown}`. Experiments present: {', '.join(others) or 'none'}.\n"
        )
        return md_path
    for t in targets:
        plot_best_so_far(t, out_dir / plot_name(t.target))
    plot_states(targets, out_dir / "states.png")
    plot_improvements(targets, out_dir / "improvements.png")
    md_path.write_text(render_markdown(experiment, targets, shown))
    return md_path
