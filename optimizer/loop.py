"""The nightly loop: propose, apply, ask, commit, evaluate, tell, log; then pick winners.

Read :func:`run` and :func:`optimize_target` top to bottom; the helpers below them do one
thing each. Per candidate the order is chosen so that a run killed at any point can be
resumed with Optuna, MLflow and git agreeing: ask (trial RUNNING) -> branch -> evaluate ->
annotate branch -> MLflow run -> tell. ``--resume`` turns trials left RUNNING into FAILED
("interrupted") everywhere, or tells them their recorded result when it was complete.
"""

from __future__ import annotations

import dataclasses
import json
import random
import time
from collections.abc import Callable
from typing import Any

import optuna
from optuna.trial import TrialState

import evaluators
from evaluators._base import Evaluator
from optimizer import knobs, search
from optimizer.accounting import Ledger, Prices
from optimizer.archive import Archive
from optimizer.budget import Budget, StopOnSigint
from optimizer.config import ExperimentConfig, TargetEntry
from optimizer.errors import ProposalError
from optimizer.evaluation import evaluate_candidate, io_dir_of, log_outputs, make_sandbox
from optimizer.night import (
    Run,
    RunSummary,
    TargetSummary,
    night_metrics,
    open_night,
    trace_llm_calls,
)
from optimizer.proposers._base import ProposalContext, Proposer
from optimizer.recording import running_message, save, write_attrs
from optimizer.records import (
    ArchiveEntry,
    Candidate,
    CandidateRecord,
    CandidateState,
    EvalResult,
    Proposal,
    content_hash,
)
from optimizer.resume import load_archive, recover_interrupted
from optimizer.sandbox import Sandbox
from optimizer.stores import enable_fast_sqlite
from optimizer.targets import TargetSpec
from optimizer.tracking import Tracker
from optimizer.vcs import Workspace
from optimizer.winners import select_winner

MAX_DUPLICATES_IN_A_ROW = 40
CONFIRM_SHARE = 0.15  # of a target's time slice, kept for confirming its winner at least
MAX_CONFIRM_SHARE = 0.5  # and at most, however slow its evaluations

# Run, RunSummary and TargetSummary live in optimizer.night; re-exported for callers.
__all__ = ["CONFIRM_SHARE", "Run", "RunSummary", "TargetSummary", "optimize_target", "run"]


# -- the loop --------------------------------------------------------------------------


def run(
    config: ExperimentConfig,
    *,
    resume: bool = False,
    proposer: Proposer | None = None,
    say: Callable[[str], None] = print,
) -> RunSummary:
    """Optimise every target of ``config`` within its budget; return what happened."""
    ws = Workspace(
        config.workspace, experiment=config.name, state_dir=config.state_dir, base=config.base
    )
    enable_fast_sqlite()
    for sub in ("reports", "logs", "cache", "worktrees"):
        (config.state_dir / sub).mkdir(parents=True, exist_ok=True)
    tracker = Tracker(config.tracking_uri, config.name, config.state_dir / "mlartifacts")
    night, parent_run_id = open_night(config, tracker, resume)
    summary = RunSummary(config.name, night, parent_run_id)
    budget = Budget(config.budget.minutes, config.budget.max_candidates, config.budget.usd)
    from optimizer.proposers import make_proposer

    the_proposer = proposer or make_proposer(config, night)
    if config.proposer.kind == "llm":
        trace_llm_calls(config)
    settings = getattr(the_proposer, "settings", None)
    ledger = Ledger(getattr(settings, "prices", None) or Prices())
    r = Run(config, ws, tracker, the_proposer, budget, ledger, summary, say)
    say(
        f"night {night} of experiment '{config.name}': {len(config.targets)} target(s), "
        f"{config.budget.minutes:g} min, proposer {the_proposer.name}"
    )
    try:
        with StopOnSigint(budget):
            shares_left = sum(t.share for t in config.targets)
            for entry in config.targets:
                slice_s = budget.remaining_s() * entry.share / shares_left
                shares_left -= entry.share
                summary.targets.append(optimize_target(r, entry, time.monotonic() + slice_s))
                if budget.stop.is_set() or summary.stop_reason:
                    break
        summary.stop_reason = summary.stop_reason or budget.exhausted() or "all targets done"
    finally:
        the_proposer.close()
        tracker.log_night_metrics(parent_run_id, night_metrics(summary, ledger))
        accounts = config.state_dir / "reports" / f"{config.name}-{night}-llm-usage.json"
        accounts.write_text(json.dumps(ledger.summary(), indent=2))
        tracker.log_artifact_file(parent_run_id, accounts)
        tracker.end_night(parent_run_id, "KILLED" if budget.stop.is_set() else "FINISHED")
        (config.state_dir / "reports" / f"{config.name}-{night}.json").write_text(
            json.dumps(summary.to_json(), indent=2)
        )
    return summary


def optimize_target(r: Run, entry: TargetEntry, deadline: float) -> TargetSummary:
    target = entry.spec
    out = TargetSummary(target.name)
    evaluator = evaluators.get(target.kind)(target)
    study = search.open_study(
        r.config.optuna_storage,
        r.config.name,
        target,
        search.make_sampler(
            r.config.search.sampler,
            r.config.seed,
            r.config.search.n_startup_trials,
            len(target.objectives) > 1,
        ),
    )
    names = search.ParamNames(study)
    archive = Archive(target)
    recover_interrupted(r, study, target)
    load_archive(r, study, target, archive)
    earlier = len(archive.entries)  # candidates of earlier nights
    rng = random.Random(f"{r.config.seed}/{target.name}/{len(archive.entries)}")
    slice_s = max(0.0, deadline - time.monotonic())
    search_deadline = deadline - CONFIRM_SHARE * slice_s
    dup_streak = 0
    kind_text, trusted_files = evaluator.prompt_text(), evaluator.prompt_files()
    with make_sandbox(r.config, target, evaluator) as sandbox:
        if archive.seed is None:
            seed_files = target.seed_files()
            seed = Proposal(
                "seed",
                None,
                seed_files,
                "the target's seed program",
                fixed_knobs=knobs.values_of(seed_files),
            )
            _candidate(r, target, evaluator, sandbox, study, names, archive, seed, out)
        if archive.seed is None or archive.seed.state is not CandidateState.VALID:
            why = archive.seed.reason if archive.seed else "not evaluated"
            if archive.seed is not None and archive.seed.state is CandidateState.PRUNED:
                out.note = f"seed not measured here ({why[:300]}); skipped on this machine"
            else:
                out.note = f"seed program is not valid ({why[:300]}); nothing to optimise against"
            r.say(f"[{target.name}] {out.note}")
            return _finish_summary(out, archive, earlier)
        if out.eval_s:  # the seed's cost says what confirming a winner will take
            search_deadline = deadline - _winner_reserve(r, evaluator, out.eval_s[0], slice_s)
        # the target's other starting programs come first, each a structure of its own
        starts = [s for s in target.starts
                  if content_hash(target.start_files(s)) not in archive.hashes]
        while True:
            next_usd = r.ledger.estimate_next_usd(target.name) if r.budget.usd else 0.0
            stop = r.budget.exhausted(next_usd)
            if stop:  # a budget of the whole run: no other target starts either
                r.summary.stop_reason = stop
                break
            if time.monotonic() >= search_deadline:
                break
            if entry.max_candidates and out.candidates >= entry.max_candidates:
                break
            if starts:
                start = starts.pop(0)
                files = target.start_files(start)
                _candidate(r, target, evaluator, sandbox, study, names, archive,
                           Proposal("start", archive.seed.id, files, f"the target's start "
                                    f"{start}", fixed_knobs=knobs.values_of(files)), out)
                continue
            parent = archive.pick_parent(rng)
            context = ProposalContext(
                target=target,
                parent=parent,
                seed=archive.seed,
                inspirations=archive.inspirations(parent, rng),
                feedback=archive.feedback(),
                rng_seed=r.config.seed,
                iteration=len(archive.entries) + out.duplicates,
                structures_seen=archive.structures(),
                kind_text=kind_text,
                trusted_files=trusted_files,
            )
            try:
                proposal = r.proposer.propose(context)
            except ProposalError as exc:
                proposal = Proposal(r.proposer.name, parent.id, {}, rejected=str(exc))
            if proposal.usage.calls:
                r.ledger.record(target.name, proposal.usage)
                r.budget.spent_usd = r.ledger.usd
            best_before = archive.best()
            evaluated = _candidate(
                r, target, evaluator, sandbox, study, names, archive, proposal, out
            )
            dup_streak = 0 if evaluated else dup_streak + 1
            best = archive.best()
            if proposal.usage.calls and best is not None and best is not best_before:
                r.ledger.mark_improvement(
                    target.name, candidate=best.id, model=proposal.usage.model
                )
            if dup_streak >= MAX_DUPLICATES_IN_A_ROW:
                out.note = f"stopped early: {dup_streak} duplicate proposals in a row"
                break
        if not r.budget.stop.is_set():

            def trial(files: dict[str, str], summary: str, parent: str) -> ArchiveEntry | None:
                """A reduced program, evaluated as a candidate of its own."""
                proposal = Proposal("minimize", parent, files, summary,
                                    fixed_knobs=knobs.values_of(files))
                _candidate(r, target, evaluator, sandbox, study, names, archive, proposal, out)
                cid = archive.hashes.get(content_hash(files))
                return archive.get(cid) if cid else None

            # reduction trials are candidates too: they count against the budgets
            left = [r.config.stats.minimize_trials]
            if r.config.budget.max_candidates:
                left.append(r.config.budget.max_candidates - r.budget.candidates)
            if entry.max_candidates:
                left.append(entry.max_candidates - out.candidates)
            out.winner = select_winner(r, target, evaluator, sandbox, study, archive,
                                       evaluate=trial, deadline=deadline,
                                       max_trials=max(0, min(left)))
    return _finish_summary(out, archive, earlier)


def _candidate(
    r: Run,
    target: TargetSpec,
    evaluator: Evaluator,
    sandbox: Sandbox,
    study: optuna.Study,
    names: search.ParamNames,
    archive: Archive,
    proposal: Proposal,
    out: TargetSummary,
) -> bool:
    """Turn one proposal into an evaluated candidate; False when it was a duplicate."""
    t0 = time.perf_counter()
    if proposal.rejected is None:
        try:
            knob_set = knobs.knobs_of_files(proposal.files)
        except ProposalError as exc:
            proposal = dataclasses.replace(proposal, rejected=f"bad knob declaration: {exc}")
    if proposal.rejected is not None:
        _record_rejected(r, target, study, archive, proposal, out)
        return True
    dists = knobs.distributions(knob_set.values())
    structure = knobs.structure_key(proposal.files)
    fixed = {k: v for k, v in proposal.fixed_knobs.items() if k in dists}
    trial, values = search.ask(study, dists, names.map(dists, structure), fixed)
    files = knobs.substitute_files(proposal.files, values)
    digest = content_hash(files)
    if digest in archive.hashes:
        _record_duplicate(study, trial, archive, archive.hashes[digest])
        out.duplicates += 1
        return False
    cand = Candidate(
        archive.next_id(),
        target.name,
        proposal.parent_id,
        proposal.proposer,
        files,
        values,
        digest,
        proposal.summary,
        structure,
    )
    record = CandidateRecord.of(cand)
    write_attrs(trial, record)  # RUNNING: a killed run finds it and finishes its record
    cand_dir = r.ws.create_worktree(target.rel_path, target.name, cand.id, files)
    r.ws.commit_candidate(target.name, cand.id, running_message(target, cand))
    record = dataclasses.replace(record, branch=r.ws.candidate_branch(target.name, cand.id))
    trial.set_user_attr("branch", record.branch)
    overhead = time.perf_counter() - t0

    result, eval_log = evaluate_candidate(r, target, evaluator, sandbox, cand.id, cand_dir)

    t1 = time.perf_counter()
    io_dir = io_dir_of(r.config, target, cand.id)
    save(
        r,
        target,
        study,
        trial,
        record,
        cand,
        result,
        prompt=proposal.prompt,
        response=proposal.response,
        eval_log=eval_log,
        outputs=lambda run_id: log_outputs(r, evaluator, run_id, result, io_dir),
    )
    if not r.config.vcs.keep_worktrees:
        r.ws.remove_worktree(target.name, cand.id)
    entry = ArchiveEntry.of(cand, result)
    archive.add(entry, structure, digest)
    r.proposer.observe(entry)
    r.budget.candidates += 1
    out.candidates += 1
    out.eval_s.append(result.cost_s)
    overhead += time.perf_counter() - t1
    r.summary.engine_overhead_ms.append(overhead * 1000)
    _say_candidate(r, target, archive, entry, result)
    return True


def _record_rejected(
    r: Run,
    target: TargetSpec,
    study: optuna.Study,
    archive: Archive,
    proposal: Proposal,
    out: TargetSummary,
) -> None:
    """A proposal without usable code: a REJECTED candidate with a trial and a run, no branch."""
    trial = study.ask()
    result = EvalResult(CandidateState.REJECTED, str(proposal.rejected), "proposal")
    cand = Candidate(
        archive.next_id(),
        target.name,
        proposal.parent_id,
        proposal.proposer,
        {},
        {},
        "",
        proposal.summary,
    )
    record = CandidateRecord.of(cand)
    write_attrs(trial, record)
    save(r, target, study, trial, record, cand, result, prompt=proposal.prompt,
         response=proposal.response)
    entry = ArchiveEntry.of(cand, result, files=proposal.files)
    archive.add(entry, "rejected")
    r.proposer.observe(entry)
    r.budget.candidates += 1
    out.candidates += 1
    _say_candidate(r, target, archive, entry, result)


def _record_duplicate(study: optuna.Study, trial: Any, archive: Archive, of: str) -> None:
    """Not evaluated: no candidate id, branch or run; the sampler learns the known value."""
    write_attrs(trial, CandidateRecord(state=CandidateState.DUPLICATE, duplicate_of=of))
    original = archive.get(of)
    if original.state is CandidateState.VALID and original.objectives:
        study.tell(trial, list(original.objectives))
    else:
        study.tell(trial, state=TrialState.FAIL)


def _say_candidate(
    r: Run, target: TargetSpec, archive: Archive, entry: ArchiveEntry, result: EvalResult
) -> None:
    best = archive.best()
    metric = target.primary.metric
    value = f"{metric}={entry.objectives[0]:.6g}" if entry.objectives else result.reason[:90]
    best_s = f"best {best.objectives[0]:.6g} ({best.id})" if best else "no valid candidate yet"
    left = r.budget.remaining_s() / 60
    r.say(
        f"[{target.name}] {entry.id} {entry.state.value:<9} "
        f"{value.splitlines()[0] if value else ''}"
        f" | {best_s} | {entry.proposer} | {left:.1f} min left"
    )


def _winner_reserve(r: Run, evaluator: Evaluator, eval_s: float, slice_s: float) -> float:
    """Seconds of a target's slice kept for its winner: the reduction's trials and the
    confirmation (paired repetitions of candidate and seed, or the two held-out runs), at
    the seed's evaluation cost; between CONFIRM_SHARE and MAX_CONFIRM_SHARE of the slice.
    (A fixed 15% left a timed target's confirmation, 30 evaluations, running 1.2 minutes
    past a 50-second slice in the nightly, and the targets after it got less.)"""
    confirm = 2 * r.config.stats.confirm_repeats if evaluator.confirmation() == "paired" else 2
    wanted = (confirm + r.config.stats.minimize_trials) * eval_s
    return min(MAX_CONFIRM_SHARE * slice_s, max(CONFIRM_SHARE * slice_s, wanted))


def _finish_summary(out: TargetSummary, archive: Archive, earlier: int) -> TargetSummary:
    """States of this night's candidates; seed and best over every night of the study."""
    for e in archive.entries[earlier:]:
        out.states[e.state.value] = out.states.get(e.state.value, 0) + 1
    if archive.seed and archive.seed.objectives:
        out.seed_value = archive.seed.objectives[0]
    best = archive.best()
    if best:
        out.best_value, out.best_candidate = best.objectives[0], best.id
    return out
