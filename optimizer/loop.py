"""The night's entry points: :func:`run` (``optimizer run``), :func:`share_the_night`
(several slots, proposals or workers: every target at once) and :func:`optimize_target`
(one target in its slice: the serial loop). Read them top to bottom; each job has a module
of its own:

- :mod:`optimizer.lane`: a target's lane (evaluator, study, archive) and its time;
- :mod:`optimizer.scheduler`: the one scheduler (slots, proposals in flight, recording);
  the serial loop is it with one slot and one proposal in flight;
- :mod:`optimizer.candidate`: one candidate's life (admit, evaluate, settle);
- :mod:`optimizer.winners_phase`: the winners' phase (in turn or side by side).

Per candidate the order is chosen so that a run killed at any point can be resumed with
Optuna, MLflow and git agreeing: ask (trial RUNNING) -> branch -> evaluate -> annotate
branch -> tell, then the MLflow run's contents in the background writer
(``optimizer.recording``). ``--resume`` turns trials left RUNNING into FAILED
("interrupted") everywhere, tells them their recorded result when it was complete, and
finishes the MLflow runs the writer had not.
"""

from __future__ import annotations

import contextlib
import functools
import json
import shutil
import threading
import time
from collections.abc import Callable
from typing import Any

from optimizer import slots as slot_plan
from optimizer.accounting import Ledger, Prices
from optimizer.budget import Budget, StopOnSigint
from optimizer.config import ExperimentConfig, TargetEntry
from optimizer.coordination import Alone
from optimizer.evaluation import device_for, fresh_context
from optimizer.kinds import EvalContext, Evaluator
from optimizer.lane import (
    CONFIRM_SHARE,
    Horizon,
    Lane,
    finish_summary,
    night_width,
    open_lane,
    seed_is_valid,
)
from optimizer.night import (
    Run,
    RunSummary,
    TargetSummary,
    Writer,
    night_metrics,
    open_night,
    trace_llm_calls,
)
from optimizer.proposers._base import Proposer
from optimizer.scheduler import Policy, Scheduler, join
from optimizer.stores import enable_fast_sqlite
from optimizer.tracking import Tracker
from optimizer.vcs import Workspace
from optimizer.winners_phase import select_lane_winner, select_winners

# Run, RunSummary and TargetSummary live in optimizer.night; re-exported for callers.
__all__ = ["CONFIRM_SHARE", "Run", "RunSummary", "TargetSummary", "in_turn",
           "optimize_target", "prepare_night", "run", "share_the_night", "spend_night",
           "warm_the_slots"]



# -- the night ------------------------------------------------------------------------


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
    writer = Writer()
    r = Run(config, ws, tracker, the_proposer, budget, ledger, summary, say, writer,
            Alone())
    say(
        f"night {night} of experiment '{config.name}': {len(config.targets)} target(s), "
        f"{config.budget.minutes:g} min, proposer {the_proposer.name}"
    )

    def finish() -> None:
        tracker.log_night_metrics(parent_run_id, night_metrics(summary, ledger))
        accounts = config.state_dir / "reports" / f"{config.name}-{night}-llm-usage.json"
        accounts.write_text(json.dumps(ledger.summary(), indent=2))
        tracker.log_artifact_file(parent_run_id, accounts)
        tracker.end_night(parent_run_id, "KILLED" if budget.stop.is_set() else "FINISHED")
        (config.state_dir / "reports" / f"{config.name}-{night}.json").write_text(
            json.dumps(summary.to_json(), indent=2)
        )

    try:
        wide = night_width(config) > 1 or config.proposer.concurrency > 1
        return spend_night(r, share_the_night if wide else in_turn, finish)
    finally:
        ws.close()


def spend_night(r: Run, search: Callable[[Run], list[TargetSummary]],
                finish: Callable[[], None], *held: contextlib.AbstractContextManager[Any],
                ) -> RunSummary:
    """The night's skeleton, one for ``optimizer run`` and ``optimizer worker``: the
    targets' searches and winners (``search``) while ``held`` are (a worker's heartbeat)
    and a first Ctrl-C stops after the current candidates; then every record written,
    the proposer closed and the night's ending (``finish``: its metrics, reports and
    parent run), whatever happened."""
    try:
        with contextlib.ExitStack() as stack:
            for context in (*held, StopOnSigint(r.budget)):
                stack.enter_context(context)
            r.summary.targets.extend(search(r))
        r.summary.stop_reason = (r.summary.stop_reason or r.budget.exhausted()
                                 or "all targets done")
        r.writer.flush()
    finally:
        r.writer.close()  # what is queued is written; an error was raised by flush above
        r.proposer.close()
        finish()
    return r.summary


def in_turn(r: Run) -> list[TargetSummary]:
    """The serial night: each target in turn gets its share of what is left."""
    out: list[TargetSummary] = []
    shares_left = sum(t.share for t in r.config.targets)
    for entry in r.config.targets:
        slice_s = r.budget.remaining_s() * entry.share / shares_left
        shares_left -= entry.share
        out.append(optimize_target(r, entry, time.monotonic() + slice_s))
        if r.budget.stop.is_set() or r.summary.stop_reason:
            break
    return out


def share_the_night(r: Run) -> list[TargetSummary]:
    """Every target's search at once on the night's slots: a free slot takes the next job
    of the target furthest behind its share (``optimizer.sharing``), so a slow seed or a
    target that runs out of ideas leaves no slot idle. The searches end at the night's
    deadline less what the targets keep for their winners; then the targets' winners are
    selected side by side, one slot each, or in turn, each in its part of what is left,
    when a target's kind runs alone or there is one slot. ``optimizer worker`` runs it
    too: every worker searches every target, and each target's winner is selected by the
    one worker that claims it (``winners_phase.select_winners``)."""
    horizon = Horizon(time.monotonic() + r.budget.remaining_s(), shared=True)
    lanes = [open_lane(r, entry, horizon) for entry in r.config.targets]
    night_s = max(0.0, horizon.deadline - time.monotonic())
    total = sum(lane.entry.share for lane in lanes)
    width = night_width(r.config)
    locks: dict[object, object] = {}  # one timing lock per device, whichever target times on it
    side_by_side = width > 1 and not any(lane.alone for lane in lanes)
    horizon.winners_at_once = width if side_by_side else 1
    for lane in lanes:
        lane.set_slice(night_s * lane.entry.share / total)
        # a kind that cannot evaluate beside others has the machine to itself (the Gate)
        lane.slots = slot_plan.plan(1 if lane.alone else width,
                                    type(lane.evaluator).uses_gpu, locks=locks)
    try:
        prepare_night(r, lanes)
        warm_the_slots(r, lanes, width)
        Scheduler(r, lanes, Policy.concurrent(width, r.config.proposer.concurrency)).run()
        r.writer.flush()  # the searches' runs are complete before winners read them
        r.coordination.searched(lanes)
        chosen = [lane for lane in lanes if seed_is_valid(r, lane)]
        select_winners(r, chosen, width if side_by_side else 1, horizon.deadline)
    finally:
        for lane in lanes:
            lane.close_sandboxes()
    return [finish_summary(lane.out, lane.archive, lane.earlier) for lane in lanes]


def optimize_target(r: Run, entry: TargetEntry, deadline: float) -> TargetSummary:
    """One target within its slice of the night (the serial loop of ``run``: the
    scheduler with one slot and one proposal in flight, unless the target's kind or the
    configuration plans more)."""
    lane = open_lane(r, entry, Horizon(deadline))
    lane.set_slice(max(0.0, deadline - time.monotonic()))
    # a kind that cannot evaluate in several threads gets one slot, and the whole machine
    wanted = r.config.run.slots if not lane.alone else 1
    lane.slots = slot_plan.plan(wanted, type(lane.evaluator).uses_gpu)
    serial = len(lane.slots) == 1 and r.config.proposer.concurrency == 1
    policy = (Policy.serial(ask_ahead=r.coordination.one_writer) if serial
              else Policy.concurrent(len(lane.slots), r.config.proposer.concurrency))
    try:
        warm_the_slots(r, [lane], len(lane.slots))
        Scheduler(r, [lane], policy).run()
        if not seed_is_valid(r, lane):
            return finish_summary(lane.out, lane.archive, lane.earlier)
        r.writer.flush()  # the search's runs are complete before winners read them
        if not r.budget.stop.is_set():
            lane.out.winner = select_lane_winner(r, lane, deadline)
    finally:
        lane.close_sandboxes()
    r.writer.flush()
    return finish_summary(lane.out, lane.archive, lane.earlier)


def prepare_night(r: Run, lanes: list[Lane]) -> None:
    """On a GPU night, before the first candidate: every slot's sandbox of every GPU
    target started (each warm process imports torch and Triton, 4-8 s with twenty at once)
    and each evaluator's night-wide trusted work done (``Evaluator.prepare``: the kernel
    kind's cases and references), all at once. Before, the first evaluation of each target
    on each slot paid its sandbox's start, and each seed its target's references: seeds took
    13-33 s on an NVIDIA H200 (2026-12-03). A failure here is said and left for the
    evaluation that meets it again (a sandbox that cannot start fails its candidate)."""
    jobs: list[tuple[str, Callable[[], None]]] = []
    for lane in lanes:
        device = device_for(lane.evaluator)
        if device != "cuda":
            continue
        ctx = fresh_context(r.config, lane.target, "prepare", None,
                            timeout_s=lane.target.timeout_s, device=device)
        jobs.append((f"{lane.target.name}: prepare",
                     functools.partial(_prepare_lane, lane.evaluator, ctx)))
        for slot in lane.slots:
            jobs.append((f"{lane.target.name}: sandbox of slot {slot.index}",
                         lane.sandbox(r, slot).warm_up))
    if not jobs:
        return
    t0 = time.monotonic()
    failed: list[str] = []

    def run(name: str, job: Callable[[], None]) -> None:
        try:
            job()
        except Exception as exc:  # noqa: BLE001 - the evaluation that needs it fails instead
            failed.append(f"{name}: {type(exc).__name__}: {exc}")

    threads = [threading.Thread(target=run, args=job, daemon=True) for job in jobs]
    for t in threads:
        t.start()
    join(*threads)
    took = time.monotonic() - t0
    r.summary.prepare_s = took
    r.say(f"night prepared in {took:.1f} s: {len(jobs)} jobs (sandbox starts, references)"
          + (f"; failed: {'; '.join(failed)[:500]}" if failed else ""))


def warm_the_slots(r: Run, lanes: list[Lane], width: int) -> None:
    """With fewer targets than slots, every slot evaluates the targets' candidates from the
    night's first minute: each slot's sandbox of each CPU target starts in the background
    while the seeds are evaluated, instead of inside a slot's first candidate (0.25-0.4 s
    on 2 cores for the function kind). With as many targets as slots or more, each sandbox
    starts when a slot first needs it: a kernel night of 5 targets on 4 slots would start 20
    processes of torch at once, most of them for candidates a short night never makes.
    (:func:`prepare_night` starts every GPU target's.)"""
    if width < 2 or len(lanes) >= width:
        return
    for lane in lanes:
        if device_for(lane.evaluator) != "cuda" and not lane.alone:
            lane.warm_sandboxes(r)


def _prepare_lane(evaluator: Evaluator, ctx: EvalContext) -> None:
    try:
        evaluator.prepare(ctx)
    finally:  # its own (empty) io and scratch folders; what it made lives in the cache
        shutil.rmtree(ctx.io_dir, ignore_errors=True)
        shutil.rmtree(ctx.scratch, ignore_errors=True)


