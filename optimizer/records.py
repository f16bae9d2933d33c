"""Frozen records passed between the engine and its plug-ins.

These are plain data: no clients, no callables. Every record that crosses a process
boundary has ``to_json``/``from_json`` so that results come back as data, never pickles.
With :mod:`optimizer.targets` and :mod:`optimizer.errors` this module is the engine's leaf
vocabulary: it imports only the standard library, and evaluators import nothing else of
the engine.
"""

from __future__ import annotations

import enum
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

# Metrics that say where an evaluation's time went (``stage_s/<stage>`` for every kind, a
# kind's own ``cost_s/<part>``): recorded with the run, kept out of prompts and pull texts,
# where they would read as properties of the program.
COST_METRIC_PREFIXES = ("stage_s/", "cost_s/")


def program_metrics(metrics: Mapping[str, float]) -> dict[str, float]:
    """``metrics`` without the evaluation's cost accounting."""
    return {k: v for k, v in metrics.items() if not k.startswith(COST_METRIC_PREFIXES)}


class Confirmation(enum.StrEnum):
    """What confirms a kind's winner (``Evaluator.confirmation``): ``PAIRED`` interleaved
    measurements of candidate and seed and a bootstrap interval; ``EXACT`` exact values,
    then the held-out workload. A kind may still answer with the plain string."""

    PAIRED = "paired"
    EXACT = "exact"


class CandidateState(enum.Enum):
    """Life cycle of a candidate (like Optuna's TrialState, with reasons kept elsewhere)."""

    PENDING = "PENDING"
    RUNNING = "RUNNING"
    VALID = "VALID"  # passed every stage; metrics are meaningful
    INVALID = "INVALID"  # ran, but the answer is wrong
    FAILED = "FAILED"  # crashed, did not compile, delivered no result
    TIMEOUT = "TIMEOUT"  # killed at the wall-clock limit
    REJECTED = "REJECTED"  # bad edit, forbidden construct, implausible measurement
    DUPLICATE = "DUPLICATE"  # same content hash as an earlier candidate: not evaluated
    PRUNED = "PRUNED"  # stopped early by the search (worse than needed to matter)

    @property
    def finished(self) -> bool:
        return self not in (CandidateState.PENDING, CandidateState.RUNNING)


@dataclass(frozen=True)
class EvalResult:
    """What an evaluation stage (or a whole evaluation) found.

    ``metrics`` are named floats (lower/higher-is-better is the target's business);
    ``objectives`` are the values Optuna is told, in the order of the target's objectives;
    ``samples`` are repeated measurements of a metric (e.g. per-repetition seconds) kept for
    statistics; ``artifacts`` are small text files (name -> content), e.g. a validation
    report or diagnostics for the next prompt; ``cost_s`` is the wall time of the
    evaluation itself.
    """

    state: CandidateState
    reason: str = ""
    stage: str = ""
    metrics: Mapping[str, float] = field(default_factory=dict)
    objectives: tuple[float, ...] = ()
    samples: Mapping[str, tuple[float, ...]] = field(default_factory=dict)
    artifacts: Mapping[str, str] = field(default_factory=dict)
    cost_s: float = 0.0

    @property
    def ok(self) -> bool:
        return self.state is CandidateState.VALID

    def to_json(self) -> dict[str, Any]:
        return {
            "state": self.state.value,
            "reason": self.reason,
            "stage": self.stage,
            "metrics": {k: float(v) for k, v in self.metrics.items()},
            "objectives": [float(v) for v in self.objectives],
            "samples": {k: [float(x) for x in v] for k, v in self.samples.items()},
            "artifacts": dict(self.artifacts),
            "cost_s": float(self.cost_s),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> EvalResult:
        return cls(
            state=CandidateState(data["state"]),
            reason=str(data.get("reason", "")),
            stage=str(data.get("stage", "")),
            metrics={str(k): float(v) for k, v in dict(data.get("metrics", {})).items()},
            objectives=tuple(float(v) for v in data.get("objectives", ())),
            samples={
                str(k): tuple(float(x) for x in v) for k, v in dict(data.get("samples", {})).items()
            },
            artifacts={str(k): str(v) for k, v in dict(data.get("artifacts", {})).items()},
            cost_s=float(data.get("cost_s", 0.0)),
        )


@dataclass(frozen=True)
class FileEdit:
    """One change to one editable file.

    Either ``blocks`` (SEARCH/REPLACE pairs, applied in order, each must match exactly
    once inside an EVOLVE-BLOCK) or ``content`` (a whole-file rewrite; text outside the
    EVOLVE-BLOCKs must be unchanged).
    """

    path: str  # relative to the target folder, must be listed in target.toml `editable`
    blocks: tuple[tuple[str, str], ...] = ()
    content: str | None = None


@dataclass(frozen=True)
class Usage:
    """Token and money accounting of one proposal (zero for offline proposers)."""

    prompt_tokens: int = 0
    cached_tokens: int = 0
    completion_tokens: int = 0
    usd: float = 0.0
    calls: int = 0
    model: str = ""


@dataclass(frozen=True)
class Proposal:
    """What a proposer returns.

    ``files`` is the complete new content of every editable file (after applying the
    edits; the proposer uses :mod:`optimizer.edits` to apply them strictly). Knob
    declarations in those files define the space Optuna samples. ``fixed_knobs`` pins
    knob values (e.g. an AST mutation that only wants one structure evaluated as-is).
    ``fixed_as_written`` pins every knob to the value written in the files (the seed, a
    start, a reduced program: :meth:`as_written`). ``rejected`` is a reason when the
    proposal is unusable (bad edit, empty answer): the loop records a REJECTED candidate
    and feeds the reason back.
    """

    proposer: str
    parent_id: str | None
    files: Mapping[str, str]
    summary: str = ""
    fixed_knobs: Mapping[str, Any] = field(default_factory=dict)
    prompt: str = ""
    response: str = ""
    usage: Usage = field(default_factory=Usage)
    rejected: str | None = None
    fixed_as_written: bool = False

    @classmethod
    def as_written(cls, proposer: str, parent_id: str | None, files: Mapping[str, str],
                   summary: str) -> Proposal:
        """A program evaluated with the knob values written in it."""
        return cls(proposer, parent_id, files, summary, fixed_as_written=True)


def candidate_id(number: int) -> str:
    """The id of the ``number``-th candidate of a target: ``c0001`` is always its seed."""
    return f"c{number:04d}"


def candidate_number(cid: str) -> int:
    """The inverse of :func:`candidate_id`."""
    if not (cid.startswith("c") and cid[1:].isdigit()):
        raise ValueError(f"not a candidate id: {cid!r}")
    return int(cid[1:])


SEED_ID = candidate_id(1)

# the reason of a candidate whose worker stopped sending heartbeats (optimizer.worker); its
# program is evaluated again as a candidate of its own
WORKER_LOST = "worker lost: its worker stopped sending heartbeats while it was evaluated"


@dataclass(frozen=True)
class Candidate:
    """A concrete program: files with knob values substituted, ready to evaluate."""

    id: str  # "c0007", unique per experiment/target (see candidate_id)
    target: str
    parent_id: str | None
    proposer: str
    files: Mapping[str, str]  # relative path -> final source (knobs substituted)
    knobs: Mapping[str, Any]
    content_hash: str
    summary: str = ""
    structure: str = ""  # hash of the sources with knob declarations (knobs.structure_key)


@dataclass(frozen=True)
class ArchiveEntry:
    """An evaluated candidate as the archive and proposers see it.

    ``files`` are the candidate's sources *with knob declarations* (the structure) and
    ``knobs`` the values it was evaluated with; ``objectives`` follow the target's order.
    """

    id: str
    parent_id: str | None
    files: Mapping[str, str]
    knobs: Mapping[str, Any]
    state: CandidateState
    reason: str = ""
    metrics: Mapping[str, float] = field(default_factory=dict)
    objectives: tuple[float, ...] = ()
    artifacts: Mapping[str, str] = field(default_factory=dict)
    summary: str = ""
    proposer: str = ""

    @classmethod
    def of(
        cls, cand: Candidate, result: EvalResult, files: Mapping[str, str] | None = None
    ) -> ArchiveEntry:
        """The entry of ``cand`` evaluated as ``result``; ``files`` are its sources with
        knob declarations (default: the candidate's own files)."""
        return cls(
            id=cand.id,
            parent_id=cand.parent_id,
            files=dict(cand.files if files is None else files),
            knobs=dict(cand.knobs),
            state=result.state,
            reason=result.reason,
            metrics=dict(result.metrics),
            objectives=tuple(result.objectives),
            artifacts=dict(result.artifacts),
            summary=cand.summary,
            proposer=cand.proposer,
        )


@dataclass(frozen=True)
class CandidateRecord:
    """What a candidate's Optuna trial holds about it: the record that persists.

    Written only by :func:`optimizer.recording.save` (the documented save order) and read
    back with :meth:`from_trial` by resume, status, report and winners. The attribute names
    are stable (tools and people read them): ``candidate``, ``state``, ``reason``,
    ``proposer``, ``parent``, ``summary``, ``structure``, ``content_hash``, ``branch``,
    ``commit``, ``mlflow_run_id``, ``metrics``, ``objectives``, ``duplicate_of``.
    ``state`` is written last: a record whose state is finished is complete.
    """

    candidate: str = ""
    state: CandidateState = CandidateState.RUNNING
    reason: str = ""
    proposer: str = ""
    parent: str | None = None
    summary: str = ""
    structure: str = ""
    content_hash: str = ""
    branch: str = ""
    commit: str = ""
    mlflow_run_id: str = ""
    metrics: Mapping[str, float] = field(default_factory=dict)
    objectives: tuple[float, ...] = ()
    duplicate_of: str = ""

    @classmethod
    def of(cls, cand: Candidate, branch: str = "") -> CandidateRecord:
        """The record of ``cand`` while it is evaluated (state RUNNING)."""
        return cls(
            candidate=cand.id,
            proposer=cand.proposer,
            parent=cand.parent_id,
            summary=cand.summary[:500],
            structure=cand.structure,
            content_hash=cand.content_hash,
            branch=branch,
        )

    def finished(self, result: EvalResult, commit: str, run_id: str) -> CandidateRecord:
        return replace(
            self,
            state=result.state,
            reason=result.reason[:2000],
            metrics={k: float(v) for k, v in result.metrics.items()},
            objectives=tuple(float(v) for v in result.objectives),
            commit=commit,
            mlflow_run_id=run_id,
        )

    @property
    def complete(self) -> bool:
        """Evaluated and logged: only the tell can have been lost."""
        return self.state.finished and bool(self.mlflow_run_id)

    def to_attrs(self) -> dict[str, Any]:
        """User attributes, ``state`` last; empty values are left out."""
        attrs: dict[str, Any] = {
            "candidate": self.candidate,
            "proposer": self.proposer,
            "parent": self.parent or "",
            "summary": self.summary,
            "structure": self.structure,
            "content_hash": self.content_hash,
            "branch": self.branch,
            "duplicate_of": self.duplicate_of,
            "reason": self.reason,
            "commit": self.commit,
            "mlflow_run_id": self.mlflow_run_id,
        }
        attrs = {k: v for k, v in attrs.items() if v}
        if self.state.finished:
            attrs["metrics"] = {k: float(v) for k, v in self.metrics.items()}
            attrs["objectives"] = [float(v) for v in self.objectives]
        attrs["state"] = self.state.value
        return attrs

    @classmethod
    def from_attrs(cls, attrs: Mapping[str, Any]) -> CandidateRecord:
        try:
            state = CandidateState(attrs.get("state", CandidateState.RUNNING.value))
        except ValueError:
            state = CandidateState.FAILED
        return cls(
            candidate=str(attrs.get("candidate", "")),
            state=state,
            reason=str(attrs.get("reason", "")),
            proposer=str(attrs.get("proposer", "")),
            parent=str(attrs.get("parent") or "") or None,
            summary=str(attrs.get("summary", "")),
            structure=str(attrs.get("structure", "")),
            content_hash=str(attrs.get("content_hash", "")),
            branch=str(attrs.get("branch", "")),
            commit=str(attrs.get("commit", "")),
            mlflow_run_id=str(attrs.get("mlflow_run_id", "")),
            metrics={str(k): float(v) for k, v in dict(attrs.get("metrics") or {}).items()},
            objectives=tuple(float(v) for v in attrs.get("objectives") or ()),
            duplicate_of=str(attrs.get("duplicate_of", "")),
        )

    @classmethod
    def from_trial(cls, trial: Any) -> CandidateRecord:
        """The record of an Optuna trial (a ``FrozenTrial``, or anything with
        ``user_attrs``)."""
        return cls.from_attrs(trial.user_attrs)


@dataclass(frozen=True)
class Outputs:
    """What an evaluation leaves besides metrics, for the tracker (see
    ``Evaluator.outputs``): ``curves`` are metric histories (name -> (step, value)
    points), ``files`` are (path, artifact folder) pairs; only files inside the
    evaluation's own io directory are logged."""

    curves: Mapping[str, tuple[tuple[int, float], ...]] = field(default_factory=dict)
    files: tuple[tuple[str, str], ...] = ()


def content_hash(files: Mapping[str, str]) -> str:
    """Hash of a candidate's final sources, independent of dict order."""
    h = hashlib.sha256()
    for path in sorted(files):
        h.update(path.encode())
        h.update(b"\0")
        h.update(files[path].encode())
        h.update(b"\0")
    return h.hexdigest()[:16]
