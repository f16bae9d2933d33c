"""Evaluating programs of one target outside a night, exactly as a night does.

``optimizer evaluate``, the contract suites (:mod:`optimizer.testing`) and the adversarial
suite use it: the same sandbox (:func:`~optimizer.evaluation.make_sandbox`), the same
private directories and hidden seed (:func:`~optimizer.evaluation.fresh_context`), the same
stages with every failure a state (:func:`~optimizer.evaluation.guarded`), and the same
winner confirmation (``compare`` or ``held_out``, as the kind says).

    with Workbench(target, state_dir=tmp) as bench:
        result = bench.evaluate({"program.py": source})
        paired = bench.confirm({"program.py": source}, repeats=5)
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from optimizer import kinds as evaluators
from optimizer import reproduce
from optimizer.config import ExperimentConfig, SandboxConfig
from optimizer.errors import SandboxError
from optimizer.evaluation import (
    RecordingSandbox,
    device_for,
    fresh_context,
    guarded,
    make_sandbox,
)
from optimizer.kinds import Evaluator
from optimizer.records import EvalResult
from optimizer.sandbox import Sandbox
from optimizer.targets import TargetSpec, materialize


class Workbench:
    """A target's evaluator and sandbox, for evaluating any of its programs once.

    ``state_dir`` holds worktrees, io and scratch directories (a temporary one when None);
    ``cache_dir`` the trusted cache shared across evaluations (a trained target model);
    ``timeout_s`` overrides the target's limit of one sandboxed call.
    """

    def __init__(
        self,
        target: TargetSpec,
        *,
        state_dir: Path | None = None,
        workspace: Path | None = None,
        sandbox: SandboxConfig | None = None,
        cache_dir: Path | None = None,
        timeout_s: float | None = None,
    ):
        self.target = target
        self._tmp = None if state_dir else tempfile.TemporaryDirectory(prefix="optimizer-eval-")
        self.root = Path(state_dir or self._tmp.name).resolve()  # type: ignore[union-attr]
        self.config = ExperimentConfig(
            name="evaluate",
            file=target.path / "target.toml",
            workspace=(workspace or target.path).resolve(),
            targets=(),
            state_dir=self.root,
            sandbox=sandbox or SandboxConfig(),
        )
        self.cache_dir = (cache_dir or self.root / "cache").resolve()
        self.cache_dir.mkdir(parents=True, exist_ok=True)
        self.timeout_s = timeout_s or self.config.sandbox.timeout_s or target.timeout_s
        self.evaluator: Evaluator = evaluators.get(target.kind)(target)
        # the cache holds what candidates must not read (a trained target, its held-out
        # tokens, reference outputs): hidden like the state dir, wherever it lies
        self.sandbox: Sandbox = make_sandbox(self.config, target, self.evaluator,
                                             hidden=(self.cache_dir,))
        self.last_log = ""
        self._n = 0
        self._warm = False

    # -- lifecycle -----------------------------------------------------------------------
    def close(self) -> None:
        self.sandbox.close()
        if self._tmp is not None:
            self._tmp.cleanup()

    def __enter__(self) -> Workbench:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- programs ------------------------------------------------------------------------
    def folder(self, files: Mapping[str, str] | None = None, name: str = "") -> Path:
        """A copy of the target folder with ``files`` (editable name -> source) in place."""
        self._n += 1
        for rel in files or {}:
            if rel not in self.target.editable:
                raise ValueError(f"{rel} is not an editable file of {self.target.name}")
        # editable files elsewhere in the repository: a copy of the repository around it
        return materialize(self.target, files or {},
                           self.root / "worktrees" / (name or f"candidate-{self._n}"))

    def _warm_up(self) -> None:
        """Start the warm sandbox before the first evaluation's clock, as a night has it
        started when its second candidate is evaluated: ``cost_s`` is then what a
        candidate costs (0.54 s for a 0.5 s ``evaluate``), not that plus the sandbox's
        start (0.14 s, its preload imported; 2026-12-03, 2 cores). A sandbox that cannot
        start fails the evaluation, as before."""
        if not self._warm:
            self._warm = True
            try:
                self.sandbox.warm_up()
            except SandboxError:
                pass

    def _context(self, key: str, sandbox: Any, timeout_s: float | None = None) -> Any:
        ctx = fresh_context(
            self.config, self.target, key, sandbox, timeout_s=timeout_s or self.timeout_s,
            device=device_for(self.evaluator),
        )
        ctx.cache_dir = self.cache_dir
        return ctx

    def evaluate(self, files: Mapping[str, str] | None = None) -> EvalResult:
        """The stages of a night's candidate (static, correctness, performance); on a
        deterministic target a VALID program is evaluated again in fresh processes and
        must repeat its objective metrics bit for bit, as before a winner's confirmation
        (:mod:`optimizer.reproduce`)."""
        folder = self.folder(files)
        self._warm_up()
        recorder = RecordingSandbox(self.sandbox)
        ctx = self._context(folder.name, recorder)
        try:
            result = guarded(lambda: self.evaluator.evaluate(folder, ctx), "evaluate",
                             recorder.notes)
            if result.ok and reproduce.applies(self.target):
                again = self._context(folder.name + "-again", recorder)
                try:
                    result = reproduce.judged(result, reproduce.verify(
                        self.target, self.evaluator, folder, again, result.metrics))
                finally:
                    self._clean(folder, again)
            return result
        finally:
            self.last_log = recorder.log()
            self._clean(folder, ctx)

    def confirm(
        self,
        files: Mapping[str, str] | None,
        baseline: Mapping[str, str] | None = None,
        repeats: int = 5,
    ) -> EvalResult:
        """A winner's confirmation against ``baseline`` (default: the seed): the paired
        comparison for kinds confirmed by timing, the held-out workload otherwise (its
        result, or the candidate's held-out result alone when the kind has none)."""
        cand, base = self.folder(files), self.folder(baseline, name=f"baseline-{self._n}")
        recorder = RecordingSandbox(self.sandbox)
        ctx = self._context("confirm", recorder, max(self.timeout_s, 60.0) * 4)
        try:
            if self.evaluator.confirmation() == "paired":
                return guarded(lambda: self.evaluator.compare(cand, base, ctx, repeats),
                               "compare", recorder.notes)

            def held() -> EvalResult:
                res = self.evaluator.held_out(cand, ctx)
                return res if res is not None else self.evaluator.performance(cand, ctx)

            return guarded(held, "held_out", recorder.notes)
        finally:
            self.last_log = recorder.log()
            self._clean(cand, ctx)
            self._clean(base, ctx)

    def _clean(self, folder: Path, ctx: Any) -> None:
        top = folder
        worktrees = self.root / "worktrees"
        if folder.is_relative_to(worktrees) and folder != worktrees:
            top = worktrees / folder.relative_to(worktrees).parts[0]  # a repository copy
        for d in (top, ctx.io_dir, ctx.scratch):
            shutil.rmtree(d, ignore_errors=True)

