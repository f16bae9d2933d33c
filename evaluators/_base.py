"""The evaluator contract: trusted checking code for one target kind.

An evaluator runs on the trusted side (the engine's process). It never imports candidate
code itself: it asks ``ctx.run`` to execute a trusted *entry function* inside the sandbox,
in the candidate's folder, and gets JSON (plus data files it reads itself) back. The
trusted side generates inputs, holds the reference and compares outputs; the candidate
only computes.

Stages run cheapest first and the first that does not return VALID stops the candidate:

1. ``static_check``  - parse, forbidden constructs (REJECTED)           [default provided]
2. ``correctness``   - against the trusted reference (INVALID/FAILED/TIMEOUT)  [abstract]
3. ``performance``   - metrics, objectives, samples (VALID or REJECTED if implausible) [abstract]

Two optional hooks serve winner selection:

- ``compare(cand, base, ctx, repeats)``: candidate and incumbent measured interleaved in
  one sandboxed process; returns samples ``candidate`` and ``baseline`` of the primary
  metric (paired, same length). The default alternates ``performance`` calls.
- ``held_out(cand, ctx)``: the same measurement on a workload the search never saw
  (deterministic targets must win there too). Default: None (no held-out workload).

A kind registers with :func:`evaluators.register`; evaluators import without MLflow,
Optuna, openai or GitPython.
"""

from __future__ import annotations

import ast
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Protocol

from optimizer.records import CandidateState, EvalResult
from optimizer.targets import TargetSpec


class SandboxLike(Protocol):
    """What an evaluator needs of the sandbox (optimizer.sandbox.Sandbox provides it)."""

    def call(
        self,
        entry: str,
        payload: Mapping[str, Any],
        *,
        workdir: Path,
        io_dir: Path | None = None,
        timeout_s: float | None = None,
    ) -> Any:  # optimizer.sandbox.CallResult
        ...


@dataclass
class EvalContext:
    """Everything an evaluation may use besides the candidate's folder.

    ``seed`` is fresh per evaluation and never shown to the candidate; ``scratch`` is a
    trusted directory the candidate cannot see; ``io_dir`` is a directory shared with the
    candidate's process (inputs in, outputs out); ``incumbent_dir`` is the folder of the
    program to beat (for interleaved timing), if any.
    """

    sandbox: SandboxLike
    seed: int
    scratch: Path
    io_dir: Path
    device: str = "cpu"
    timeout_s: float = 120.0
    incumbent_dir: Path | None = None
    log: Callable[[str], None] = field(default=lambda msg: None)

    def run(self, entry: str, payload: Mapping[str, Any], *, workdir: Path) -> Any:
        """Run a trusted entry function ``"module:function"`` in the sandbox, in ``workdir``."""
        return self.sandbox.call(
            entry, payload, workdir=workdir, io_dir=self.io_dir, timeout_s=self.timeout_s
        )


def result_from_call(call: Any, stage: str) -> EvalResult | None:
    """Turn a failed sandbox call into FAILED/TIMEOUT; None when it delivered a response."""
    if call.timed_out:
        return EvalResult(
            CandidateState.TIMEOUT, f"killed after {call.wall_s:.1f} s wall-clock limit", stage
        )
    if call.response is None:
        tail = (call.error or call.stderr[-2000:] or "no result delivered").strip()
        return EvalResult(CandidateState.FAILED, tail, stage)
    if call.response.get("error"):
        return EvalResult(CandidateState.FAILED, str(call.response["error"])[-4000:], stage)
    return None


class Evaluator(ABC):
    """Base of every target kind's evaluator (see module docstring for the contract)."""

    kind: ClassVar[str] = ""
    # Modules a warm sandbox process imports once before forking candidates
    # (e.g. ("torch", "triton")); never anything that creates a CUDA context.
    preload: ClassVar[tuple[str, ...]] = ()

    def __init__(self, target: TargetSpec):
        self.target = target

    # -- stage 1 ---------------------------------------------------------------------
    def static_check(self, cand_dir: Path) -> EvalResult:
        """Cheap checks before anything runs: every editable Python file parses."""
        for rel in self.target.editable:
            path = cand_dir / rel
            if path.suffix != ".py":
                continue
            try:
                ast.parse(path.read_text(), filename=rel)
            except SyntaxError as exc:
                return EvalResult(
                    CandidateState.REJECTED,
                    f"{rel}:{exc.lineno}: syntax error: {exc.msg}",
                    "static",
                )
        return EvalResult(CandidateState.VALID, "", "static")

    # -- stage 2 ---------------------------------------------------------------------
    @abstractmethod
    def correctness(self, cand_dir: Path, ctx: EvalContext) -> EvalResult:
        """Compare the candidate's outputs with the trusted reference on fresh inputs."""

    # -- stage 3 ---------------------------------------------------------------------
    @abstractmethod
    def performance(self, cand_dir: Path, ctx: EvalContext) -> EvalResult:
        """Measure; ``objectives`` in the target's order, ``samples`` for statistics."""

    # -- winner selection ------------------------------------------------------------
    def compare(self, cand_dir: Path, base_dir: Path, ctx: EvalContext, repeats: int) -> EvalResult:
        """Paired measurements of the primary metric, candidate and baseline interleaved."""
        metric = self.target.primary.metric
        cand: list[float] = []
        base: list[float] = []
        for _ in range(repeats):
            for folder, sink in ((base_dir, base), (cand_dir, cand)):
                res = self.performance(folder, ctx)
                if not res.ok:
                    return res
                sink.append(float(res.metrics[metric]))
        return EvalResult(
            CandidateState.VALID,
            stage="compare",
            samples={"candidate": tuple(cand), "baseline": tuple(base)},
        )

    def held_out(self, cand_dir: Path, ctx: EvalContext) -> EvalResult | None:
        """Measure on a workload the search never saw; None when the kind has none."""
        return None

    # -- driver (not meant to be overridden) -----------------------------------------
    def evaluate(self, cand_dir: Path, ctx: EvalContext) -> EvalResult:
        """Run the stages cheapest first; stop at the first that is not VALID."""
        start = time.perf_counter()
        artifacts: dict[str, str] = {}
        metrics: dict[str, float] = {}
        last = EvalResult(CandidateState.VALID)
        stages: tuple[Callable[[], EvalResult], ...] = (
            lambda: self.static_check(cand_dir),
            lambda: self.correctness(cand_dir, ctx),
            lambda: self.performance(cand_dir, ctx),
        )
        for stage in stages:
            last = stage()
            artifacts.update(last.artifacts)
            metrics.update(last.metrics)
            if not last.ok:
                break
        return EvalResult(
            state=last.state,
            reason=last.reason,
            stage=last.stage,
            metrics=metrics,
            objectives=last.objectives if last.ok else (),
            samples=last.samples,
            artifacts=artifacts,
            cost_s=time.perf_counter() - start,
        )
