"""Frozen records passed between the engine and its plug-ins.

These are plain data: no clients, no callables. Every record that crosses a process
boundary has ``to_json``/``from_json`` so that results come back as data, never pickles.
"""

from __future__ import annotations

import enum
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


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
    ``rejected`` is a reason when the proposal is unusable (bad edit, empty answer): the
    loop records a REJECTED candidate and feeds the reason back.
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


@dataclass(frozen=True)
class Candidate:
    """A concrete program: files with knob values substituted, ready to evaluate."""

    id: str  # "c0007", unique per experiment/target
    target: str
    parent_id: str | None
    proposer: str
    files: Mapping[str, str]  # relative path -> final source (knobs substituted)
    knobs: Mapping[str, Any]
    content_hash: str
    summary: str = ""
    state: CandidateState = CandidateState.PENDING


def content_hash(files: Mapping[str, str]) -> str:
    """Hash of a candidate's final sources, independent of dict order."""
    h = hashlib.sha256()
    for path in sorted(files):
        h.update(path.encode())
        h.update(b"\0")
        h.update(files[path].encode())
        h.update(b"\0")
    return h.hexdigest()[:16]
