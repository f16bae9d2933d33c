"""Minimal pull branches: a winner's change reduced to what earns its gain.

A night's best program often carries hitchhikers: a flipped comparison that changes
nothing, dead code, a knob moved for no reason, ``CACHE_WEIGHT = 7.2479999960427195``. A
reviewer should read only the change that earns the gain. So before a winner is
published its diff against the seed (or against the declared start it descends from:
:func:`optimizer.winners.reduction_base`) is reduced, greedily and within a budget of
trials:

1. every hunk of the diff is reverted to the seed's text in turn, and stays reverted when
   the program is still valid and its gain still holds (:class:`Gate`);
2. every float knob still different from the seed's is rounded to the fewest significant
   digits (1 to 4) that keep the gain.

Every trial is an ordinary candidate of the night (proposer ``minimize``, the winner as
parent: a branch, an MLflow run and a trial like any other), so the reduction is on the
record. The reduced program is then confirmed like any winner before it is published.
"""

from __future__ import annotations

import difflib
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from optimizer import knobs, stats
from optimizer.records import ArchiveEntry, CandidateState

# (files, summary, parent id) -> the evaluated candidate (the archive's entry)
Evaluate = Callable[[dict[str, str], str, str], ArchiveEntry | None]


@dataclass(frozen=True)
class Gate:
    """Whether a reduced program still holds the winner's gain over the seed.

    ``floor`` is the worst objective value that still counts: the target's ``min_gain`` at
    least, and the winner's gain less half of ``min_gain``. So every change left in a pull
    branch, reverted alone, costs at least half the target's ``min_gain`` (or breaks the
    program). A timed target's trials are single measurements; the reduced program is
    confirmed like any winner afterwards, and the contender as it was when it is not.
    """

    minimize: bool
    floor: float

    @classmethod
    def of(cls, seed_value: float, win_value: float, minimize: bool, min_gain: float) -> Gate:
        gain = stats.relative_gain(seed_value, win_value, minimize=minimize)
        keep = max(min_gain, gain - min_gain / 2) if math.isfinite(gain) else min_gain
        floor = seed_value / (1 + keep) if minimize else seed_value * (1 + keep)
        return cls(minimize, floor)

    def holds(self, entry: ArchiveEntry | None) -> bool:
        if entry is None or entry.state is not CandidateState.VALID or not entry.objectives:
            return False
        value = entry.objectives[0]
        return value <= self.floor if self.minimize else value >= self.floor


@dataclass
class Reduction:
    files: dict[str, str]
    entry: ArchiveEntry
    notes: list[str] = field(default_factory=list)
    trials: int = 0

    @property
    def changed(self) -> bool:
        return bool(self.notes)


def hunks(seed: Mapping[str, str], win: Mapping[str, str]) -> list[tuple[str, int, int, int, int]]:
    """(file, seed lines i1:i2, winner lines j1:j2) of every change, in file order.

    A block of changed lines is split line by line (the first lines of each side paired,
    the rest one insertion or deletion): adjacent changes are often unrelated, and the
    one that earns the gain must not keep its neighbours in the pull branch."""
    out = []
    for path in sorted(win):
        a, b = seed.get(path, "").splitlines(keepends=True), win[path].splitlines(keepends=True)
        matcher = difflib.SequenceMatcher(None, a, b, autojunk=False)
        for tag, i1, i2, j1, j2 in matcher.get_opcodes():
            if tag == "equal":
                continue
            pairs = min(i2 - i1, j2 - j1) if tag == "replace" else 0
            out += [(path, i1 + k, i1 + k + 1, j1 + k, j1 + k + 1) for k in range(pairs)]
            if i1 + pairs < i2 or j1 + pairs < j2:
                out.append((path, i1 + pairs, i2, j1 + pairs, j2))
    return out


def _revert(seed: Mapping[str, str], win: Mapping[str, str],
            hunk: tuple[str, int, int, int, int]) -> dict[str, str]:
    path, i1, i2, j1, j2 = hunk
    a, b = seed[path].splitlines(keepends=True), win[path].splitlines(keepends=True)
    out = dict(win)
    out[path] = "".join(b[:j1] + a[i1:i2] + b[j2:])
    return out


def _rounded(value: float) -> list[float]:
    out: list[float] = []
    for digits in range(1, 5):
        r = float(f"{value:.{digits}g}")
        if r != value and r not in out:
            out.append(r)
    return out


def planned_trials(seed: ArchiveEntry, best: ArchiveEntry) -> int:
    """How many trials :func:`reduce` would spend on ``best`` against ``seed`` without a
    budget: one per hunk and one per rounding of each float knob that differs (at most)."""
    n = len(hunks(seed.files, best.files))
    seed_values = knobs.values_of(seed.files)
    try:
        found = knobs.knobs_of_files(best.files)
    except Exception:  # noqa: BLE001 - a program whose knobs do not parse has none to round
        return n
    for name, knob in found.items():
        value = knob.default
        if knob.kind == "float" and isinstance(value, float) and value != seed_values.get(name):
            n += len(_rounded(value))
    return n


def reduce(
    evaluate: Evaluate,
    seed: ArchiveEntry,
    best: ArchiveEntry,
    gate: Gate,
    *,
    max_trials: int,
    deadline: float,
    base_label: str = "seed",
) -> Reduction:
    """The smallest program found between ``best`` and ``seed`` (the base: the seed or a
    start, named ``base_label`` in the trials' summaries) that ``gate`` accepts."""
    current = Reduction(dict(best.files), best)
    if max_trials <= 0:
        return current

    def budget_left() -> bool:
        return current.trials < max_trials and time.monotonic() < deadline

    def attempt(files: dict[str, str], summary: str) -> ArchiveEntry | None:
        current.trials += 1
        try:
            return evaluate(files, summary, best.id)
        except Exception:  # noqa: BLE001 - a reduction that cannot be built is just refused
            return None

    # 1. hunks, last first: reverting one keeps the line numbers of those before it valid
    for hunk in reversed(hunks(seed.files, current.files)):
        if not budget_left():
            break
        try:
            files = _revert(seed.files, current.files, hunk)
            knobs.knobs_of_files(files)  # a revert that breaks a knob declaration: skip
        except Exception:  # noqa: BLE001
            continue
        path, i1, i2, j1, j2 = hunk
        where = f"{path}:{j1 + 1}" + (f"-{j2}" if j2 > j1 + 1 else "")
        entry = attempt(files, f"minimise {best.id}: revert {where} to the {base_label}'s")
        if gate.holds(entry):
            assert entry is not None
            current.files, current.entry = files, entry
            current.notes.append(f"reverted {where} (the gain held without it)")
    # 2. float knobs to the fewest digits that keep the gain
    seed_values = knobs.values_of(seed.files)
    for name, knob in sorted(knobs.knobs_of_files(current.files).items()):
        value = knob.default
        if knob.kind != "float" or not isinstance(value, float) or value == seed_values.get(name):
            continue
        for short in _rounded(value):
            if not budget_left():
                break
            if (knob.low is not None and short < knob.low) or (
                    knob.high is not None and short > knob.high):
                continue
            files = knobs.substitute_files(current.files, {name: short})
            entry = attempt(files, f"minimise {best.id}: {name} = {short!r}")
            if gate.holds(entry):
                assert entry is not None
                current.files, current.entry = files, entry
                current.notes.append(f"{name} = {short!r} (was {value!r})")
                break
    return current
