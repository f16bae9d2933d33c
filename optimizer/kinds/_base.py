"""The evaluator contract: trusted checking code for one target kind (the plug-in base).

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

- ``compare(cand, base, ctx, repeats)``: candidate and incumbent measured interleaved;
  returns samples ``candidate`` and ``baseline`` of the primary metric (paired, same
  length). The default alternates ``performance`` calls.
- ``held_out(cand, ctx)``: the same measurement on a workload the search never saw
  (deterministic targets must win there too). Default: None (no held-out workload).
- ``final_check(cand, ctx)``: a deeper check before a pull branch is published (the
  function kind fuzzes the target's declared input domain with a large budget). Default:
  None.

A kind owns everything the engine must know about it, so that no kind name appears in the
engine (class attributes and methods with defaults):

- ``uses_gpu``: evaluate on a GPU where one exists (the sandbox then binds the device);
- ``concurrent_evaluations``: ``evaluate`` may run in several threads at once, one per
  evaluation slot (default False: the kind gets one slot); timed phases are wrapped in
  ``ctx.device_alone()``;
- ``preload``: modules the warm sandbox process imports once;
- ``sandbox_env(device)``: environment variables its sandboxed processes need;
- ``confirmation()``: what confirms a win, ``"paired"`` (interleaved timing, a bootstrap
  interval) or ``"exact"`` (exact values, then the held-out workload); by default from
  the target's ``noise``;
- ``outputs(result, io_dir)``: curves and files to log besides metrics;
- ``model_artifact``: an artifact folder a winner registers as an MLflow model;
- ``prompt_text()`` and ``prompt_files()``: its contract and trusted files for prompts.

The constructor validates the target's ``[evaluator]`` settings and raises
:class:`~optimizer.errors.ConfigError` for unknown keys and bad values, so a misspelt key
stops a run before anything is written. A kind registers built in (the table in
evaluators/__init__.py) or by entry point (group ``inference_optimizer.kinds``; see
:mod:`optimizer.kinds`).

This module is the ground floor both sides stand on: the engine calls the base, the kinds
subclass it (``evaluators._base`` re-exports it). It imports only the standard library and
the engine's other ground-floor modules (:mod:`optimizer.records`,
:mod:`optimizer.targets`, :mod:`optimizer.errors`, :mod:`optimizer.syntax`), never
MLflow, Optuna, openai or GitPython, and never a kind.
"""

from __future__ import annotations

import contextlib
import math
import shutil
import tempfile
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Protocol, Unpack

from optimizer import syntax
from optimizer.records import CandidateState, Confirmation, EvalResult, Outputs
from optimizer.sandbox.calls import CallOptions, CallResult, SessionOptions
from optimizer.targets import TargetSpec


class SandboxLike(Protocol):
    """What an evaluator needs of the sandbox (``optimizer.sandbox.Sandbox`` provides it);
    the options are :class:`~optimizer.sandbox.calls.SessionOptions`."""

    def call(self, entry: str, payload: Mapping[str, Any], *, workdir: Path,
             **options: Unpack[CallOptions]) -> CallResult: ...

    def open_session(self, entry: str, payload: Mapping[str, Any], *, workdir: Path,
                     **options: Unpack[SessionOptions]) -> Any:  # optimizer.sandbox.Session
        ...


@dataclass
class EvalContext:
    """Everything an evaluation may use besides the candidate's folder.

    ``seed`` is fresh per evaluation and never shown to the candidate; ``scratch`` is a
    trusted directory the candidate cannot see; ``io_dir`` is a directory shared with the
    candidate's process (inputs in, outputs out); ``cache_dir`` is a trusted directory
    that outlives the evaluation (a trained target model, reference outputs), hidden from
    the candidate; ``incumbent_dir`` is the folder of the program to beat, if any.
    """

    sandbox: SandboxLike
    seed: int
    scratch: Path
    io_dir: Path
    device: str = "cpu"
    timeout_s: float = 120.0
    incumbent_dir: Path | None = None
    log: Callable[[str], None] = field(default=lambda msg: None)
    cache_dir: Path | None = None  # None: a private one under scratch (nothing is shared)
    device_lock: Any = None  # shared by the slots on one device; None: no other slot

    def device_alone(self) -> AbstractContextManager[Any]:
        """Hold the device for a timed phase (``with ctx.device_alone(): ...``). Only a
        phase whose result a clock decides takes it: compiling, checking, waiting on I/O
        and deterministic metrics run beside the other slots of the device."""
        return self.device_lock if self.device_lock is not None else contextlib.nullcontext()

    def cache(self) -> Path:
        """The trusted cache directory (created on first use)."""
        folder = self.cache_dir or self.scratch / "cache"
        folder.mkdir(parents=True, exist_ok=True)
        return folder

    def run(self, entry: str, payload: Mapping[str, Any], *, workdir: Path) -> Any:
        """Run a trusted entry function ``"module:function"`` in the sandbox, in ``workdir``."""
        return self.sandbox.call(
            entry, payload, workdir=workdir, io_dir=self.io_dir, timeout_s=self.timeout_s
        )

    def session(self, entry: str, payload: Mapping[str, Any], *, workdir: Path,
                **options: Unpack[SessionOptions]) -> Any:
        """A sandboxed process in ``workdir`` that serves requests until closed
        (``optimizer.sandbox.Session``): the candidate's code runs there, and the caller
        (the trusted side) sends it inputs by value and times every request from outside.
        ``entry`` builds the child's handler, e.g. ``"optimizer.sandbox.serve:functions"``
        to call the candidate module's declared functions. A session that cannot start
        says why in ``.error`` (``.timed_out`` when it was not ready in time). ``options``
        as for the sandbox (:class:`~optimizer.sandbox.calls.SessionOptions`), ``io_dir``
        and ``timeout_s`` by default this evaluation's; ``spin_s``: how long each side
        busy-waits for the next message before it blocks (a round trip without two sleeps
        and wake-ups, for a core each; 0: none)."""
        mine: SessionOptions = {**options, "io_dir": options.get("io_dir") or self.io_dir,
                                "timeout_s": options.get("timeout_s") or self.timeout_s}
        return self.sandbox.open_session(entry, payload, workdir=workdir, **mine)

    @contextlib.contextmanager
    def session_on_copy(self, cand_dir: Path, files: Mapping[str, str], entry: str,
                        payload: Mapping[str, Any], prefix: str) -> Iterator[Any]:
        """:meth:`session` in a private folder under ``io_dir`` (named ``prefix``...) that
        holds a copy of the candidate's ``files`` only (its path -> the place in the
        folder); closed, and the folder deleted, when the block ends, so nothing of it
        reaches the next session. The runs keep to ``timeout_s`` themselves; the session's
        own limit, 10 s more, is a backstop behind them."""
        self.io_dir.mkdir(parents=True, exist_ok=True)
        folder = Path(tempfile.mkdtemp(prefix=prefix, dir=self.io_dir))
        try:
            workdir, io = folder / "policy", folder / "io"
            io.mkdir(parents=True)
            for rel, place in files.items():
                dest = workdir / place
                dest.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(cand_dir / rel, dest)
            session = self.session(entry, payload, workdir=workdir, io_dir=io,
                                   timeout_s=self.timeout_s + 10.0)
            try:
                yield session
            finally:
                session.close()
        finally:
            shutil.rmtree(folder, ignore_errors=True)


def result_from_call(call: CallResult, stage: str) -> EvalResult | None:
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


def valid_from_metrics(
    target: TargetSpec,
    metrics: Mapping[str, float],
    stage: str,
    *,
    samples: tuple[float, ...] | None = None,
    artifacts: Mapping[str, str] | None = None,
) -> EvalResult:
    """VALID with the target's objectives read from ``metrics`` (``samples`` of the primary
    metric, its one value where none are given); FAILED, naming what is known, where an
    objective metric is missing or not finite."""
    objectives = []
    for obj in target.objectives:
        value = metrics.get(obj.metric)
        if value is None or not math.isfinite(value):
            return EvalResult(CandidateState.FAILED,
                              f"objective metric {obj.metric!r} unknown or not finite; "
                              f"known: {sorted(metrics)}", stage, metrics=metrics)
        objectives.append(float(value))
    primary = target.primary.metric
    return EvalResult(CandidateState.VALID, "", stage, metrics=metrics,
                      objectives=tuple(objectives),
                      samples={primary: samples or (float(metrics[primary]),)},
                      artifacts=artifacts or {})


class Evaluator(ABC):
    """Base of every target kind's evaluator (see module docstring for the contract)."""

    kind: ClassVar[str] = ""
    # Modules a warm sandbox process imports once before forking candidates
    # (e.g. ("torch", "triton")); never anything that creates a CUDA context.
    preload: ClassVar[tuple[str, ...]] = ()
    uses_gpu: ClassVar[bool] = False  # evaluate on a GPU where the machine has one
    # several evaluations of one evaluator may run at once, one per slot (each in its own
    # thread, with its own context); a kind whose evaluator keeps per-evaluation state on
    # itself leaves this False and gets one slot
    concurrent_evaluations: ClassVar[bool] = False
    model_artifact: ClassVar[str] = ""  # artifact folder a winner registers as a model

    def __init__(self, target: TargetSpec):
        self.target = target

    # -- what the engine asks of a kind ----------------------------------------------
    def sandbox_env(self, device: str) -> dict[str, str]:
        """Environment variables of this kind's sandboxed processes on ``device``."""
        return {}

    def confirmation(self) -> Confirmation:
        """``PAIRED``: a winner is confirmed by interleaved measurements of candidate and
        seed and a bootstrap interval (``compare``); ``EXACT``: by exact values, then the
        held-out workload (``held_out``)."""
        return Confirmation.PAIRED if self.target.noise == "timing" else Confirmation.EXACT

    def confirmation_evaluations(self, repeats: int) -> float:
        """What confirming a winner costs, in evaluations of a candidate (the engine keeps
        that much of a target's time for its winner): ``repeats`` interleaved pairs of
        candidate and seed for a ``"paired"`` confirmation, the two held-out runs for an
        ``"exact"`` one. A kind whose comparison times many pairs in one call says less."""
        paired = Confirmation(self.confirmation()) is Confirmation.PAIRED
        return 2.0 * repeats if paired else 2.0

    def outputs(self, result: EvalResult, io_dir: Path) -> Outputs:
        """Curves and files of an evaluation to log besides its metrics."""
        return Outputs()

    def prepare(self, ctx: EvalContext) -> None:
        """Trusted work the whole night shares, done once before its first evaluation
        (the kernel kind's validation cases, timed inputs and their references). ``ctx`` is
        an evaluation's context that no candidate uses (its ``device`` and ``cache_dir`` are
        the night's). A GPU night runs it beside the slots' sandbox starts, so no seed pays
        for it. It must be safe to call again (nothing is made twice); optional: by default
        the work is done when first needed."""
        return None

    def prompt_text(self) -> str:
        """The kind's contract for an LLM prompt ("" = the engine's generic text). The
        built-in kinds keep theirs in ``prompt.txt`` next to their evaluator."""
        return ""

    def prompt_files(self) -> dict[str, str]:
        """Trusted, non-editable files a proposer should see (name -> text)."""
        return {}

    # -- stage 1 ---------------------------------------------------------------------
    def static_check(self, cand_dir: Path) -> EvalResult:
        """Cheap checks before anything runs: every editable Python file is UTF-8 and
        parses (a byte-order mark is allowed, as Python allows it)."""
        for rel in self.target.editable:
            path = cand_dir / rel
            if path.suffix != ".py":
                continue
            try:
                syntax.parse(read_source(path), filename=rel)
            except UnicodeDecodeError as exc:
                return EvalResult(
                    CandidateState.REJECTED,
                    f"{rel}: not UTF-8 text ({exc.reason} at byte {exc.start})",
                    "static",
                )
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

    def final_check(self, cand_dir: Path, ctx: EvalContext) -> EvalResult | None:
        """The deeper check a program passes before it becomes a pull branch (e.g. its
        input domain fuzzed with a large budget); None when the kind has none."""
        return None

    # -- driver (not meant to be overridden) -----------------------------------------
    def evaluate(self, cand_dir: Path, ctx: EvalContext) -> EvalResult:
        """Run the stages cheapest first; stop at the first that is not VALID."""
        start = time.perf_counter()
        artifacts: dict[str, str] = {}
        metrics: dict[str, float] = {}
        last = EvalResult(CandidateState.VALID)
        stages: tuple[tuple[str, Callable[[], EvalResult]], ...] = (
            ("static", lambda: self.static_check(cand_dir)),
            ("correctness", lambda: self.correctness(cand_dir, ctx)),
            ("performance", lambda: self.performance(cand_dir, ctx)),
        )
        for name, stage in stages:
            t0 = time.perf_counter()
            last = stage()
            artifacts.update(last.artifacts)
            metrics.update(last.metrics)
            # where the time went (records.COST_METRIC_PREFIXES: kept out of prompts)
            metrics[f"stage_s/{name}"] = time.perf_counter() - t0
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


def read_source(path: Path) -> str:
    """A Python source file's text: UTF-8, a leading byte-order mark dropped (Python
    imports such a file; ``ast.parse`` of its text with the mark does not)."""
    return path.read_bytes().decode("utf-8-sig")


def text_beside(module_file: str, name: str = "prompt.txt") -> str:
    """A text file next to a kind's module (its prompt text), "" when there is none."""
    path = Path(module_file).with_name(name)
    return path.read_text(encoding="utf-8") if path.is_file() else ""


@dataclass(frozen=True)
class Command:
    """An extra ``optimizer`` subcommand a kind contributes (e.g. an importer of problem
    files): registered like kinds, built in or by entry point (group
    ``inference_optimizer.commands``, the object named must be a Command). Its module must
    import fast: every ``optimizer`` invocation builds the parser."""

    name: str
    help: str
    add_arguments: Callable[[Any], None]  # (argparse.ArgumentParser) -> None
    run: Callable[[Any], int]  # (argparse.Namespace) -> exit code
