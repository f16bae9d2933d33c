"""Minimal pull branches: a winner's change reduced to what earns its gain.

A night's best program often carries hitchhikers: a flipped sign on a term whose weight is
zero, dead code, a knob moved for no reason, ``CACHE_WEIGHT = 7.2479999960427195``. A
reviewer should read only the change that earns the gain. So before a winner is
published its diff against the seed (or against the declared start it descends from:
:func:`optimizer.winners.reduction_base`) is reduced, in the order of its :class:`Plan`:

1. the hunks that look like they change no behaviour (a term multiplied by a knob whose
   value is zero, a line under ``if False:``, a comment) are reverted together, in one
   trial; when the gain does not hold without them, each is tried alone with the rest;
2. every other hunk is reverted to the seed's text alone, and stays reverted when the
   program is still valid and its gain still holds (:class:`Gate`);
3. every float knob still different from the seed's is rounded to the fewest significant
   digits (1 to 6) that keep the gain, found by bisection over the digits.

A complete reduction is :attr:`Plan.trials` trials; what the night keeps for a winner is
priced from it (:func:`optimizer.lane.winner_reserve`). A reduction that runs out of
trials or time says what it did not try (:attr:`Reduction.not_tried`), and the pull
request says so.

Every trial is an ordinary candidate of the night (proposer ``minimize``, the winner as
parent: a branch, an MLflow run and a trial like any other), so the reduction is on the
record. The reduced program is then confirmed like any winner before it is published.
"""

from __future__ import annotations

import difflib
import math
import re
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from optimizer import knobs, stats
from optimizer.records import ArchiveEntry, CandidateState

# (files, summary, parent id) -> the evaluated candidate (the archive's entry)
Evaluate = Callable[[dict[str, str], str, str], ArchiveEntry | None]
Hunk = tuple[str, int, int, int, int]  # file, seed lines i1:i2, winner lines j1:j2

MAX_DIGITS = 6  # a float knob is rounded to at most this many significant digits


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
    not_tried: list[str] = field(default_factory=list)  # hunks and knobs left, if cut short

    @property
    def changed(self) -> bool:
        return bool(self.notes)

    @property
    def complete(self) -> bool:
        return not self.not_tried


def hunks(seed: Mapping[str, str], win: Mapping[str, str]) -> list[Hunk]:
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
            reverted: Iterable[Hunk]) -> dict[str, str]:
    """``win`` with the ``reverted`` hunks (of the diff from ``seed`` to ``win``) put back
    to the seed's text; the last first, so the line numbers of those before stay valid."""
    out = dict(win)
    for path, i1, i2, j1, j2 in sorted(reverted, key=lambda h: (h[0], h[3]), reverse=True):
        a, b = seed[path].splitlines(keepends=True), out[path].splitlines(keepends=True)
        out[path] = "".join(b[:j1] + a[i1:i2] + b[j2:])
    return out


def where(hunk: Hunk) -> str:
    """A hunk as a reviewer finds it in the winner: ``file:line`` or ``file:first-last``."""
    path, _, _, j1, j2 = hunk
    return f"{path}:{j1 + 1}" + (f"-{j2}" if j2 > j1 + 1 else "")


def _rounded(value: float) -> list[float]:
    """``value`` at 1 to MAX_DIGITS significant digits, fewest first, each once and none
    equal to ``value``."""
    out: list[float] = []
    for digits in range(1, MAX_DIGITS + 1):
        r = float(f"{value:.{digits}g}")
        if r != value and r not in out:
            out.append(r)
    return out


def _bisections(n: int) -> int:
    """Trials a bisection over ``n`` roundings takes at most (the value itself holds)."""
    return math.ceil(math.log2(n + 1)) if n else 0


# -- hunks that look like they change nothing ---------------------------------------------

_COMMENT = re.compile(r"#.*$")
_OPERAND = r"[\w.]+(?:\[[^\]]*\]|\([^)]*\))*"


def _zero_term(name: str) -> re.Pattern[str]:
    """A term ``NAME * x`` or ``x * NAME`` with its sign, ``NAME`` a knob worth zero."""
    n = re.escape(name)
    return re.compile(rf"[+-]?\s*(?:\b{n}\b\s*\*\s*{_OPERAND}|{_OPERAND}\s*\*\s*\b{n}\b)")


def _falsy_knobs(files: Mapping[str, str]) -> set[str]:
    try:
        values = knobs.values_of(files)
    except Exception:  # noqa: BLE001 - knobs that do not parse: no knob is known to be zero
        return set()
    return {name for name, value in values.items()
            if value is False or (isinstance(value, (int, float)) and value == 0)}


def _normal(lines: Iterable[str], zero: Iterable[re.Pattern[str]]) -> str:
    text = "".join(_COMMENT.sub("", line) for line in lines)
    for term in zero:
        text = term.sub("", text)
    return re.sub(r"\s+", "", text)


def _unreachable(lines: list[str], j1: int, j2: int, falsy: set[str]) -> bool:
    """Whether lines j1:j2 all sit under an ``if`` whose test is ``False``, ``0`` or a
    knob worth zero (the nearest line above them indented less)."""
    body = [line for line in lines[j1:j2] if line.strip()]
    if not body:
        return False
    indent = min(len(line) - len(line.lstrip()) for line in body)
    for line in reversed(lines[:j1]):
        if not line.strip() or len(line) - len(line.lstrip()) >= indent:
            continue
        test = re.fullmatch(r"\s*(?:el)?if\s+(.+?)\s*:\s*(?:#.*)?", line.rstrip("\n"))
        return test is not None and (test.group(1) in ("False", "0") or test.group(1) in falsy)
    return False


def likely_no_op(seed: Mapping[str, str], win: Mapping[str, str], hunk: Hunk,
                 falsy: set[str] | None = None) -> bool:
    """Whether a hunk looks like it changes no behaviour: its two sides differ only in
    comments, whitespace or terms multiplied by a knob worth zero (in ``win``), or its
    winner's lines sit under a branch never taken. A cheap guess: the reduction's trial
    says whether it is right."""
    falsy = _falsy_knobs(win) if falsy is None else falsy
    path, i1, i2, j1, j2 = hunk
    a, b = seed.get(path, "").splitlines(keepends=True), win[path].splitlines(keepends=True)
    zero = [_zero_term(name) for name in sorted(falsy)]
    if _normal(a[i1:i2], zero) == _normal(b[j1:j2], zero):
        return True
    return _unreachable(b, j1, j2, falsy) and (i1 == i2 or _unreachable(a, i1, i2, falsy))


@dataclass(frozen=True)
class Plan:
    """What a complete reduction of ``win`` towards ``seed`` tries, in order: the likely
    no-op hunks together (``no_op``), every other hunk alone (``rest``, last first), then
    every float knob that differs from the seed's (``floats``: name, value and its
    roundings, fewest digits first), each by bisection."""

    no_op: tuple[Hunk, ...]
    rest: tuple[Hunk, ...]
    floats: tuple[tuple[str, float, tuple[float, ...]], ...]

    @classmethod
    def of(cls, seed: Mapping[str, str], win: Mapping[str, str]) -> Plan:
        found = hunks(seed, win)
        falsy = _falsy_knobs(win)
        no_op = tuple(h for h in found if likely_no_op(seed, win, h, falsy))
        rest = tuple(h for h in reversed(found) if h not in no_op)
        return cls(no_op, rest, _float_knobs(seed, win))

    @property
    def trials(self) -> int:
        """Trials of a complete reduction, at most: the no-op hunks' one (and each alone,
        should they not hold together), every other hunk's and each knob's bisection."""
        batch = len(self.no_op) + (1 if len(self.no_op) > 1 else 0)
        return batch + len(self.rest) + sum(_bisections(len(r)) for _, _, r in self.floats)

    def labels(self) -> list[str]:
        """Every hunk and knob the plan tries, as :attr:`Reduction.not_tried` names them."""
        return ([f"revert {where(h)}" for h in (*self.no_op, *self.rest)]
                + [f"round {name}" for name, _, _ in self.floats])


def _float_knobs(seed: Mapping[str, str], win: Mapping[str, str],
                 ) -> tuple[tuple[str, float, tuple[float, ...]], ...]:
    try:
        seed_values, found = knobs.values_of(seed), knobs.knobs_of_files(win)
    except Exception:  # noqa: BLE001 - a program whose knobs do not parse has none to round
        return ()
    out = []
    for name, knob in sorted(found.items()):
        value = knob.default
        if knob.kind != "float" or not isinstance(value, float) or value == seed_values.get(name):
            continue
        roundings = tuple(r for r in _rounded(value) if _within(knob, r))
        if roundings:
            out.append((name, value, roundings))
    return tuple(out)


def _within(knob: knobs.Knob, value: float) -> bool:
    return not ((knob.low is not None and value < knob.low)
                or (knob.high is not None and value > knob.high))


def planned_trials(seed: ArchiveEntry, best: ArchiveEntry) -> int:
    """How many trials a complete reduction of ``best`` against ``seed`` takes at most."""
    return Plan.of(seed.files, best.files).trials


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
    start, named ``base_label`` in the trials' summaries) that ``gate`` accepts, reduced
    in the order of its :class:`Plan` until ``max_trials`` or ``deadline``; what it did not
    get to is in :attr:`Reduction.not_tried`."""
    plan = Plan.of(seed.files, best.files)
    run = _Reducing(evaluate, seed, best, gate, max_trials, deadline, f"to the {base_label}'s")
    run.revert_hunks(plan)
    run.round_knobs(plan)
    return run.current


@dataclass
class _Reducing:
    """One reduction under way: the trials it spends and the hunks it has reverted."""

    evaluate: Evaluate
    seed: ArchiveEntry
    best: ArchiveEntry
    gate: Gate
    max_trials: int
    deadline: float
    base: str
    reverted: list[Hunk] = field(default_factory=list)
    current: Reduction = field(init=False)

    def __post_init__(self) -> None:
        self.current = Reduction(dict(self.best.files), self.best)

    def budget_left(self) -> bool:
        return self.current.trials < self.max_trials and time.monotonic() < self.deadline

    def attempt(self, files: dict[str, str], summary: str) -> ArchiveEntry | None:
        self.current.trials += 1
        try:
            return self.evaluate(files, f"minimise {self.best.id}: {summary}", self.best.id)
        except Exception:  # noqa: BLE001 - a reduction that cannot be built is just refused
            return None

    def _reverting(self, more: list[Hunk]) -> dict[str, str] | None:
        try:
            files = _revert(self.seed.files, self.best.files, [*self.reverted, *more])
            knobs.knobs_of_files(files)  # a revert that breaks a knob declaration: skip
        except Exception:  # noqa: BLE001
            return None
        return files

    def try_revert(self, more: list[Hunk], summary: str, note: str) -> bool:
        files = self._reverting(more)
        if files is None:
            return False
        entry = self.attempt(files, summary)
        if not self.gate.holds(entry):
            return False
        assert entry is not None
        self.reverted.extend(more)
        self.current.files, self.current.entry = files, entry
        self.current.notes.append(note)
        return True

    def revert_hunks(self, plan: Plan) -> None:
        """1. the likely no-op hunks at once (alone with the rest when they do not hold
        together); 2. every other hunk alone, last first."""
        alone = list(plan.rest)
        if len(plan.no_op) > 1 and self.budget_left():
            spots = ", ".join(where(h) for h in plan.no_op)
            if not self.try_revert(
                list(plan.no_op), f"revert {spots} (no behaviour change) {self.base}",
                f"reverted {spots} together (no behaviour change: the gain held)",
            ):
                alone = list(reversed(plan.no_op)) + alone
        else:
            alone = list(reversed(plan.no_op)) + alone
        for i, hunk in enumerate(alone):
            if not self.budget_left():
                self.current.not_tried += [f"revert {where(h)}" for h in alone[i:]]
                return
            self.try_revert([hunk], f"revert {where(hunk)} {self.base}",
                            f"reverted {where(hunk)} (the gain held without it)")

    def round_knobs(self, plan: Plan) -> None:
        """3. float knobs to the fewest digits that keep the gain, by bisection."""
        values = knobs.values_of(self.current.files) if plan.floats else {}
        for name, value, roundings in plan.floats:
            if values.get(name) != value:
                continue  # its line was reverted to the seed's
            if not self.budget_left():
                self.current.not_tried.append(f"round {name}")
                continue
            self._bisect(name, value, roundings)

    def _bisect(self, name: str, value: Any, roundings: tuple[float, ...]) -> None:
        lo, hi = 0, len(roundings)  # roundings[hi] (the value itself past the end) holds
        while lo < hi:
            if not self.budget_left():
                self.current.not_tried.append(
                    f"round {name} (below {_at(roundings, hi, value)!r})")
                break
            mid = (lo + hi) // 2
            files = knobs.substitute_files(self.current.files, {name: roundings[mid]})
            entry = self.attempt(files, f"{name} = {roundings[mid]!r}")
            if self.gate.holds(entry):
                hi = mid
                assert entry is not None
                self.current.files, self.current.entry = files, entry
            else:
                lo = mid + 1
        if hi < len(roundings):
            self.current.notes.append(f"{name} = {roundings[hi]!r} (was {value!r})")


def _at(roundings: tuple[float, ...], i: int, value: Any) -> Any:
    return roundings[i] if i < len(roundings) else value
