"""One candidate's life: a proposal becomes a candidate with a trial and a branch
(:func:`admit`), is evaluated in its slot's sandbox (:func:`evaluate`) and recorded in the
stores and the archive (:func:`settle`). A proposal without usable code is a REJECTED
candidate (:func:`record_rejected`); a program already known is a DUPLICATE trial with no
candidate (:func:`record_duplicate`).

The walk of one proposal: propose -> admit (its knobs parsed once into a
:class:`optimizer.knobs.Declared`, the trial asked, the content hash and the branch) ->
evaluate -> settle (``optimizer.recording.save``, then the archive). The scheduler
(:mod:`optimizer.scheduler`) decides when and on which slot; this module does one
candidate.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Callable
from typing import Any

from optuna.trial import TrialState

from optimizer import knobs, search
from optimizer.archive import Archive
from optimizer.errors import ProposalError
from optimizer.evaluation import evaluate_candidate, io_dir_of, log_outputs
from optimizer.lane import Lane
from optimizer.night import Run
from optimizer.proposers._base import ProposalContext
from optimizer.recording import InFlight, running_message, save, start_run, write_attrs
from optimizer.records import (
    ArchiveEntry,
    Candidate,
    CandidateRecord,
    CandidateState,
    EvalResult,
    Proposal,
    content_hash,
)
from optimizer.slots import Slot
from optimizer.targets import broken_constraint

MAX_CONSTRAINED_ASKS = 16  # knob samples tried per proposal against the target's constraints

Guard = Callable[[str], contextlib.AbstractContextManager[Any]]


def _unguarded(part: str) -> contextlib.AbstractContextManager[Any]:
    return contextlib.nullcontext()


def propose(r: Run, context: ProposalContext) -> Proposal:
    """The proposer's answer; one that fails is a rejected proposal with the reason."""
    try:
        return r.proposer.propose(context)
    except ProposalError as exc:
        return Proposal(r.proposer.name, context.parent.id, {}, rejected=str(exc))


def record_usage(r: Run, lane: Lane, proposal: Proposal) -> None:
    """The proposal's LLM calls, in the ledger and the dollar budget."""
    if proposal.usage.calls:
        r.ledger.record(lane.target.name, proposal.usage)
        r.budget.spent_usd = r.ledger.usd


def admit(r: Run, lane: Lane, proposal: Proposal, ahead: search.AskAhead | None = None,
          guard: Guard = _unguarded) -> InFlight | bool:
    """Knob values, content hash and branch of a proposal: the candidate to evaluate, or
    True when it was recorded as rejected, False when it was a duplicate. ``ahead`` is its
    trial, asked while the proposal was made."""
    target, study, archive = lane.target, lane.study, lane.archive
    t0 = time.perf_counter()
    declared: knobs.Declared | None = None
    if proposal.rejected is None:
        try:
            declared = knobs.declared(proposal.files)
        except ProposalError as exc:
            proposal = dataclasses.replace(proposal, rejected=f"bad knob declaration: {exc}")
    if declared is None:
        record_rejected(r, lane, proposal, ahead, guard)
        return True
    asked = _ask(lane, proposal, declared, ahead)
    if isinstance(asked, str):
        record_rejected(r, lane, dataclasses.replace(proposal, rejected=asked), None, guard)
        return True
    trial, values = asked
    files = declared.substitute(values)
    digest = content_hash(files)
    # the content and an id claimed: atomically across workers
    known, cid = r.coordination.claim(lane, proposal, trial, digest, files, values,
                                      declared.structure,
                                      archive.hashes.get(digest) or archive.pending.get(digest))
    if known is not None:
        record_duplicate(study, trial, archive, known)
        lane.out.duplicates += 1
        return False
    cand = Candidate(
        id=cid,
        target=target.name, parent_id=proposal.parent_id, proposer=proposal.proposer,
        files=files, knobs=values, content_hash=digest, summary=proposal.summary,
        structure=declared.structure)
    archive.pending[digest] = cand.id
    record = CandidateRecord.of(cand, branch=r.ws.candidate_branch(target.name, cand.id))
    write_attrs(trial, record)  # RUNNING: a killed run finds it and finishes its record
    cand_dir, _ = r.ws.create_candidate(target.rel_path, target.name, cand.id, files,
                                        running_message(target, cand))
    io_dir = io_dir_of(r.config, target, cand.id)
    return InFlight(
        target=target, study=study, trial=trial, cand=cand, record=record, proposal=proposal,
        run=start_run(r, cand, record.branch, trial.number), cand_dir=cand_dir, io_dir=io_dir,
        cleanup=(None if r.config.vcs.keep_worktrees
                 else lambda: r.ws.remove_worktree(target.name, cand.id)),
        admitted_s=time.perf_counter() - t0)


def _ask(lane: Lane, proposal: Proposal, declared: knobs.Declared,
         ahead: search.AskAhead | None) -> tuple[Any, dict[str, Any]] | str:
    """A trial and its knob values that keep the target's constraints, or why none do
    (values the target says cannot work are never a candidate, and the sampler learns so)."""
    dists = declared.distributions()
    pinned = declared.values if proposal.fixed_as_written else proposal.fixed_knobs
    fixed = {k: v for k, v in pinned.items() if k in dists}
    names = lane.names.map(dists, declared.structure)
    broken: str | None = None
    for _ in range(MAX_CONSTRAINED_ASKS):
        trial, values = search.ask(lane.study, dists, names, fixed, ahead)
        ahead = None
        broken = broken_constraint(lane.target.knob_constraints, values)
        if broken is None:
            return trial, values
        search.set_user_attrs(trial, {"reason": f"knob values break {broken}",
                                      "state": "CONSTRAINED"})
        lane.study.tell(trial, state=TrialState.FAIL)
        if set(fixed) == set(dists):
            break  # the proposal fixed every value: asking again cannot help
    return f"knob values {values} break the target's constraint {broken}"


def evaluate(r: Run, lane: Lane, flight: InFlight, slot: Slot) -> tuple[EvalResult, str]:
    """The evaluator's stages on ``slot``'s sandbox; anything wrong is a state."""
    assert flight.cand_dir is not None
    return evaluate_candidate(r, lane.target, lane.evaluator, lane.sandbox(r, slot),
                              flight.cand.id, flight.cand_dir, slot=slot)


def settle(r: Run, lane: Lane, flight: InFlight, result: EvalResult, eval_log: str,
           guard: Guard = _unguarded) -> None:
    """Record an evaluated candidate everywhere (branch, trial; MLflow in the writer) and in
    the archive. ``guard(part)`` is held around each part ("git", "optuna", "state")."""
    t1 = time.perf_counter()
    with guard("state"):
        best_before = lane.archive.best()
    io_dir = flight.io_dir
    assert io_dir is not None
    flight.outputs = lambda run_id: log_outputs(r, lane.evaluator, run_id, result, io_dir)
    save(r, flight, result, eval_log, guard=guard)
    with guard("state"):
        _add_to_archive(r, lane, flight, result, best_before, t1)


def _add_to_archive(r: Run, lane: Lane, flight: InFlight, result: EvalResult,
                    best_before: ArchiveEntry | None, t1: float) -> None:
    archive, cand = lane.archive, flight.cand
    entry = ArchiveEntry.of(cand, result)
    archive.add(entry, cand.structure, cand.content_hash)
    _count(r, lane, entry, result)
    lane.out.eval_s.append(result.cost_s)
    proposal = flight.proposal
    assert proposal is not None
    if proposal.proposer == "seed":
        lane.seed_cost_s = result.cost_s
    best = archive.best()
    if proposal.usage.calls and best is not None and best is not best_before:
        r.ledger.mark_improvement(lane.target.name, candidate=best.id,
                                  model=proposal.usage.model)
    r.summary.engine_overhead_ms.append((flight.admitted_s + time.perf_counter() - t1) * 1000)
    say_candidate(r, lane, entry, result)


def _count(r: Run, lane: Lane, entry: ArchiveEntry, result: EvalResult) -> None:
    r.proposer.observe(entry)
    r.budget.candidates += 1
    lane.out.candidates += 1


def record_rejected(r: Run, lane: Lane, proposal: Proposal,
                    ahead: search.AskAhead | None = None, guard: Guard = _unguarded) -> None:
    """A proposal without usable code: a REJECTED candidate with a trial and a run, no branch."""
    target, study, archive = lane.target, lane.study, lane.archive
    trial = ahead.take(sampled=False) if ahead is not None else study.ask()
    result = EvalResult(CandidateState.REJECTED, str(proposal.rejected), "proposal")
    cid = r.coordination.claim_id(lane, proposal, trial)
    cand = Candidate(id=cid, target=target.name, parent_id=proposal.parent_id,
                     proposer=proposal.proposer, files={}, knobs={}, content_hash="",
                     summary=proposal.summary)
    record = CandidateRecord.of(cand)
    write_attrs(trial, record)
    save(r, InFlight(target=target, study=study, trial=trial, cand=cand, record=record,
                     proposal=proposal), result, guard=guard)
    entry = ArchiveEntry.of(cand, result, files=proposal.files)
    archive.add(entry, "rejected")
    _count(r, lane, entry, result)
    say_candidate(r, lane, entry, result)


def record_duplicate(study: Any, trial: Any, archive: Archive, of: str) -> None:
    """Not evaluated: no candidate id, branch or run; the sampler learns the known value."""
    write_attrs(trial, CandidateRecord(state=CandidateState.DUPLICATE, duplicate_of=of),
                before_tell=True)
    original = None if of in archive.pending.values() else archive.get(of)  # under evaluation
    if original is not None and original.state is CandidateState.VALID and original.objectives:
        study.tell(trial, list(original.objectives))
    else:
        study.tell(trial, state=TrialState.FAIL)


def say_candidate(r: Run, lane: Lane, entry: ArchiveEntry, result: EvalResult) -> None:
    target, archive = lane.target, lane.archive
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


def one_candidate(r: Run, lane: Lane, slot: Slot, proposal: Proposal,
                  lock: Any = None) -> bool:
    """A proposal made into an evaluated candidate now, on ``slot`` (a reduced program of
    the winners' phase, a lost worker's candidate run again); False when it was a
    duplicate. With ``lock``, admitting and recording hold it (other threads make
    candidates meanwhile)."""
    turn = lock or contextlib.nullcontext()
    with turn, r.writer.held():  # the writer's jobs run while the candidate is evaluated
        flight = admit(r, lane, proposal)
    if not isinstance(flight, InFlight):
        return flight
    with r.writer.runs():
        result, eval_log = evaluate(r, lane, flight, slot)
    with turn, r.writer.held():
        settle(r, lane, flight, result, eval_log)
    return True
