"""Target specifications: a folder with ``target.toml``, the seed program and its evaluator.

``target.toml`` keys (unknown keys are an error)::

    name        = "topk_sampling"     # unique within an experiment
    kind        = "function"          # evaluator: function, kernel, routing, speculative
    description = "..."               # goes into the LLM prompt
    editable    = ["program.py"]      # files a proposer may change (EVOLVE-BLOCKs inside)
    objectives  = [{ metric = "time_s", direction = "minimize" }]
    noise       = "timing"            # "timing" (bootstrap CI) or "deterministic" (+ held-out)
    min_gain    = 0.05                # a winner must be this much better (fraction)
    timeout_s   = 60                  # wall-clock limit of one sandboxed evaluation
    starts      = ["variants/a.py"]   # more starting programs (a file for the one editable
                                      # file, or a folder of editable files), each evaluated
                                      # after the seed as a structure of its own
    knob_constraints = ["NUM_STAGES * (BLOCK_M + BLOCK_N) * BLOCK_K * 2 <= 232448"]
                                      # knob values that cannot work (a tile over the shared
                                      # memory) are never evaluated: arithmetic and
                                      # comparisons over knob names, checked before a
                                      # candidate is made (values not sampled: asked again)
    [evaluator]                       # the kind's own settings (free-form, kind-checked)

This module imports only the standard library so that evaluators can use it on a GPU
machine that has nothing but torch and triton.
"""

from __future__ import annotations

import ast
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from optimizer import syntax
from optimizer.errors import ConfigError

_TARGET_KEYS = {
    "name",
    "kind",
    "description",
    "editable",
    "objectives",
    "noise",
    "min_gain",
    "timeout_s",
    "starts",
    "knob_constraints",
    "evaluator",
}


@dataclass(frozen=True)
class Objective:
    metric: str
    direction: str = "minimize"  # or "maximize"

    @property
    def minimize(self) -> bool:
        return self.direction == "minimize"


@dataclass(frozen=True)
class TargetSpec:
    name: str
    kind: str
    path: Path  # the trusted folder in the workspace (absolute)
    rel_path: str  # the same folder relative to the workspace root ("targets/function/x")
    description: str
    editable: tuple[str, ...]
    objectives: tuple[Objective, ...]
    noise: str = "timing"
    min_gain: float = 0.05
    timeout_s: float = 120.0
    evaluator: Mapping[str, Any] = field(default_factory=dict)
    starts: tuple[str, ...] = ()  # paths relative to the folder (see start_files)
    knob_constraints: tuple[str, ...] = ()  # expressions knob values must satisfy

    @property
    def primary(self) -> Objective:
        return self.objectives[0]

    def seed_files(self) -> dict[str, str]:
        """The editable files as committed (UTF-8; a byte-order mark dropped)."""
        return {rel: (self.path / rel).read_bytes().decode("utf-8-sig") for rel in self.editable}

    def start_files(self, start: str) -> dict[str, str]:
        """The editable files of a declared start: the seed's, with the start's file in
        place of the one editable file, or with each editable file the start's folder has."""
        files = self.seed_files()
        where = self.path / start
        if where.is_dir():
            for rel in self.editable:
                if (where / rel).is_file():
                    files[rel] = (where / rel).read_bytes().decode("utf-8-sig")
        else:
            files[self.editable[0]] = where.read_bytes().decode("utf-8-sig")
        return files


def _merge(base: dict[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in overrides.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def load_target(
    folder: Path, workspace: Path, overrides: Mapping[str, Any] | None = None
) -> TargetSpec:
    """Read ``folder/target.toml``; ``overrides`` (from the experiment or --set) win."""
    folder = folder if folder.is_absolute() else workspace / folder
    toml_path = folder / "target.toml"
    shown = (
        str(toml_path.relative_to(workspace))
        if toml_path.is_relative_to(workspace)
        else str(toml_path)
    )
    if not toml_path.is_file():
        raise ConfigError(
            "no target.toml here; a target is a folder with target.toml and its seed files",
            file=shown,
        )
    try:
        data = tomllib.loads(toml_path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"not valid TOML: {exc}", file=shown) from None
    data = _merge(data, overrides or {})
    unknown = set(data) - _TARGET_KEYS
    if unknown:
        raise ConfigError(
            f"unknown key(s) {sorted(unknown)}; allowed: {sorted(_TARGET_KEYS)}",
            file=shown,
            key=sorted(unknown)[0],
        )
    for key in ("name", "kind", "editable"):
        if key not in data:
            raise ConfigError("missing required key", file=shown, key=key)
    name, kind = data["name"], data["kind"]
    if not isinstance(name, str) or not name.replace("_", "").replace("-", "").isalnum():
        raise ConfigError("must be a string of letters, digits, '_' or '-'", file=shown, key="name")
    editable = data["editable"]
    if (
        not isinstance(editable, list)
        or not editable
        or not all(isinstance(e, str) for e in editable)
    ):
        raise ConfigError("must be a non-empty list of file names", file=shown, key="editable")
    for rel in editable:
        if not (folder / rel).is_file():
            raise ConfigError(f"editable file '{rel}' does not exist", file=shown, key="editable")
        try:
            (folder / rel).read_bytes().decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            raise ConfigError(
                f"editable file '{rel}' is not UTF-8 text ({exc.reason} at byte {exc.start}); "
                "save it as UTF-8",
                file=shown,
                key="editable",
            ) from None
    raw_objs = data.get("objectives", [{"metric": "time_s", "direction": "minimize"}])
    objectives = []
    if not isinstance(raw_objs, list) or not raw_objs:
        raise ConfigError("must be a non-empty list of tables", file=shown, key="objectives")
    for i, obj in enumerate(raw_objs):
        extra = sorted(set(obj) - {"metric", "direction"}) if isinstance(obj, dict) else []
        if not isinstance(obj, dict) or extra or "metric" not in obj:
            raise ConfigError(
                ("unknown key; " if extra else "")
                + 'each objective is { metric = "...", direction = "minimize"|"maximize" }',
                file=shown,
                key=f"objectives[{i}]" + (f".{extra[0]}" if extra else ""),
            )
        direction = obj.get("direction", "minimize")
        if direction not in ("minimize", "maximize"):
            raise ConfigError(
                f"direction must be 'minimize' or 'maximize', not {direction!r}",
                file=shown,
                key=f"objectives[{i}].direction",
            )
        objectives.append(Objective(str(obj["metric"]), direction))
    noise = data.get("noise", "timing")
    if noise not in ("timing", "deterministic"):
        raise ConfigError(
            f"must be 'timing' or 'deterministic', not {noise!r}", file=shown, key="noise"
        )
    min_gain = data.get("min_gain", 0.05)
    timeout_s = data.get("timeout_s", 120.0)
    for key, value in (("min_gain", min_gain), ("timeout_s", timeout_s)):
        if not isinstance(value, int | float) or isinstance(value, bool) or value < 0:
            raise ConfigError("must be a non-negative number", file=shown, key=key)
    starts = data.get("starts", [])
    if not isinstance(starts, list) or not all(isinstance(x, str) for x in starts):
        raise ConfigError("must be a list of paths in the target's folder", file=shown,
                          key="starts")
    for i, start in enumerate(starts):
        where = folder / start
        if where.is_dir():
            found = [rel for rel in editable if (where / rel).is_file()]
            if not found:
                raise ConfigError(f"start folder '{start}' holds none of the editable files "
                                  f"{editable}", file=shown, key=f"starts[{i}]")
            texts = [where / rel for rel in found]
        elif where.is_file():
            if len(editable) != 1:
                raise ConfigError(f"start '{start}' is one file but the target has "
                                  f"{len(editable)} editable files: make it a folder of "
                                  "them", file=shown, key=f"starts[{i}]")
            texts = [where]
        else:
            raise ConfigError(f"start '{start}' does not exist", file=shown,
                              key=f"starts[{i}]")
        for text in texts:
            try:
                text.read_bytes().decode("utf-8-sig")
            except UnicodeDecodeError as exc:
                raise ConfigError(f"start file '{text.relative_to(folder)}' is not UTF-8 "
                                  f"text ({exc.reason} at byte {exc.start}); save it as UTF-8",
                                  file=shown, key=f"starts[{i}]") from None
    constraints = data.get("knob_constraints", [])
    if not isinstance(constraints, list) or not all(isinstance(x, str) for x in constraints):
        raise ConfigError('must be a list of expressions, e.g. ["BLOCK_M * BLOCK_K <= 16384"]',
                          file=shown, key="knob_constraints")
    for i, expr in enumerate(constraints):
        why = constraint_error(expr)
        if why:
            raise ConfigError(f"{why}: {expr!r}", file=shown, key=f"knob_constraints[{i}]")
    evaluator = data.get("evaluator", {})
    if not isinstance(evaluator, dict):
        raise ConfigError("must be a table", file=shown, key="evaluator")
    try:
        rel_path = str(folder.resolve().relative_to(workspace.resolve()))
    except ValueError:
        raise ConfigError(
            "targets must live inside the workspace git repository", file=shown
        ) from None
    return TargetSpec(
        name=name,
        kind=str(kind),
        path=folder.resolve(),
        rel_path=rel_path,
        description=str(data.get("description", "")),
        editable=tuple(editable),
        objectives=tuple(objectives),
        noise=noise,
        min_gain=float(min_gain),
        timeout_s=float(timeout_s),
        evaluator=evaluator,
        starts=tuple(starts),
        knob_constraints=tuple(constraints),
    )


# -- knob constraints -------------------------------------------------------------------

_ALLOWED = (ast.Expression, ast.BinOp, ast.UnaryOp, ast.Compare, ast.BoolOp, ast.Name,
            ast.Constant, ast.Load, ast.operator, ast.unaryop, ast.cmpop, ast.boolop)


def constraint_error(expr: str) -> str:
    """Why ``expr`` is not a knob constraint ("" when it is one): numbers, knob names,
    arithmetic, comparisons, and/or/not; nothing else (no calls, no attributes)."""
    try:
        tree = syntax.parse_expression(expr)
    except SyntaxError as exc:
        return f"not an expression ({exc.msg})"
    for node in ast.walk(tree):
        if not isinstance(node, _ALLOWED):
            return f"{type(node).__name__} is not allowed (numbers, knob names, arithmetic " \
                   "and comparisons only)"
        if isinstance(node, ast.Constant) and (
                isinstance(node.value, bool) or not isinstance(node.value, int | float)):
            return f"the constant {node.value!r} is not a number"
    return ""


def broken_constraint(constraints: tuple[str, ...], values: Mapping[str, Any]) -> str | None:
    """The first constraint ``values`` break; one naming a knob the program does not
    declare (a rewrite removed it) is not checked."""
    for expr in constraints:
        tree = syntax.parse_expression(expr)
        names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
        if not names <= set(values):
            continue
        try:
            ok = eval(compile(tree, "<knob constraint>", "eval"),  # noqa: S307 - checked
                      {"__builtins__": {}}, dict(values))
        except (ArithmeticError, TypeError):
            return expr
        if not ok:
            return expr
    return None
