"""Winners: the best candidates confirmed against the seed (a paired bootstrap interval for
timed targets, exact and held-out comparison for deterministic ones), published as pull
branches whose message is the evidence."""

from __future__ import annotations

import dataclasses
import functools
import logging
import math
import shutil
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna

from optimizer import reproduce, stats
from optimizer.archive import Archive
from optimizer.evaluation import device_for, fresh_context
from optimizer.kinds import Evaluator
from optimizer.minimize import Evaluate, Gate, Plan, Reduction, reduce
from optimizer.night import Run
from optimizer.records import (
    ArchiveEntry,
    CandidateRecord,
    CandidateState,
    Confirmation,
    program_metrics,
)
from optimizer.sandbox import Sandbox
from optimizer.targets import TargetSpec, materialize

log = logging.getLogger("optimizer.loop")
FINAL_CHECK_RETRIES = 2  # next candidates of a structure tried after one failed its final check


def _materialize(r: Run, target: TargetSpec, entry: ArchiveEntry) -> Path:
    """A private copy of the target folder holding ``entry``'s files (for confirmation)."""
    # a copy of the repository around it when the target edits files elsewhere in it
    return materialize(target, entry.files, _materialized(r, target, entry))


def _materialized(r: Run, target: TargetSpec, entry: ArchiveEntry) -> Path:
    return r.config.state_dir / "worktrees" / "_confirm" / r.config.name / target.name / entry.id


@dataclass(frozen=True)
class Evidence:
    """What a confirmation found: whether it confirms the win, its headline, and the
    figures behind it (the paired interval, or the exact and held-out gains); a winner's
    pull branch and its record carry it (:meth:`to_json`)."""

    confirmed: bool
    headline: str
    wrong: bool = False  # the final check found the program wrong
    kind: str = ""  # "paired bootstrap", "exact", "exact + held-out"
    speedup: float | None = None
    low: float | None = None  # the paired interval's bounds and its pairs
    high: float | None = None
    pairs: int | None = None
    held_out_gain: float | None = None
    held_out_metrics: Mapping[str, Mapping[str, float]] | None = None  # "seed", "candidate"
    final_check: str = ""  # what the kind's final check said of a program it passed
    evidence_md: str = ""  # a table the final check wrote (its evidence.md artifact)
    minimised_from: str = ""  # the contender a reduction was made of, and its steps
    reductions: tuple[str, ...] = ()
    minimised: str = ""  # how far the reduction went: fully, nothing to remove, not at all
    not_tried: tuple[str, ...] = ()  # hunks and knobs a reduction cut short did not try

    def to_json(self) -> dict[str, Any]:
        """The winner's record of it: the fields that say something, ``confirmed`` and
        ``wrong`` left out."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name in ("confirmed", "wrong") or value in (None, "", ()):
                continue
            if f.name == "held_out_metrics":
                value = {k: dict(v) for k, v in value.items()}
            out[f.name] = list(value) if isinstance(value, tuple) else value
        return out


@dataclass(frozen=True)
class Contest:
    """What selecting one target's winner works with: its evaluator on a sandbox, its
    study and archive; ``evaluate`` makes a candidate of a reduced program (at most
    ``max_trials`` of them, before ``deadline``); ``device_lock`` is the slot's timing
    lock (the confirmation's timed phase holds it); ``lock`` is held while the winner is
    published (others are selected meanwhile) and ``alone`` while it is confirmed (no
    other target's evaluation runs meanwhile)."""

    target: TargetSpec
    evaluator: Evaluator
    sandbox: Sandbox
    study: optuna.Study
    archive: Archive
    evaluate: Evaluate | None = None
    deadline: float = math.inf
    max_trials: int = 0
    device_lock: Any = None
    lock: Any = None
    alone: Any = None


def select_winner(r: Run, c: Contest) -> dict[str, Any] | None:
    """The best candidates, confirmed against the seed: significant and held-out. A
    contender is first reduced to a minimal change (:mod:`optimizer.minimize`), and the
    reduction is what gets confirmed and published."""
    target, archive = c.target, c.archive
    seed = archive.seed
    assert seed is not None
    contenders, tried, retries = _contenders(archive), set[str](), 0
    refused: list[dict[str, float]] = []  # what the candidates a final check refused measured
    i = 0
    while i < len(contenders):
        best = contenders[i]
        tried.add(best.id)
        if _measured(best) in refused:  # the same program in effect: refused alike
            nxt = _next_of_structure(archive, best, tried, refused)
            if nxt is not None:
                contenders[i] = nxt
                continue
            i += 1
            continue
        if not _beats_seed(target, seed, best):
            which = "best" if i == 0 else "next contender"
            r.say(
                f"[{target.name}] no winner: {which} {best.id} ({best.objectives[0]:.6g}) is "
                f"not {target.min_gain:.0%} better than the seed ({seed.objectives[0]:.6g})"
            )
            return None
        won, evidence, reduced = _contend(r, c, seed, best)
        if won is not None:
            return won
        tried |= reduced
        # a program its final check found wrong says nothing of the next best one of its
        # structure (a knob apart, often): that one is tried next, a few times a night,
        # never one that measured exactly what a refused one did (a knob the plan does not
        # use, a comment: the same program in effect)
        if evidence.wrong:
            refused.append(_measured(best))
        nxt = _next_of_structure(archive, best, tried, refused)
        if evidence.wrong and retries < FINAL_CHECK_RETRIES and nxt is not None:
            retries += 1
            contenders.insert(i + 1, nxt)
        i += 1
    return None


def _contend(r: Run, c: Contest, seed: ArchiveEntry, best: ArchiveEntry,
             ) -> tuple[dict[str, Any] | None, Evidence, set[str]]:
    """``best`` reduced first (single measurements), then confirmed once: the minimal
    program when it holds, the contender as it was otherwise. The winner, if any, the
    last evidence, and the reduction tried (its id, when there was one)."""
    target = c.target
    confirm = _locked(functools.partial(_confirm, device_lock=c.device_lock), c.alone)
    reduction, base = None, reduction_base(c.archive, best)
    if c.evaluate is not None and c.max_trials > 0 and time.monotonic() < c.deadline:
        gate = Gate.of(seed.objectives[0], best.objectives[0], target.primary.minimize,
                       target.min_gain)
        reduction = reduce(c.evaluate, base, best, gate, max_trials=c.max_trials,
                           deadline=c.deadline, base_label=base.proposer or "seed")
    if reduction is not None and reduction.changed:
        evidence = confirm(r, target, c.evaluator, c.sandbox, seed, reduction.entry)
        if evidence.confirmed:
            r.say(f"[{target.name}] {best.id} reduced to {reduction.entry.id}: "
                  + "; ".join(reduction.notes)
                  + (f"; not tried: {', '.join(reduction.not_tried)}"
                     if reduction.not_tried else ""))
            evidence = dataclasses.replace(evidence, **_reduced_fields(best, reduction))
            return _won(r, c, reduction.entry, evidence), evidence, set()
        r.say(f"[{target.name}] reduction {reduction.entry.id} of {best.id} ("
              + "; ".join(reduction.notes)
              + (f"; not tried: {', '.join(reduction.not_tried)}" if reduction.not_tried
                 else "; complete")
              + f") not confirmed ({evidence.headline}); confirming {best.id} as it was")
    evidence = confirm(r, target, c.evaluator, c.sandbox, seed, best)
    if evidence.confirmed:
        evidence = dataclasses.replace(evidence, **_unreduced(reduction, base, best))
        return _won(r, c, best, evidence), evidence, set()
    r.say(f"[{target.name}] {best.id} not confirmed: {evidence.headline}")
    return None, evidence, {reduction.entry.id} if reduction is not None else set()


def _reduced_fields(best: ArchiveEntry, reduction: Reduction) -> dict[str, Any]:
    """What a winner's evidence says of the reduction it was published as: its steps, and
    whether it was complete or what it did not try."""
    return {"minimised_from": best.id, "reductions": tuple(reduction.notes),
            "not_tried": tuple(reduction.not_tried),
            "minimised": (f"fully reduced: every hunk and float knob tried "
                          f"({reduction.trials} trial(s))" if reduction.complete else "")}


def _unreduced(reduction: Reduction | None, base: ArchiveEntry, best: ArchiveEntry,
               ) -> dict[str, Any]:
    """What a winner published as it was found says of its reduction: complete with
    nothing to remove, cut short (what it did not try), its reduced program not confirmed,
    or none at all (no trial or time was left for it)."""
    if reduction is None:
        left = Plan.of(base.files, best.files).labels()
        return ({"minimised": "not reduced: no trial or time was left for it",
                 "not_tried": tuple(left)} if left else {"minimised": "nothing to remove"})
    if reduction.changed:
        return {"minimised": f"its reduction {reduction.entry.id} was not confirmed: "
                             "published as found", "not_tried": tuple(reduction.not_tried)}
    if reduction.complete:
        return {"minimised": f"nothing to remove ({reduction.trials} trial(s)); fully reduced"}
    return {"minimised": f"nothing removed in {reduction.trials} trial(s)",
            "not_tried": tuple(reduction.not_tried)}


def _won(r: Run, c: Contest, best: ArchiveEntry, evidence: Evidence) -> dict[str, Any]:
    publish = _locked(_publish, c.lock)
    winner = publish(r, c.target, c.evaluator, c.study, c.archive, best, evidence)
    r.say(f"[{c.target.name}] winner {best.id}: {evidence.headline} -> "
          f"{winner['pull_branch']}")
    return winner


def _next_of_structure(archive: Archive, entry: ArchiveEntry, tried: set[str],
                       refused: Sequence[Mapping[str, float]] = ()) -> ArchiveEntry | None:
    """The best candidate of ``entry``'s structure not tried yet (never the seed), nor one
    whose measurements equal a refused candidate's (:func:`_measured`)."""
    key = archive.structure_of.get(entry.id, entry.id)
    seed_id = archive.seed.id if archive.seed is not None else None
    return next((e for e in archive.ranked() if e.id not in tried and e.id != seed_id
                 and archive.structure_of.get(e.id, e.id) == key
                 and _measured(e) not in refused), None)


def _measured(entry: ArchiveEntry) -> dict[str, float]:
    """What an evaluation measured of a program, its stages' durations left out: equal for
    two programs only when they behaved alike on every measured figure (a deterministic
    target's plans that differ in a knob they do not use); a timed target's figures never
    repeat exactly."""
    figures = {k: v for k, v in entry.metrics.items() if not k.startswith("stage_s/")}
    if not figures:  # nothing measured to compare: like no other
        return {f"id {entry.id}": 0.0}
    return figures | {f"objective {i}": v for i, v in enumerate(entry.objectives)}


def best_contender(target: TargetSpec, archive: Archive) -> ArchiveEntry | None:
    """The candidate :func:`select_winner` would reduce and confirm first, if any: its best
    structure's best, when it beats a valid seed by ``min_gain``."""
    seed = archive.seed
    if seed is None or seed.state is not CandidateState.VALID or not seed.objectives:
        return None
    best = next(iter(_contenders(archive)), None)
    return best if best is not None and _beats_seed(target, seed, best) else None


def _contenders(archive: Archive) -> list[ArchiveEntry]:
    """The best candidate of each of the three best structures but the seed's."""
    assert archive.seed is not None
    return [e for e in archive.best_per_structure() if e.id != archive.seed.id][:3]


def _beats_seed(target: TargetSpec, seed: ArchiveEntry, entry: ArchiveEntry) -> bool:
    return stats.exact_improvement(seed.objectives[0], entry.objectives[0],
                                   minimize=target.primary.minimize, min_gain=target.min_gain)


def reduction_base(archive: Archive, best: ArchiveEntry) -> ArchiveEntry:
    """What a contender's change is reduced towards: the seed, or the declared start it
    descends from. A start is another structure written whole (``starts`` in target.toml);
    reverting its lines one by one to the seed's gives programs that do not compile (a
    GPU night spent 4 of its 8 cross-entropy candidates so), and its pull branch is read
    as that structure, with only the changes made to it since reduced away."""
    entry = best
    while entry.proposer != "start" and entry.parent_id:  # parents come before children
        try:
            entry = archive.get(entry.parent_id)
        except KeyError:  # a lineage the archive does not hold: reduce towards the seed
            break
    if entry.proposer == "start":
        return entry
    assert archive.seed is not None
    return archive.seed


def _locked(fn: Any, lock: Any) -> Any:
    """``fn`` called holding ``lock`` (when there is one)."""
    if lock is None:
        return fn

    @functools.wraps(fn)
    def held(*args: Any, **kwargs: Any) -> Any:
        with lock:
            return fn(*args, **kwargs)
    return held


def _confirm(
    r: Run,
    target: TargetSpec,
    evaluator: Evaluator,
    sandbox: Sandbox,
    seed: ArchiveEntry,
    best: ArchiveEntry,
    device_lock: Any = None,
) -> Evidence:
    """``best`` confirmed against ``seed`` in private copies of the target: the checks
    before the confirmation (:func:`_checks_before_confirmation`), then the measurement
    the kind asks for."""
    cand_dir, seed_dir = _materialize(r, target, best), _materialize(r, target, seed)
    timeout_s = max(r.config.sandbox.timeout_s or target.timeout_s, 60.0) * 4
    ctx = fresh_context(
        r.config, target, "confirm", sandbox, timeout_s=timeout_s, device=device_for(evaluator),
        device_lock=device_lock,
    )
    try:
        checked = _checks_before_confirmation(r, target, evaluator, ctx, (seed, seed_dir),
                                             (best, cand_dir))
        if not checked.confirmed:
            return checked
        evidence = _measure_win(r, target, evaluator, ctx, cand_dir, seed_dir, seed, best)
        return dataclasses.replace(evidence, final_check=checked.final_check,
                                   evidence_md=checked.evidence_md)
    finally:
        for d in (_materialized(r, target, best), _materialized(r, target, seed), ctx.io_dir,
                  ctx.scratch):
            shutil.rmtree(d, ignore_errors=True)


def _checks_before_confirmation(r: Run, target: TargetSpec, evaluator: Evaluator, ctx: Any,
                                seed: tuple[ArchiveEntry, Path],
                                best: tuple[ArchiveEntry, Path]) -> Evidence:
    """The one place where a would-be winner (``best``: its entry and the folder of its
    files) is checked before it is measured against the seed: on a deterministic target,
    the seed (once a night) and the program evaluated again in fresh processes
    (:mod:`optimizer.reproduce`); then the kind's final check. A program found wrong is
    ``wrong``: the next of its structure is tried."""
    failed = reproduce.before_confirmation(r.summary, target, evaluator, ctx, seed, best)
    if failed is not None:  # a deterministic target's program that does not repeat
        return Evidence(False, failed["headline"], wrong=bool(failed["wrong"]))
    cand_dir = best[1]
    final = evaluator.final_check(cand_dir, ctx)
    if final is not None and not final.ok:
        return Evidence(False, f"final check: {final.reason[:300]}", wrong=True)
    if final is None:
        return Evidence(True, "")
    return Evidence(True, "", final_check=final.reason,
                    evidence_md=str(final.artifacts.get("evidence.md", "")))


def _measure_win(
    r: Run,
    target: TargetSpec,
    evaluator: Evaluator,
    ctx: Any,
    cand_dir: Path,
    seed_dir: Path,
    seed: ArchiveEntry,
    best: ArchiveEntry,
) -> Evidence:
    """The confirmation the kind asks for: paired timing, or exact and held-out."""
    metric, minimize = target.primary.metric, target.primary.minimize
    if Confirmation(evaluator.confirmation()) is Confirmation.PAIRED:
        res = evaluator.compare(cand_dir, seed_dir, ctx, r.config.stats.confirm_repeats)
        if not res.ok:
            return Evidence(False, f"comparison failed: {res.reason[:200]}")
        ci = stats.paired_bootstrap_speedup(
            res.samples["baseline"],
            res.samples["candidate"],
            minimize=minimize,
            confidence=r.config.stats.confidence,
            n_boot=r.config.stats.n_boot,
            seed=r.config.seed,
        )
        ok = ci.significant(target.min_gain)
        head = (
            f"speedup {ci.speedup:.3f}x, {ci.confidence:.0%} CI [{ci.low:.3f}, "
            f"{ci.high:.3f}] over {ci.n} interleaved pairs (needs > {1 + target.min_gain:.2f})"
        )
        return Evidence(ok, head, kind="paired bootstrap", speedup=ci.speedup, low=ci.low,
                        high=ci.high, pairs=ci.n)
    gain = stats.relative_gain(seed.objectives[0], best.objectives[0], minimize=minimize)
    head = f"{metric} {seed.objectives[0]:.6g} -> {best.objectives[0]:.6g} ({gain:+.1%}, exact)"
    held_c = evaluator.held_out(cand_dir, ctx)
    held_s = evaluator.held_out(seed_dir, ctx) if held_c is not None else None
    if held_c is None or held_s is None:
        return Evidence(True, head + "; no held-out workload for this kind", kind="exact",
                        speedup=1 + gain)
    if not (held_c.ok and held_s.ok):
        bad = held_c if not held_c.ok else held_s
        return Evidence(False, f"held-out evaluation failed: {bad.reason[:200]}")
    hc, hs = held_c.metrics[metric], held_s.metrics[metric]
    ok = stats.exact_improvement(hs, hc, minimize=minimize, min_gain=target.min_gain)
    hgain = stats.relative_gain(hs, hc, minimize=minimize)
    head += f"; held-out {hs:.6g} -> {hc:.6g} ({hgain:+.1%})"
    return Evidence(ok, head, kind="exact + held-out", speedup=1 + gain, held_out_gain=hgain,
                    held_out_metrics={"seed": dict(held_s.metrics),
                                      "candidate": dict(held_c.metrics)})


def _metric_lines(seed: Mapping[str, float], cand: Mapping[str, float]) -> list[str]:
    def fmt(v: float | None) -> str:
        return "-" if v is None else f"{v:.6g}"

    seed, cand = program_metrics(seed), program_metrics(cand)
    return [
        f"- {name}: {fmt(seed.get(name))} -> {fmt(cand.get(name))}"
        for name in sorted(set(seed) | set(cand))
    ]


def _lineage(archive: Archive, entry: ArchiveEntry) -> list[ArchiveEntry]:
    chain = [entry]
    while chain[-1].parent_id:
        try:
            chain.append(archive.get(chain[-1].parent_id))
        except KeyError:
            break
    return list(reversed(chain))


def _pull_request_lines(r: Run, target: TargetSpec, study: optuna.Study, archive: Archive,
                        best: ArchiveEntry, evidence: Evidence, trial_number: int,
                        run_id: str) -> list[str]:
    """The pull request's text: title, evidence, metrics, knobs, reduction, lineage and
    records."""
    seed = archive.seed
    assert seed is not None
    metric = target.primary.metric
    change = f"{metric} {seed.objectives[0]:.4g} -> {best.objectives[0]:.4g}"
    if evidence.kind == "paired bootstrap":
        change += f", {evidence.speedup:.2f}x faster"
    title = f"{target.name}: {change} ({best.id})"
    lines = [
        title,
        "",
        f"Candidate {best.id} of experiment '{r.config.name}' (night {r.summary.night}) "
        f"improves `{target.primary.metric}` of target `{target.name}` over its seed.",
        "",
        "## Evidence",
        f"- {evidence.headline}",
        f"- Validation: passed every stage of the `{target.kind}` evaluator: static check, "
        "correctness against the target's trusted checks, performance"
        + (f"; before publishing, {evidence.final_check}" if evidence.final_check
           else "") + ".",
        *reproduce.pr_lines(r.summary, target.name, best.id),
        *(["", evidence.evidence_md.rstrip()] if evidence.evidence_md else []),
        "",
        "## Metrics (seed -> candidate)",
    ]
    lines += _metric_lines(seed.metrics, best.metrics)
    held = evidence.held_out_metrics
    if held:
        lines += ["", "## Held-out workload (seed -> candidate)"]
        lines += _metric_lines(held["seed"], held["candidate"])
    if best.knobs:
        lines += ["", "## Knobs", *(f"- {k} = {v!r}" for k, v in sorted(best.knobs.items()))]
    lines += _reduction_lines(evidence)
    lines += ["", "## Lineage"]
    for e in _lineage(archive, best):
        lines.append(f"- {e.id} ({e.proposer}): {e.summary[:160] or '-'}")
    lines += [
        "",
        "## Records",
        f"- MLflow run: {run_id} (experiment '{r.config.name}')",
        f"- Optuna study: {study.study_name}, trial {trial_number}",
        f"- Candidate branch: {r.ws.candidate_branch(target.name, best.id)}",
    ]
    return lines


def _reduction_lines(evidence: Evidence) -> list[str]:
    """The pull request's reduction section: each step kept, and whether the reduction was
    complete or what it did not try."""
    if evidence.reductions:
        lines = ["", f"## Minimised (from {evidence.minimised_from}, each step re-measured)",
                 *(f"- {note}" for note in evidence.reductions)]
    elif evidence.minimised or evidence.not_tried:
        lines = ["", "## Minimised"]
    else:
        return []
    if evidence.minimised:
        lines.append(f"- {evidence.minimised[0].upper()}{evidence.minimised[1:]}.")
    if evidence.not_tried:
        lines.append(f"- Reduction cut short: not tried: {', '.join(evidence.not_tried)}.")
    return lines


def _publish(
    r: Run,
    target: TargetSpec,
    evaluator: Evaluator,
    study: optuna.Study,
    archive: Archive,
    best: ArchiveEntry,
    evidence: Evidence,
) -> dict[str, Any]:
    seed = archive.seed
    assert seed is not None
    trial = next(
        t
        for t in study.get_trials(deepcopy=False)
        if CandidateRecord.from_trial(t).candidate == best.id
    )
    run_id = CandidateRecord.from_trial(trial).mlflow_run_id
    lines = _pull_request_lines(r, target, study, archive, best, evidence, trial.number, run_id)
    folder = type(evaluator).model_artifact
    if folder and run_id:
        try:
            version = r.tracker.register_model(run_id, folder, target.name)
            lines.append(f"- MLflow model: {target.name} version {version} (artifacts '{folder}')")
        except Exception as exc:  # noqa: BLE001 - the pull branch matters more than the registry
            log.warning("model of %s not registered: %s", best.id, exc)
    message = "\n".join(lines) + "\n"
    branch, sha = r.ws.make_pull_branch(target.name, target.rel_path, best.files, message)
    report = r.config.state_dir / "reports" / f"{r.config.name}-{target.name}-pr.md"
    report.write_text(message)
    if r.config.vcs.push:
        r.ws.push(r.config.vcs.push, [branch])
    held = evidence.held_out_metrics
    if held and run_id:
        r.tracker.log_night_metrics(
            run_id, {f"held_out.{k}": float(v) for k, v in held["candidate"].items()}
        )
    winner = {
        "candidate": best.id,
        "pull_branch": branch,
        "commit": sha,
        "mlflow_run_id": run_id,
        **evidence.to_json(),
    }
    study.set_user_attr("winner", winner)
    return winner
