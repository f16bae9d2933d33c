"""The ``function`` kind: the target brings its own trusted ``evaluate.py``.

``evaluate.py`` (trusted, in the target folder, never editable) defines::

    def validate(program_path: str) -> None        # raise AssertionError("why") if wrong
    def evaluate(program_path: str) -> dict[str, float]
    def evaluate_held_out(program_path: str) -> dict[str, float]   # optional

and runs on the trusted side: in the engine's process, never beside the candidate. The
``program_path`` it gets is a stand-in whose functions run the candidate's in a sandboxed
process (:mod:`evaluators.function.harness`): it imports and calls them as if they were
local, while the inputs, the reference, the comparison and the clock stay here. Use
``harness.timed(fn, *args)`` to time a call from this side of the channel.

``[evaluator]`` settings in target.toml: ``module`` (default "evaluate.py"), ``program``
(default: the first editable file), ``repeats`` (evaluations per measurement; the
primary metric's median is reported and the repetitions kept as samples; default 3),
``timed`` (which phase of an evaluation is timed, see below).
Besides what ``evaluate`` returns, every measurement reports ``import_s`` (the candidate's
import, measured from outside) and ``cpu_s`` (its process's CPU time as the kernel counts
it, per evaluation).

Slots on one device share its timing lock, and only a timed phase holds it, so evaluations
that time nothing run side by side. ``timed`` says what ``evaluate()`` times:

- ``"evaluate"``: the whole call (it may read a clock anywhere); each call holds the lock.
  The default for ``noise = "timing"``.
- ``"calls"``: only the calls it times with ``harness.timed(fn, ...)``; each such call
  holds the lock, the rest of ``evaluate()`` runs beside other slots.
- ``"nothing"``: no clock decides its metrics (a deterministic metric, an evaluation that
  waits on I/O); no lock. The default for ``noise = "deterministic"``.
"""

from __future__ import annotations

import contextlib
import math
import statistics
import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from evaluators._base import EvalContext, Evaluator, text_beside
from evaluators.failure_site import failure_site
from evaluators.function.harness import (
    CandidateError,
    CandidateTimeout,
    CandidateUnavailable,
    Programs,
)
from optimizer.errors import ConfigError
from optimizer.records import CandidateState, EvalResult
from optimizer.sandbox.loader import NotImportable, load_module

_SETTINGS = {"module", "program", "repeats", "fuzz", "fuzz_publish", "timed"}
TIMED = ("evaluate", "calls", "nothing")  # what evaluate() times (module docstring)


class FunctionEvaluator(Evaluator):
    kind = "function"
    preload = ("numpy",)
    concurrent_evaluations = True  # evaluate.py is imported once, under a lock

    def __init__(self, target: Any):
        super().__init__(target)
        settings = dict(target.evaluator)
        unknown = set(settings) - _SETTINGS
        where = f"{target.rel_path}/target.toml"
        if unknown:
            raise ConfigError(
                f"unknown key for kind 'function'; allowed in [evaluator]: "
                f"{', '.join(sorted(_SETTINGS))}",
                file=where,
                key=f"evaluator.{sorted(unknown)[0]}",
            )
        self.module_path = target.path / str(settings.get("module", "evaluate.py"))
        self.program = str(settings.get("program", target.editable[0]))
        repeats = settings.get("repeats", 3)
        if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
            raise ConfigError(f"must be a whole number >= 1, not {repeats!r}", file=where,
                              key="evaluator.repeats")
        self.repeats = repeats
        self.fuzz_budgets = {}
        for key, default in (("fuzz", 40), ("fuzz_publish", 400)):
            value = settings.get(key, default)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ConfigError(f"must be a whole number >= 0, not {value!r}", file=where,
                                  key=f"evaluator.{key}")
            self.fuzz_budgets[key] = value
        timed = settings.get("timed", "evaluate" if target.noise == "timing" else "nothing")
        if timed not in TIMED:
            raise ConfigError(f"must be one of {', '.join(map(repr, TIMED))}, not {timed!r}",
                              file=where, key="evaluator.timed")
        self.timed = str(timed)
        if not self.module_path.is_file():
            raise ConfigError(f"evaluator module {self.module_path} not found", file=where,
                              key="evaluator.module")
        if self.program not in target.editable:
            raise ConfigError(f"program {self.program!r} is not an editable file", file=where,
                              key="evaluator.program")
        self._trusted: Any = None
        self._import_lock = threading.Lock()

    def prompt_text(self) -> str:
        return text_beside(__file__)

    # -- the trusted evaluate.py ---------------------------------------------------------
    def trusted(self) -> Any:
        """The target's evaluate.py, imported once in this (the trusted) process."""
        with self._import_lock:
            return self._import_trusted()

    def _import_trusted(self) -> Any:
        if self._trusted is None:
            name = f"_target_evaluate_{self.target.name}_{id(self)}"
            try:
                self._trusted = load_module(self.module_path, name)
            except NotImportable:
                raise ConfigError(f"cannot import {self.module_path}") from None
        return self._trusted

    def _run(self, fn: Callable[[str], Any], folder: Path, ctx: EvalContext, stage: str,
             programs_out: list[Programs] | None = None) -> tuple[EvalResult | None, Any]:
        """Call a trusted function with a stand-in for the program in ``folder``; every
        failure becomes a state with a reason."""
        programs = Programs(ctx, folder, self.program, timed_calls=self.timed == "calls")
        try:
            return None, fn(programs.stand_in())
        except AssertionError as exc:
            return EvalResult(CandidateState.INVALID, f"wrong answer: {exc}"
                              + failure_site(exc, self.module_path), stage), None
        except CandidateTimeout as exc:
            return EvalResult(CandidateState.TIMEOUT, str(exc), stage), None
        except CandidateUnavailable as exc:
            state = CandidateState.TIMEOUT if exc.timed_out else CandidateState.FAILED
            return EvalResult(state, str(exc)[-4000:], stage), None
        except CandidateError as exc:
            return EvalResult(CandidateState.FAILED, str(exc)[-4000:], stage), None
        except Exception as exc:  # noqa: BLE001 - evaluate.py tripping over an answer
            return EvalResult(
                CandidateState.FAILED,
                f"{self.module_path.name} raised {type(exc).__name__}: {exc} (on what the "
                f"program returned){failure_site(exc, self.module_path)}",
                stage,
            ), None
        finally:
            programs.close()
            if programs_out is not None:
                programs_out.append(programs)

    # -- stages --------------------------------------------------------------------------
    def correctness(self, cand_dir: Path, ctx: EvalContext) -> EvalResult:
        validate = getattr(self.trusted(), "validate", None)
        if validate is None:
            return EvalResult(CandidateState.FAILED,
                              f"{self.module_path.name} defines no validate(program_path)",
                              "correctness")
        failed, _ = self._run(validate, cand_dir, ctx, "correctness")
        if failed is not None:
            return failed
        fuzzed = self._fuzz(cand_dir, ctx, self.fuzz_budgets["fuzz"], "correctness")
        if isinstance(fuzzed, EvalResult):
            return fuzzed
        metrics = {"fuzz_examples": float(fuzzed)} if fuzzed else {}
        return EvalResult(CandidateState.VALID, "", "correctness", metrics=metrics)

    def final_check(self, cand_dir: Path, ctx: EvalContext) -> EvalResult | None:
        """Before a pull branch: the declared domain fuzzed with the large budget."""
        fuzzed = self._fuzz(cand_dir, ctx, self.fuzz_budgets["fuzz_publish"], "final check",
                            shrink=True)
        if isinstance(fuzzed, EvalResult):
            return fuzzed
        return EvalResult(CandidateState.VALID, f"{fuzzed} drawn inputs answered right",
                          "final check", metrics={"fuzz_examples": float(fuzzed)})

    def _fuzz(self, cand_dir: Path, ctx: EvalContext, budget: int, stage: str,
              shrink: bool = False) -> EvalResult | int:
        """The target's declared domain (``fuzz_domain``/``fuzz_check`` in evaluate.py)
        drawn from with Hypothesis; the number of inputs checked, or the verdict."""
        trusted = self.trusted()
        domain, check = getattr(trusted, "fuzz_domain", None), getattr(trusted, "fuzz_check",
                                                                       None)
        if domain is None or check is None or budget <= 0:
            return 0
        from evaluators.function.fuzz import fuzz
        from evaluators.function.harness import load_stand_in

        count = [0]

        def run(path: str) -> int:
            count[0] = fuzz(load_stand_in(path), domain(), check, budget=budget,
                            seed=ctx.seed % (2**32), shrink=shrink)
            return count[0]

        failed, _ = self._run(run, cand_dir, ctx, stage)
        return failed if failed is not None else count[0]

    def _measure(self, cand_dir: Path, ctx: EvalContext, name: str, stage: str) -> EvalResult:
        func = getattr(self.trusted(), name, None)
        if func is None:
            return EvalResult(CandidateState.FAILED,
                              f"{self.module_path.name} defines no {name}(program_path)", stage)
        runs: list[dict[str, float]] = []
        programs: list[Programs] = []
        for _ in range(self.repeats):
            with self._timed_call(ctx):
                failed, value = self._run(func, cand_dir, ctx, stage, programs)
            if failed is not None:
                return failed
            try:
                runs.append(_as_metrics(value))
            except (TypeError, ValueError) as exc:
                return EvalResult(CandidateState.FAILED, f"{name}(): {exc}", stage)
        return self._result(runs, programs, stage)

    def _timed_call(self, ctx: EvalContext) -> AbstractContextManager[Any]:
        """The device's timing lock around one ``evaluate()`` call, where the whole call is
        timed; nothing otherwise (``timed = "calls"`` locks inside, in ``harness.timed``)."""
        return ctx.device_alone() if self.timed == "evaluate" else contextlib.nullcontext()

    def _result(self, runs: list[dict[str, float]], programs: list[Programs],
                stage: str) -> EvalResult:
        metrics: dict[str, float] = {}
        for name in runs[0]:
            metrics[name] = statistics.median(float(r[name]) for r in runs)
        imports = [s for p in programs for s in p.import_s]
        cpus = [s for p in programs for s in p.cpu_s]
        if imports:
            metrics.setdefault("import_s", statistics.median(imports))
        if cpus:
            metrics.setdefault("cpu_s", statistics.median(cpus))
        objectives = []
        for obj in self.target.objectives:
            value = metrics.get(obj.metric)
            if value is None or not math.isfinite(value):
                return EvalResult(
                    CandidateState.FAILED,
                    f"evaluate() returned no finite '{obj.metric}' (got {sorted(metrics)})",
                    stage,
                    metrics=metrics,
                )
            objectives.append(value)
        primary = self.target.primary.metric
        return EvalResult(
            CandidateState.VALID,
            "",
            stage,
            metrics=metrics,
            objectives=tuple(objectives),
            samples={primary: tuple(float(r[primary]) for r in runs)},
        )

    def performance(self, cand_dir: Path, ctx: EvalContext) -> EvalResult:
        return self._measure(cand_dir, ctx, "evaluate", "performance")

    def held_out(self, cand_dir: Path, ctx: EvalContext) -> EvalResult | None:
        if getattr(self.trusted(), "evaluate_held_out", None) is None:
            return None
        return self._measure(cand_dir, ctx, "evaluate_held_out", "held_out")

    def compare(self, cand_dir: Path, base_dir: Path, ctx: EvalContext, repeats: int) -> EvalResult:
        """Seed and candidate evaluated alternately, each in processes of its own."""
        evaluate = self.trusted().evaluate
        metric = self.target.primary.metric
        cand: list[float] = []
        base: list[float] = []
        for _ in range(max(3, repeats)):
            for folder, sink in ((base_dir, base), (cand_dir, cand)):
                with self._timed_call(ctx):
                    failed, value = self._run(evaluate, folder, ctx, "compare")
                if failed is not None:
                    return failed
                try:
                    sink.append(float(_as_metrics(value)[metric]))
                except (KeyError, TypeError, ValueError) as exc:
                    return EvalResult(CandidateState.FAILED, f"evaluate(): {exc}", "compare")
        return EvalResult(
            CandidateState.VALID,
            "",
            "compare",
            samples={"candidate": tuple(cand), "baseline": tuple(base)},
        )


def _as_metrics(value: Any) -> dict[str, float]:
    if not isinstance(value, dict):
        raise TypeError(f"evaluate() must return dict[str, float], not {type(value).__name__}")
    return {str(k): float(v) for k, v in value.items()}
