"""A target's lane within a night: its evaluator, study and archive, the part of the night
it has (:class:`Horizon`: when its search ends, what it keeps for its winner), its slots'
sandboxes, and what its night came to (:func:`finish_summary`).

A lane holds no scheduling state: what is queued, being made or in flight is the
scheduler's (:mod:`optimizer.scheduler`).
"""

from __future__ import annotations

import dataclasses
import logging
import random
import statistics
import threading

import optuna

from optimizer import kinds as evaluators
from optimizer import search
from optimizer import slots as slot_plan
from optimizer.archive import Archive
from optimizer.config import ExperimentConfig, TargetEntry
from optimizer.evaluation import log_outputs, make_sandbox
from optimizer.kinds import Evaluator
from optimizer.minimize import planned_trials
from optimizer.night import Run, TargetSummary
from optimizer.records import SEED_ID, CandidateState, Proposal, content_hash
from optimizer.sandbox import Sandbox
from optimizer.slots import Slot
from optimizer.targets import TargetSpec
from optimizer.winners import best_contender, reduction_base

CONFIRM_SHARE = 0.15  # of a target's part of the night, kept for confirming its winner at least
MAX_CONFIRM_SHARE = 0.5  # and at most, however slow its evaluations
FALLBACK_TRIALS = 12  # a winner's reduction trials, priced before its contender is known
TYPICAL_OF = 10  # candidates whose median cost prices a shared night's winner reserve


@dataclasses.dataclass
class Horizon:
    """When a search ends: the deadline less what its targets keep for their winners (one
    target's slice, or every target of a shared night)."""

    deadline: float
    shared: bool = False  # several targets' searches at once (share_the_night)
    reserved_s: dict[str, float] = dataclasses.field(default_factory=dict)  # by target
    winners_at_once: int = 1  # winners selected side by side at the end (on as many slots)

    @property
    def search_end(self) -> float:
        """The deadline less the winners' time: their reserves in turn, or side by side
        the longest of them (their sum shared by the slots when it is more)."""
        kept = list(self.reserved_s.values())
        if not kept:
            return self.deadline
        return self.deadline - max(max(kept), sum(kept) / max(1, self.winners_at_once))


@dataclasses.dataclass
class Lane:
    """One target's search within a night: what its candidates share, and its time."""

    entry: TargetEntry
    evaluator: Evaluator
    study: optuna.Study
    names: search.ParamNames
    archive: Archive
    out: TargetSummary
    rng: random.Random
    kind_text: str
    trusted_files: dict[str, str]
    horizon: Horizon
    earlier: int = 0  # candidates of earlier nights in the archive
    starts: list[str] = dataclasses.field(default_factory=list)  # still to evaluate
    slots: list[Slot] = dataclasses.field(default_factory=list)
    sandboxes: dict[int, Sandbox] = dataclasses.field(default_factory=dict)  # by slot index
    warming: list[threading.Thread] = dataclasses.field(default_factory=list)
    # its time: its part of the night, what its seed cost this night, and its winner's
    # reserve (one target's slice prices it once; the contender and trials it counts)
    slice_s: float = 0.0
    seed_cost_s: float = 0.0
    reserve_set: bool = False
    priced_for: tuple[str, int] = ("", 0)

    def set_slice(self, slice_s: float) -> None:
        """The target's part of the night; until its seed is measured it keeps
        CONFIRM_SHARE of it for its winner."""
        self.slice_s = slice_s
        self.horizon.reserved_s[self.target.name] = CONFIRM_SHARE * slice_s

    def reserve_for_winner(self, r: Run) -> None:
        """Once the seed is measured: keep what confirming a winner will take. One target's
        slice prices it once, at the seed's cost. In a shared night a target keeps it only
        once it has a contender (a candidate beating the seed by ``min_gain``; one with none
        would leave it unused at the end, when no search is left to take it, so it keeps
        CONFIRM_SHARE of its part until then), and prices it again as the contender and
        the candidates' cost change: that contender's planned reduction trials, at the
        median cost of the last candidates."""
        if not self.seed_cost_s:
            return  # a seed of an earlier night: the default share of the slice
        if not self.horizon.shared:
            if not self.reserve_set:  # the seed's cost, once
                self.reserve_set = True
                self.horizon.reserved_s[self.target.name] = winner_reserve(
                    r, self.evaluator, self.seed_cost_s, self.slice_s)
            return
        contender = best_contender(self.target, self.archive)
        if contender is None:
            return
        # the contender of now, at what the night's candidates cost (the seed's evaluation
        # builds the night's cases and warms the sandbox: up to 4x a candidate's on a GPU);
        # its planned trials are counted once (a diff and a parse)
        if self.priced_for[0] != contender.id:
            base = reduction_base(self.archive, contender)
            self.priced_for = (contender.id, planned_trials(base, contender))
        self.horizon.reserved_s[self.target.name] = winner_reserve(
            r, self.evaluator, self.typical_cost_s(), self.slice_s, trials=self.priced_for[1])

    def typical_cost_s(self) -> float:
        """The median cost of this night's last candidates, its first (the seed, or a start
        beside it) left out; the seed's cost until there are three."""
        recent = self.out.eval_s[1:][-TYPICAL_OF:]
        return statistics.median(recent) if len(recent) >= 3 else self.seed_cost_s

    def drop_reserve(self) -> None:
        """The seed is not valid: nothing to confirm, the time goes to the other targets."""
        self.horizon.reserved_s[self.target.name] = 0.0

    @property
    def search_deadline(self) -> float:
        return self.horizon.search_end

    @property
    def reserve_s(self) -> float:
        return self.horizon.reserved_s.get(self.target.name, 0.0)

    @property
    def alone(self) -> bool:
        """Its evaluations cannot run beside others (``Evaluator.concurrent_evaluations``)."""
        return not type(self.evaluator).concurrent_evaluations

    @property
    def target(self) -> TargetSpec:
        return self.entry.spec

    @property
    def seed_is_out(self) -> bool:
        """The seed is evaluated and not valid: nothing to improve on."""
        seed = self.archive.seed
        return seed is not None and seed.state is not CandidateState.VALID

    def sandbox(self, r: Run, slot: Slot) -> Sandbox:
        """The target's sandbox on ``slot``, made the first time it is needed (only that
        slot's thread uses it; a kind that runs alone has one)."""
        if slot.index not in self.sandboxes:
            self.sandboxes[slot.index] = make_sandbox(r.config, self.target, self.evaluator,
                                                      slot=slot)
        return self.sandboxes[slot.index]

    def warm_sandboxes(self, r: Run) -> None:
        """Start each of its slots' sandboxes now, in the background (a warm process
        imports the kind's preload modules: 0.25-0.3 s for the function kind on 2 cores),
        so that no slot's first candidate waits for it. A slot that needs its sandbox
        meanwhile waits for that start; :meth:`close_sandboxes` waits for them all."""
        for slot in self.slots:
            sandbox = self.sandbox(r, slot)  # made here, in one thread
            t = threading.Thread(target=_warm, args=(sandbox, self.target.name, slot.index),
                                 name=f"warm-{self.target.name}-{slot.index}", daemon=True)
            t.start()
            self.warming.append(t)

    def close_sandboxes(self) -> None:
        for t in self.warming:  # a start under way ends before its sandbox is closed
            while t.is_alive():
                t.join(timeout=0.1)
        self.warming.clear()
        for sandbox in self.sandboxes.values():
            sandbox.close()
        self.sandboxes.clear()


def _warm(sandbox: Sandbox, target: str, slot: int) -> None:
    try:
        sandbox.warm_up()
    except Exception as exc:  # noqa: BLE001 - the candidate that needs it fails instead
        logging.getLogger(__name__).warning("[%s] slot %d's sandbox did not start ahead: %s",
                                            target, slot, exc)


def open_lane(r: Run, entry: TargetEntry, horizon: Horizon) -> Lane:
    """A target's evaluator, study and archive (earlier nights' candidates; a killed
    night's interrupted ones recorded first), and its starts still to evaluate."""
    target = entry.spec
    evaluator = evaluators.get(target.kind)(target)
    coordination = r.coordination
    study = search.open_study(
        coordination.study_storage(r),
        r.config.name,
        target,
        search.make_sampler(
            r.config.search.sampler,
            r.config.seed,
            r.config.search.n_startup_trials,
            len(target.objectives) > 1,
        ),
        one_writer=coordination.one_writer,  # workers' studies change under them
    )
    archive = Archive(target)
    outputs = lambda run_id, result, io_dir: log_outputs(  # noqa: E731
        r, evaluator, run_id, result, io_dir)
    coordination.open_target(r, study, target, archive, outputs)
    lane = Lane(
        entry=entry, evaluator=evaluator, study=study, names=search.ParamNames(study),
        archive=archive, out=TargetSummary(target.name),
        rng=random.Random(f"{r.config.seed}/{target.name}/{len(archive.entries)}"),
        kind_text=evaluator.prompt_text(),
        trusted_files=evaluator.prompt_files(),
        horizon=horizon,
        earlier=len(archive.entries),
    )
    # the target's other starting programs come first, each a structure of its own
    lane.starts = [s for s in target.starts
                   if content_hash(target.start_files(s)) not in archive.hashes]
    return lane


def winner_reserve(r: Run, evaluator: Evaluator, eval_s: float, slice_s: float,
                   trials: int | None = None) -> float:
    """Seconds of a target's slice kept for its winner: a complete reduction (``trials``,
    its :class:`optimizer.minimize.Plan`'s, when its contender is known, else
    FALLBACK_TRIALS; never more than ``minimize_trials``, the ceiling) and the confirmation
    (what the kind says it costs: ``Evaluator.confirmation_evaluations``), at ``eval_s``
    each (the target's measured cost); between CONFIRM_SHARE and MAX_CONFIRM_SHARE of the
    slice. (A fixed 15% left a timed target's confirmation, 30 evaluations, running 1.2
    minutes past a 50-second slice in the nightly, and the targets after it got less;
    charging a kernel's one-call comparison as 30 evaluations and 12 trials at its seed's
    cost ended a GPU night's search 3.5 minutes early, and its winners took 1.7 of them;
    a fixed 6 trials left a routing winner's reduction cut short after 3 of its hunks.)"""
    confirm = evaluator.confirmation_evaluations(r.config.stats.confirm_repeats)
    most = r.config.stats.minimize_trials
    wanted = (confirm + min(most, FALLBACK_TRIALS if trials is None else trials)) * eval_s
    return min(MAX_CONFIRM_SHARE * slice_s, max(CONFIRM_SHARE * slice_s, wanted))


def night_width(config: ExperimentConfig) -> int:
    """Slots of a night: the most any target's kind that evaluates beside others is
    planned (a kind that cannot gets one slot, and runs alone)."""
    kinds = {evaluators.get(e.spec.kind) for e in config.targets}
    return max((slot_plan.count(config.run.slots, kind.uses_gpu) for kind in kinds
                if kind.concurrent_evaluations), default=1)


def seed_proposal(target: TargetSpec) -> Proposal:
    return Proposal.as_written("seed", None, target.seed_files(), "the target's seed program")


def start_proposal(target: TargetSpec, start: str) -> Proposal:
    return Proposal.as_written("start", SEED_ID, target.start_files(start),
                               f"the target's start {start}")


def seed_is_valid(r: Run, lane: Lane) -> bool:
    """Whether there is a measured seed to optimise against; if not, the target's note
    says why (a seed not measurable on this machine is skipped, not an error)."""
    seed = lane.archive.seed
    if seed is not None and seed.state is CandidateState.VALID:
        lane.reserve_for_winner(r)
        return True
    why = seed.reason if seed else "not evaluated"
    if seed is not None and seed.state is CandidateState.PRUNED:
        lane.out.note = f"seed not measured here ({why[:300]}); skipped on this machine"
    else:
        lane.out.note = f"seed program is not valid ({why[:300]}); nothing to optimise against"
    r.say(f"[{lane.target.name}] {lane.out.note}")
    return False


def finish_summary(out: TargetSummary, archive: Archive, earlier: int) -> TargetSummary:
    """States of this night's candidates (this process's: not other workers'); seed and
    best over every night of the study."""
    for e in archive.entries[earlier:]:
        if e.id in archive.theirs:
            continue
        out.states[e.state.value] = out.states.get(e.state.value, 0) + 1
    if archive.seed and archive.seed.objectives:
        out.seed_value = archive.seed.objectives[0]
    best = archive.best()
    if best:
        out.best_value, out.best_candidate = best.objectives[0], best.id
    return out
