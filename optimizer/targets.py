"""Target specifications: a folder with ``target.toml``, the seed program and its evaluator.

``target.toml`` keys (unknown keys are an error)::

    name        = "topk_sampling"     # unique within an experiment
    kind        = "function"          # evaluator: function, kernel, routing, speculative
    description = "..."               # goes into the LLM prompt
    editable    = ["program.py"]      # files a proposer may change (EVOLVE-BLOCKs inside),
                                      # relative to the target folder and anywhere in the
                                      # repository ("../../serving/x.py"); "file.py::name"
                                      # makes the definition of function or class `name`
                                      # (or "Class.method") the file's editable region
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
import posixpath
import shutil
import subprocess
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
    # editable file -> the definitions named with "file.py::name" (its editable regions
    # where the file has no EVOLVE-BLOCK markers)
    symbols: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    # the git repository's root (absolute) when the target lies in one
    repo_root: Path | None = None

    @property
    def primary(self) -> Objective:
        return self.objectives[0]

    @property
    def outside(self) -> tuple[str, ...]:
        """The editable files that lie outside the target folder ("../../serving/x.py")."""
        return tuple(e for e in self.editable if posixpath.normpath(e).startswith("../"))

    def root_from_folder(self) -> str:
        """The repository root relative to the target folder ("../.." for "a/b"), or "."."""
        if self.repo_root is None:
            return "."
        rel = self.path.relative_to(self.repo_root)
        return "/".join([".."] * len(rel.parts)) or "."

    def repo_rel(self, name: str) -> str:
        """An editable file's path relative to the repository root ("serving/x.py")."""
        root = self.repo_root or self.path
        return posixpath.normpath(str(self.path.relative_to(root) / name))

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
    data = _merge(_read_toml(toml_path, shown), overrides or {})
    name = _check_keys(data, shown)
    repo_root = find_repo_root(folder)
    editable, symbols = _editable_files(data, folder, repo_root or workspace, shown)
    objectives = _objectives(data, shown)
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
    starts = _starts(data, folder, editable, shown)
    constraints = _constraints(data, shown)
    evaluator = data.get("evaluator", {})
    if not isinstance(evaluator, dict):
        raise ConfigError("must be a table", file=shown, key="evaluator")
    _check_symbols(folder, symbols, shown)
    try:
        rel_path = str(folder.resolve().relative_to(workspace.resolve()))
    except ValueError:
        raise ConfigError(
            "targets must live inside the workspace git repository", file=shown
        ) from None
    return TargetSpec(
        name=name,
        kind=str(data["kind"]),
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
        symbols={k: tuple(v) for k, v in symbols.items()},
        repo_root=repo_root.resolve() if repo_root else None,
    )


def _read_toml(toml_path: Path, shown: str) -> dict[str, Any]:
    if not toml_path.is_file():
        raise ConfigError(
            "no target.toml here; a target is a folder with target.toml and its seed files",
            file=shown,
        )
    try:
        return tomllib.loads(toml_path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"not valid TOML: {exc}", file=shown) from None


def _check_keys(data: Mapping[str, Any], shown: str) -> str:
    """No unknown key, the required ones present; returns the target's name."""
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
    name = data["name"]
    if not isinstance(name, str) or not name.replace("_", "").replace("-", "").isalnum():
        raise ConfigError("must be a string of letters, digits, '_' or '-'", file=shown, key="name")
    return name


def _check_utf8(path: Path, what: str, shown: str, key: str) -> None:
    """``path`` decodes as UTF-8 (a byte-order mark allowed); ``what`` names it."""
    try:
        path.read_bytes().decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"{what} is not UTF-8 text ({exc.reason} at byte {exc.start}); save it as UTF-8",
            file=shown,
            key=key,
        ) from None


def _editable_files(
    data: Mapping[str, Any], folder: Path, root: Path, shown: str
) -> tuple[list[str], dict[str, list[str]]]:
    """The editable files (each an existing UTF-8 file) and the definitions named per file."""
    raw_editable = data["editable"]
    if (
        not isinstance(raw_editable, list)
        or not raw_editable
        or not all(isinstance(e, str) for e in raw_editable)
    ):
        raise ConfigError("must be a non-empty list of file names", file=shown, key="editable")
    editable, symbols = _split_editable(raw_editable, folder, root, shown)
    for rel in editable:
        if not (folder / rel).is_file():
            raise ConfigError(f"editable file '{rel}' does not exist", file=shown, key="editable")
        _check_utf8(folder / rel, f"editable file '{rel}'", shown, "editable")
    return editable, symbols


def _objectives(data: Mapping[str, Any], shown: str) -> list[Objective]:
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
    return objectives


def _starts(data: Mapping[str, Any], folder: Path, editable: list[str], shown: str) -> list[str]:
    """The declared starts: each a file (one editable file) or a folder of editable files."""
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
            what = f"start file '{text.relative_to(folder)}'"
            _check_utf8(text, what, shown, f"starts[{i}]")
    return starts


def _constraints(data: Mapping[str, Any], shown: str) -> list[str]:
    constraints = data.get("knob_constraints", [])
    if not isinstance(constraints, list) or not all(isinstance(x, str) for x in constraints):
        raise ConfigError('must be a list of expressions, e.g. ["BLOCK_M * BLOCK_K <= 16384"]',
                          file=shown, key="knob_constraints")
    for i, expr in enumerate(constraints):
        why = constraint_error(expr)
        if why:
            raise ConfigError(f"{why}: {expr!r}", file=shown, key=f"knob_constraints[{i}]")
    return constraints


def _check_symbols(folder: Path, symbols: Mapping[str, list[str]], shown: str) -> None:
    """Every definition named in ``editable`` ("file.py::name") is one of its file."""
    for rel, names in symbols.items():
        source = (folder / rel).read_bytes().decode("utf-8-sig")
        for symbol in names:
            why = symbol_error(source, symbol)
            if why:
                raise ConfigError(f"editable '{rel}::{symbol}': {why}", file=shown,
                                  key="editable")


# -- editable files anywhere in the repository ------------------------------------------


def candidate_root_env(target: TargetSpec) -> dict[str, str]:
    """The sandbox variable that puts a candidate's copy of the repository on its import
    path (``OPTIMIZER_CANDIDATE_ROOT``, relative to the candidate's target folder), for a
    target whose editable files lie outside its folder; nothing otherwise."""
    if not target.outside or target.repo_root is None:
        return {}
    return {"OPTIMIZER_CANDIDATE_ROOT": target.root_from_folder()}


def materialize(target: TargetSpec, files: Mapping[str, str], dest: Path) -> Path:
    """A private copy of ``target``'s folder at ``dest`` with ``files`` (editable name ->
    source) in place; returns the folder to evaluate. A target whose editable files lie
    elsewhere in the repository gets a copy of the repository at ``dest`` (its tracked and
    not ignored files) and the target folder inside it, as a night's candidate has it.
    Deleting ``dest`` deletes everything."""
    shutil.rmtree(dest, ignore_errors=True)
    if target.outside and target.repo_root is not None:
        copy_repository(target.repo_root, dest)
        folder = dest / target.path.relative_to(target.repo_root)
        folder.mkdir(parents=True, exist_ok=True)
    else:
        shutil.copytree(target.path, dest, ignore=shutil.ignore_patterns("__pycache__"))
        folder = dest
    for rel, text in files.items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_text(text)
    return folder


def copy_repository(root: Path, dest: Path) -> None:
    """Copy the files of the repository at ``root`` that git tracks or does not ignore."""
    out = subprocess.run(
        ["git", "-C", str(root), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        capture_output=True, check=True).stdout.decode()
    for rel in sorted(set(filter(None, out.split("\0")))):
        src = root / rel
        if not src.is_file() or "__pycache__" in Path(rel).parts:
            continue
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, target)


def find_repo_root(folder: Path) -> Path | None:
    """The nearest folder at or above ``folder`` holding ``.git`` (a folder or a file)."""
    here = folder.resolve()
    for candidate in (here, *here.parents):
        if (candidate / ".git").exists():
            return candidate
    return None


def _split_editable(
    raw: list[str], folder: Path, root: Path, shown: str
) -> tuple[list[str], dict[str, list[str]]]:
    """Editable file paths (as written, without "::name") and the definitions named per
    file; a path that leaves the repository is an error."""
    files: list[str] = []
    symbols: dict[str, list[str]] = {}
    for entry in raw:
        path, sep, name = entry.partition("::")
        path = path.strip()
        if not path or (sep and not name.strip()):
            raise ConfigError(f"editable entry {entry!r} is not 'file.py' or 'file.py::name'",
                              file=shown, key="editable")
        if Path(path).is_absolute():
            raise ConfigError(f"editable file {path!r} must be relative to the target folder "
                              "(e.g. '../../serving/x.py')", file=shown, key="editable")
        where = Path(posixpath.normpath(str(folder.resolve() / path)))
        if not where.is_relative_to(root.resolve()):
            raise ConfigError(
                f"editable file {path!r} lies outside the repository {root.resolve()} "
                f"(it resolves to {where}); every editable file must be inside it",
                file=shown, key="editable")
        if where.resolve() != where and not where.resolve().is_relative_to(root.resolve()):
            raise ConfigError(f"editable file {path!r} is a link out of the repository",
                              file=shown, key="editable")
        if path not in files:
            files.append(path)
        if sep:
            symbols.setdefault(path, []).append(name.strip())
    for path, names in symbols.items():
        if len(names) != len(set(names)):
            raise ConfigError(f"editable '{path}' names a definition twice", file=shown,
                              key="editable")
    whole = [e.partition("::")[0].strip() for e in raw if "::" not in e]
    for path in whole:
        if path in symbols:
            raise ConfigError(f"editable '{path}' is listed both whole and as '{path}::name'; "
                              "keep one of them", file=shown, key="editable")
    return files, symbols


def symbol_error(source: str, name: str) -> str:
    """Why ``name`` ("func", "Class" or "Class.method") is not a definition of ``source``
    ("" when it is)."""
    try:
        tree = syntax.parse(source)
    except SyntaxError as exc:
        return f"the file does not parse ({exc.msg}, line {exc.lineno})"
    if symbol_span(tree, name) is None:
        found = sorted(n.name for n in tree.body if isinstance(
            n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef))
        return (f"no function or class named {name!r} at the top of the file; it defines "
                f"{', '.join(found) or 'none'}")
    return ""


def symbol_span(tree: ast.Module, name: str) -> tuple[int, int] | None:
    """(first line, last line) of the definition ``name`` in ``tree`` (decorators
    included), 1-based; None when absent."""
    body: list[ast.stmt] = tree.body
    node: ast.stmt | None = None
    for part in name.split("."):
        node = next((n for n in body if isinstance(
            n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) and n.name == part), None)
        if node is None:
            return None
        body = node.body
    assert node is not None
    first = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))])
    return first, node.end_lineno or node.lineno


def uncommitted(repo_root: Path, paths: list[Path]) -> list[str]:
    """Those of ``paths`` with changes git has not committed (modified, staged or
    untracked), relative to the repository root."""
    rels = [str(p.resolve().relative_to(repo_root)) for p in paths]
    if not rels:
        return []
    try:
        out = subprocess.run(
            ["git", "-C", str(repo_root), "status", "--porcelain", "--untracked-files=all",
             "--", *rels], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return []
    return sorted({line[3:].strip().strip('"') for line in out.splitlines() if line.strip()})


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
            ok = eval(syntax.compile_expression(tree, "<knob constraint>"),  # noqa: S307 - checked
                      {"__builtins__": {}}, dict(values))
        except (ArithmeticError, TypeError):
            return expr
        if not ok:
            return expr
    return None
