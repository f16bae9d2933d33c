"""The ``function`` kind: the target brings its own ``evaluate.py``.

``evaluate.py`` (trusted, in the target folder, never editable) defines::

    def validate(program_path: str) -> None        # raise AssertionError("why") if wrong
    def evaluate(program_path: str) -> dict[str, float]
    def evaluate_held_out(program_path: str) -> dict[str, float]   # optional

Both run in the sandbox next to the candidate (they import it), so a function target's
own checks are only as strong as its ``evaluate.py``; kinds with a reference (kernel,
routing, speculative) keep the verdict on the trusted side.

``[evaluator]`` settings in target.toml: ``module`` (default "evaluate.py"), ``program``
(default: the first editable file), ``repeats`` (evaluations per measurement; the
primary metric's median is reported and the repetitions kept as samples; default 3).
"""

from __future__ import annotations

import importlib.util
import math
import shutil
import sys
from pathlib import Path
from typing import Any

from evaluators._base import EvalContext, Evaluator, result_from_call, text_beside
from optimizer.errors import ConfigError
from optimizer.records import CandidateState, EvalResult

_SETTINGS = {"module", "program", "repeats"}


class FunctionEvaluator(Evaluator):
    kind = "function"
    preload = ("numpy",)

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
        self.module = str(target.path / settings.get("module", "evaluate.py"))
        self.program = str(settings.get("program", target.editable[0]))
        self.repeats = int(settings.get("repeats", 3))
        if not Path(self.module).is_file():
            raise ConfigError(f"evaluator module {self.module} not found", file=where,
                              key="evaluator.module")

    def prompt_text(self) -> str:
        return text_beside(__file__)

    def _payload(self, cand_dir: Path, **extra: Any) -> dict[str, Any]:
        return {"module": self.module, "program": str(cand_dir / self.program), **extra}

    def correctness(self, cand_dir: Path, ctx: EvalContext) -> EvalResult:
        call = ctx.run(
            "evaluators.function.evaluator:child_validate", self._payload(cand_dir),
            workdir=cand_dir,
        )
        failed = result_from_call(call, "correctness")
        if failed is not None:
            return failed
        if not call.response.get("ok"):
            return EvalResult(
                CandidateState.INVALID, str(call.response.get("reason")), "correctness"
            )
        return EvalResult(CandidateState.VALID, "", "correctness")

    def _measure(self, cand_dir: Path, ctx: EvalContext, held_out: bool, stage: str) -> EvalResult:
        payload = self._payload(cand_dir, repeats=self.repeats, held_out=held_out)
        call = ctx.run("evaluators.function.evaluator:child_evaluate", payload, workdir=cand_dir)
        failed = result_from_call(call, stage)
        if failed is not None:
            return failed
        runs: list[dict[str, float]] = call.response["runs"]
        return self._result(runs, stage)

    def _result(self, runs: list[dict[str, float]], stage: str) -> EvalResult:
        metrics: dict[str, float] = {}
        for name in runs[0]:
            values = sorted(float(r[name]) for r in runs)
            metrics[name] = values[len(values) // 2]
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
        return self._measure(cand_dir, ctx, held_out=False, stage="performance")

    def held_out(self, cand_dir: Path, ctx: EvalContext) -> EvalResult | None:
        res = self._measure(cand_dir, ctx, held_out=True, stage="held_out")
        if res.state is CandidateState.FAILED and "no evaluate_held_out" in res.reason:
            return None
        return res

    def compare(self, cand_dir: Path, base_dir: Path, ctx: EvalContext, repeats: int) -> EvalResult:
        # The baseline is copied next to the io files: the sandbox shows the candidate
        # only its own folder, the io dir and read-only code.
        base_copy = ctx.io_dir / "baseline"
        shutil.rmtree(base_copy, ignore_errors=True)
        shutil.copytree(base_dir, base_copy)
        payload = self._payload(
            cand_dir,
            baseline=str(base_copy / self.program),
            repeats=repeats,
            metric=self.target.primary.metric,
        )
        call = ctx.run("evaluators.function.evaluator:child_compare", payload, workdir=cand_dir)
        failed = result_from_call(call, "compare")
        if failed is not None:
            return failed
        return EvalResult(
            CandidateState.VALID,
            "",
            "compare",
            samples={
                "candidate": tuple(call.response["candidate"]),
                "baseline": tuple(call.response["baseline"]),
            },
        )


# -- entry functions, run inside the sandbox -------------------------------------------


def _load(module_path: str) -> Any:
    spec = importlib.util.spec_from_file_location("_target_evaluate", module_path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["_target_evaluate"] = mod
    spec.loader.exec_module(mod)
    return mod


def child_validate(payload: dict[str, Any], io_dir: Path) -> dict[str, Any]:
    mod = _load(payload["module"])
    if not hasattr(mod, "validate"):
        return {"error": "evaluate.py defines no validate(program_path)"}
    try:
        mod.validate(payload["program"])
    except AssertionError as exc:
        return {"ok": False, "reason": f"wrong answer: {exc}"}
    return {"ok": True}


def _as_metrics(value: Any) -> dict[str, float]:
    if not isinstance(value, dict):
        raise TypeError(f"evaluate() must return dict[str, float], not {type(value).__name__}")
    return {str(k): float(v) for k, v in value.items()}


def child_evaluate(payload: dict[str, Any], io_dir: Path) -> dict[str, Any]:
    mod = _load(payload["module"])
    name = "evaluate_held_out" if payload.get("held_out") else "evaluate"
    func = getattr(mod, name, None)
    if func is None:
        return {"error": f"evaluate.py defines no {name}(program_path)"}
    runs = [_as_metrics(func(payload["program"])) for _ in range(max(1, payload["repeats"]))]
    return {"runs": runs}


def child_compare(payload: dict[str, Any], io_dir: Path) -> dict[str, Any]:
    mod = _load(payload["module"])
    metric = payload["metric"]
    cand: list[float] = []
    base: list[float] = []
    for _ in range(max(3, payload["repeats"])):
        base.append(_as_metrics(mod.evaluate(payload["baseline"]))[metric])
        cand.append(_as_metrics(mod.evaluate(payload["program"]))[metric])
    return {"candidate": cand, "baseline": base}
