"""``optimizer init``: a target made from code that already exists in the user's repository
(a subcommand the built-in kinds contribute: function, kernel and routing).

    optimizer init function serving/sampling/penalty.py::apply_repetition_penalty \\
        --arg "logits: float32[B, V]" --arg "token_ids: int64[B, 32] in -1..V" \\
        --arg "penalty: float in 1.0..2.0" --dim B=1..64 --dim V=2..4096

writes ``targets/<name>/`` with ``target.toml`` (the definition named as the editable
region of the user's file, in place), ``reference.py`` (a copy of the module as it is now:
the trusted reference) and ``evaluate.py`` (validation against the reference, fuzzing over
the stated domain, timing at the domain's largest sizes). Without ``--arg`` the domain is
left for the user: the generated ``evaluate.py`` names each argument to describe, and the
first ``optimizer evaluate`` says exactly that.

The argument language (one ``--arg`` per parameter of the function, in order)::

    NAME: float in LO..HI          a Python float
    NAME: int in LO..HI            a Python int
    NAME: bool
    NAME: DTYPE[D0, D1, ...]       a numpy array; each size a number or a --dim name
    NAME: DTYPE[...] in LO..HI     its values in [LO, HI] (bounds may name dims: -1..V
                                   means up to V - 1 for an integer array)

``--dim NAME=LO..HI`` gives a size's range: the fuzzing draws it (the bounds first), the
timing uses HI.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evaluators._base import Command
from optimizer.errors import ConfigError
from optimizer.targets import find_repo_root, symbol_span

DTYPES = {"float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "bool"}
_ARG_RE = re.compile(r"^\s*(?P<name>[A-Za-z_]\w*)\s*:\s*(?P<type>[A-Za-z_]\w*)\s*"
                     r"(?:\[(?P<shape>[^\]]*)\])?\s*(?:in\s+(?P<lo>[^.\s][^\s]*?)\s*\.\.\s*"
                     r"(?P<hi>\S+))?\s*$")
_DIM_RE = re.compile(r"^\s*(?P<name>[A-Za-z_]\w*)\s*=\s*(?P<lo>\d+)\s*\.\.\s*(?P<hi>\d+)\s*$")
_NAME_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_-]*$")


@dataclass(frozen=True)
class Arg:
    """One parameter's domain: ``kind`` is "float", "int", "bool" or "array"."""

    name: str
    kind: str
    dtype: str = ""
    shape: tuple[int | str, ...] = ()
    low: float | int | str | None = None
    high: float | int | str | None = None

    def as_data(self) -> dict[str, Any]:
        return {"name": self.name, "kind": self.kind, "dtype": self.dtype,
                "shape": list(self.shape), "low": self.low, "high": self.high}


def _bound(text: str, dims: dict[str, tuple[int, int]], where: str) -> float | int | str:
    text = text.strip()
    if text in dims or (text.lstrip("-") in dims):
        return text
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        value = None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"{where}: bound {text!r} is neither a number nor a --dim name")
    return value


def parse_arg(text: str, dims: dict[str, tuple[int, int]]) -> Arg:
    """One ``--arg`` (see the module's docstring); a bad one says how to write it."""
    m = _ARG_RE.match(text)
    where = f"--arg {text!r}"
    if not m:
        raise ConfigError(f"{where}: write 'NAME: float in 0.0..1.0', 'NAME: int in 1..8', "
                          "'NAME: bool' or 'NAME: float32[B, 128] in -1.0..1.0'")
    kind = m["type"]
    lo = _bound(m["lo"], dims, where) if m["lo"] is not None else None
    hi = _bound(m["hi"], dims, where) if m["hi"] is not None else None
    if m["shape"] is not None:
        if kind not in DTYPES:
            raise ConfigError(f"{where}: {kind!r} is not an array dtype; one of "
                              f"{', '.join(sorted(DTYPES))}")
        shape: list[int | str] = []
        for part in (p.strip() for p in m["shape"].split(",")):
            if part.isdigit():
                shape.append(int(part))
            elif part in dims:
                shape.append(part)
            else:
                raise ConfigError(f"{where}: size {part!r} is neither a number nor a dim; "
                                  f"declare it with --dim {part or 'N'}=LO..HI")
        if kind != "bool" and (lo is None or hi is None):
            lo, hi = (-1.0, 1.0) if kind.startswith("float") else (0, 100)
        return Arg(m["name"], "array", kind, tuple(shape), lo, hi)
    if kind == "bool":
        return Arg(m["name"], "bool")
    if kind not in ("float", "int"):
        raise ConfigError(f"{where}: type {kind!r}: use float, int, bool or an array dtype "
                          "with a shape (float32[B, 128])")
    if lo is None or hi is None:
        raise ConfigError(f"{where}: give the range, e.g. '{m['name']}: {kind} in 1..8'")
    return Arg(m["name"], kind, low=lo, high=hi)


def parse_dims(items: list[str]) -> dict[str, tuple[int, int]]:
    dims: dict[str, tuple[int, int]] = {}
    for item in items:
        m = _DIM_RE.match(item)
        if not m or int(m["lo"]) > int(m["hi"]):
            raise ConfigError(f"--dim {item!r}: write NAME=LO..HI with 0 <= LO <= HI, e.g. B=1..64")
        dims[m["name"]] = (int(m["lo"]), int(m["hi"]))
    return dims


@dataclass(frozen=True)
class Located:
    """The definition a target is made of: its file, relative paths and source."""

    file: Path  # absolute
    symbol: str
    repo: Path  # the repository's root
    source: str
    params: tuple[str, ...]
    doc: str


def locate(spec: str, cwd: Path) -> Located:
    """``path/to/file.py::name`` (relative to ``cwd``), checked: inside a git repository,
    the file exists, parses and defines ``name``."""
    path_text, sep, symbol = spec.partition("::")
    if not sep or not symbol:
        raise ConfigError(f"{spec!r}: name the definition as FILE.py::NAME, e.g. "
                          "serving/sampling/penalty.py::apply_repetition_penalty")
    file = (cwd / path_text).resolve()
    if not file.is_file():
        raise ConfigError(f"{path_text}: no such file")
    repo = find_repo_root(file.parent)
    if repo is None:
        raise ConfigError(f"{path_text} is not inside a git repository; `git init` and commit "
                          "it first (the optimizer keeps a branch per candidate)")
    try:
        source = file.read_bytes().decode("utf-8-sig")
        tree = ast.parse(source)
    except (UnicodeDecodeError, SyntaxError) as exc:
        raise ConfigError(f"{path_text}: cannot read it as Python ({exc})") from None
    span = symbol_span(tree, symbol)
    if span is None:
        found = sorted(n.name for n in tree.body if isinstance(
            n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef))
        raise ConfigError(f"{path_text} defines no {symbol!r} at its top level; it defines "
                          f"{', '.join(found) or 'nothing'}")
    node = _node(tree, symbol)
    params: tuple[str, ...] = ()
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
        params = tuple(a.arg for a in (*node.args.posonlyargs, *node.args.args))
    doc = ast.get_docstring(node) if isinstance(
        node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) else None
    return Located(file, symbol, repo.resolve(), source, params, doc or "")


def _node(tree: ast.Module, name: str) -> ast.AST | None:
    body: list[ast.stmt] = tree.body
    node: ast.AST | None = None
    for part in name.split("."):
        node = next((n for n in body if getattr(n, "name", None) == part), None)
        if node is None:
            return None
        body = getattr(node, "body", [])
    return node


def _rel(path: Path, start: Path) -> str:
    """``path`` relative to the folder ``start`` ("../../serving/x.py")."""
    import os

    return os.path.relpath(path, start).replace(os.sep, "/")


def _folder(loc: Located, name: str | None, dest: Path | None) -> tuple[str, Path]:
    name = name or loc.symbol.split(".")[-1].removeprefix("_")
    if not _NAME_RE.match(name):
        raise ConfigError(f"target name {name!r}: use letters, digits, '_' or '-'")
    folder = (dest or loc.repo / "targets" / name).resolve()
    if not folder.is_relative_to(loc.repo):
        raise ConfigError(f"{folder} is outside the repository {loc.repo}; a target lives in "
                          "the repository whose code it edits")
    if folder.exists() and any(folder.iterdir()):
        raise ConfigError(f"{folder} exists already and is not empty; pass --dest or --name")
    return name, folder


def _toml_string(text: str) -> str:
    import json

    return json.dumps(text, ensure_ascii=False)


# -- function ---------------------------------------------------------------------------


def init_function(spec: str, *, cwd: Path, args: list[str], dims: list[str],
                  name: str | None = None, dest: Path | None = None,
                  rtol: float = 1e-5, atol: float = 1e-6) -> Path:
    """Write a function target for ``FILE.py::NAME``; returns its folder."""
    loc = locate(spec, cwd)
    if "." in loc.symbol:
        raise ConfigError(f"{spec}: a function target names a top-level function; for a "
                          "method, write a function that calls it")
    dim_ranges = parse_dims(dims)
    parsed = [parse_arg(a, dim_ranges) for a in args]
    if parsed and [a.name for a in parsed] != list(loc.params[:len(parsed)]):
        raise ConfigError(f"--arg names {[a.name for a in parsed]} do not match the parameters "
                          f"of {loc.symbol}{tuple(loc.params)}: give one --arg per parameter, "
                          "in order")
    if parsed and len(parsed) != len(loc.params):
        missing = list(loc.params[len(parsed):])
        raise ConfigError(f"--arg for {', '.join(missing)} missing: {loc.symbol} takes "
                          f"{', '.join(loc.params)}")
    name, folder = _folder(loc, name, dest)
    folder.mkdir(parents=True, exist_ok=True)
    editable = f"{_rel(loc.file, folder)}::{loc.symbol}"
    describe = loc.doc.strip() or f"{loc.symbol} in {_rel(loc.file, loc.repo)}"
    (folder / "target.toml").write_text(
        f"name = {_toml_string(name)}\n"
        'kind = "function"\n'
        f"description = {_toml_string(describe + ' Objective: the wall time of one call at the largest sizes of its domain (evaluate.py); the answers must match the reference within its tolerance.')}\n"  # noqa: E501
        f"editable = [{_toml_string(editable)}]\n"
        'objectives = [{ metric = "time_s", direction = "minimize" }]\n'
        'noise = "timing"\n'
        "min_gain = 0.05\n"
        "timeout_s = 120\n"
    )
    (folder / "reference.py").write_text(
        f"# The trusted reference: {_rel(loc.file, loc.repo)} as it was when this target was\n"
        f"# made (optimizer init). Never editable; candidates are checked against it.\n"
        + loc.source)
    domain = [a.as_data() for a in parsed] if parsed else None
    (folder / "evaluate.py").write_text(FUNCTION_EVALUATE.format(
        function=loc.symbol,
        source=_rel(loc.file, loc.repo),
        root=_rel(loc.repo, folder) or ".",
        args=_pretty(domain),
        dims=repr(dim_ranges),
        params=repr(list(loc.params)),
        rtol=repr(rtol),
        atol=repr(atol),
    ))
    return folder


def _pretty(domain: list[dict[str, Any]] | None) -> str:
    if domain is None:
        return "None  # fill in: one entry per parameter (see the comment above)"
    return "[\n" + "".join(f"    {d!r},\n" for d in domain) + "]"


FUNCTION_EVALUATE = '''"""Trusted checks of {function} ({source}), made by `optimizer init`.

validate() and evaluate() run on the trusted side: ``program_path`` names a stand-in whose
{function} runs the candidate's in a sandboxed process. The reference is reference.py,
the module as it was when this target was made. Inputs are drawn fresh from the domain
below on every call; the harness also fuzzes the candidate over it (fuzz_domain).
"""

from __future__ import annotations

import copy
import importlib.util
import math
import os
import sys
import uuid
from pathlib import Path

import numpy as np

from evaluators.function.harness import timed

FUNCTION = "{function}"
PARAMS = {params}
# The domain of each parameter, in order. kind: "float" / "int" (low..high), "bool", or
# "array" (dtype, shape of numbers or DIMS names, values in low..high; a bound may name a
# dim: for an integer array, "V" means up to V - 1).
ARGS = {args}
DIMS = {dims}  # size name -> (smallest, largest); timing uses the largest
RTOL, ATOL = {rtol}, {atol}  # answers must match the reference this closely
CASES = 4  # random cases per validation
TIMED_CALLS = 5

HERE = Path(__file__).resolve().parent
ROOT = (HERE / "{root}").resolve()  # the repository: the reference imports its package
if str(ROOT) not in sys.path:
    sys.path.append(str(ROOT))


def _load(path):
    spec = importlib.util.spec_from_file_location(f"_m{{uuid.uuid4().hex}}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


_REFERENCE = None


def reference(*args):
    global _REFERENCE
    if _REFERENCE is None:
        _REFERENCE = _load(HERE / "reference.py")
    return getattr(_REFERENCE, FUNCTION)(*copy.deepcopy(args))


def _domain():
    if ARGS is None:
        raise RuntimeError(
            f"evaluate.py: fill in ARGS, the domain of {{FUNCTION}}'s parameters "
            f"{{', '.join(PARAMS)}}, e.g. [{{{{'name': 'x', 'kind': 'array', 'dtype': "
            "'float32', 'shape': ['N'], 'low': -1.0, 'high': 1.0}}] with DIMS = "
            "{{'N': (1, 4096)}} (or make the target again with --arg and --dim)")
    return ARGS


def _value(bound, sizes, integer):
    if isinstance(bound, str):
        negative = bound.startswith("-")
        size = sizes[bound.lstrip("-")]
        value = -size if negative else size - (1 if integer else 0)
        return value
    return bound


def draw(rng, sizes):
    """One argument tuple at the given sizes."""
    out = []
    for arg in _domain():
        kind = arg["kind"]
        if kind == "bool":
            out.append(bool(rng.integers(0, 2)))
        elif kind == "int":
            lo, hi = _value(arg["low"], sizes, True), _value(arg["high"], sizes, True)
            out.append(int(rng.integers(lo, max(lo, hi) + 1)))
        elif kind == "float":
            lo, hi = _value(arg["low"], sizes, False), _value(arg["high"], sizes, False)
            out.append(float(rng.uniform(lo, hi)))
        else:
            shape = tuple(sizes[d] if isinstance(d, str) else d for d in arg["shape"])
            dtype = np.dtype(arg["dtype"])
            if dtype == np.bool_:
                out.append(rng.integers(0, 2, shape).astype(bool))
            elif dtype.kind in "iu":
                lo = _value(arg["low"], sizes, True)
                hi = _value(arg["high"], sizes, True)
                out.append(rng.integers(lo, max(lo, hi) + 1, shape).astype(dtype))
            else:
                lo, hi = _value(arg["low"], sizes, False), _value(arg["high"], sizes, False)
                out.append(rng.uniform(lo, hi, shape).astype(dtype))
    return tuple(out)


def _rng():
    return np.random.default_rng(int.from_bytes(os.urandom(8), "little"))


def _sizes(rng, largest=False):
    return {{d: hi if largest else int(rng.integers(lo, hi + 1)) for d, (lo, hi) in DIMS.items()}}


def check(got, want, where="the result"):
    """AssertionError saying what differs between ``got`` and the reference's ``want``."""
    if isinstance(want, np.ndarray):
        assert isinstance(got, np.ndarray), (
            f"{{where}}: expected an array, got {{type(got).__name__}}")
        assert got.shape == want.shape, f"{{where}}: shape {{got.shape}}, expected {{want.shape}}"
        assert got.dtype == want.dtype, f"{{where}}: dtype {{got.dtype}}, expected {{want.dtype}}"
        if want.dtype.kind in "fc":
            bad = ~np.isclose(got, want, rtol=RTOL, atol=ATOL, equal_nan=True)
        else:
            bad = got != want
        if bad.any():
            at = tuple(int(i) for i in np.argwhere(bad)[0])
            raise AssertionError(f"{{where}}: {{int(bad.sum())}} of {{want.size}} values differ "
                                 f"from the reference, first at {{at}}: {{got[at]!r}}, expected "
                                 f"{{want[at]!r}} (rtol {{RTOL}}, atol {{ATOL}})")
    elif isinstance(want, (tuple, list)):
        assert isinstance(got, (tuple, list)) and len(got) == len(want), (
            f"{{where}}: expected a sequence of {{len(want)}}, got {{got!r:.80}}")
        for i, (g, w) in enumerate(zip(got, want)):
            check(g, w, f"{{where}}[{{i}}]")
    elif isinstance(want, float):
        assert isinstance(got, (int, float)) and math.isclose(
            got, want, rel_tol=RTOL, abs_tol=ATOL) or (math.isnan(want) and got != got), (
            f"{{where}}: {{got!r}}, expected {{want!r}}")
    else:
        assert got == want, f"{{where}}: {{got!r:.80}}, expected {{want!r:.80}}"


def validate(program_path):
    fn = getattr(_load(program_path), FUNCTION)
    rng = _rng()
    smallest = {{d: lo for d, (lo, hi) in DIMS.items()}}
    for sizes in [smallest] + [_sizes(rng) for _ in range(CASES)]:
        args = draw(rng, sizes)
        check(fn(*args), reference(*args), f"{{FUNCTION}} at sizes {{sizes}}")


def evaluate(program_path):
    fn = getattr(_load(program_path), FUNCTION)
    rng = _rng()
    times = []
    for _ in range(TIMED_CALLS):
        args = draw(rng, _sizes(rng, largest=True))
        result, seconds = timed(fn, *args)
        check(result, reference(*args), f"{{FUNCTION}} (a timed call)")
        times.append(seconds)
    return {{"time_s": float(np.median(times))}}


def fuzz_domain():
    from hypothesis import strategies as st

    _domain()
    names = sorted(DIMS)
    sizes = st.tuples(*(st.integers(*DIMS[n]) for n in names)) if names else st.just(())
    return {{FUNCTION: st.tuples(sizes, st.integers(0, 2**32 - 1)).map(
        lambda t: draw(np.random.default_rng(t[1]), dict(zip(names, t[0]))))}}


def fuzz_check(name, args, result):
    check(result, reference(*args), name)
'''


# -- routing ----------------------------------------------------------------------------

ROUTER_HOOKS = ("route",)
SCHEDULER_HOOKS = ("schedule", "chunk_size", "evict")


def init_routing(spec: str, *, cwd: Path, name: str | None = None,
                 dest: Path | None = None) -> Path:
    """Write a routing target for a policy file (``FILE.py`` or ``FILE.py::route``): the
    user's file is edited in place; the fleet and workload are a small synthetic start the
    user should replace with their own (target.toml says where)."""
    path_text, sep, symbol = spec.partition("::")
    file = (cwd / path_text).resolve()
    probe = f"{path_text}::{symbol or 'route'}"
    try:
        loc = locate(probe, cwd)
    except ConfigError:
        if not file.is_file():
            raise
        loc = None
    if loc is None:  # no route(): a scheduler's hooks?
        source = file.read_text()
        tree = ast.parse(source)
        defined = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
        if not set(SCHEDULER_HOOKS) <= defined:
            raise ConfigError(f"{path_text}: a routing policy defines route(request, view) (a "
                              f"router) or {', '.join(SCHEDULER_HOOKS)} (a replica scheduler); "
                              f"it defines {', '.join(sorted(defined)) or 'no function'}")
        loc = locate(f"{path_text}::{SCHEDULER_HOOKS[0]}", cwd)
        mode = "scheduler"
    else:
        mode = "router"
    name, folder = _folder(loc, name or file.stem, dest)
    folder.mkdir(parents=True, exist_ok=True)
    rel = _rel(loc.file, folder)
    editable = f"{rel}::{symbol}" if sep and symbol else rel
    doc = (ast.get_docstring(ast.parse(loc.source)) or "").strip()
    objective = ('{ metric = "ttft_p99_s", direction = "minimize" }' if mode == "router"
                 else '{ metric = "slo_attainment", direction = "maximize" }')
    (folder / "target.toml").write_text(
        f"name = {_toml_string(name)}\n"
        'kind = "routing"\n'
        f"description = {_toml_string(doc or f'The {mode} policy in {_rel(loc.file, loc.repo)}.')}\n"  # noqa: E501
        f"editable = [{_toml_string(editable)}]\n"
        f"objectives = [{objective}]\n"
        'noise = "deterministic"\n'
        "min_gain = 0.05\n"
        "timeout_s = 120\n\n"
        "# A small synthetic start, made by `optimizer init`: describe your own fleet (pools)\n"
        "# and workload (a trace of your traffic: workload = { kind = \"trace\", path = ... })\n"
        "# here; docs/routing.md lists every key.\n"
        "[evaluator]\n"
        + ('mode = "scheduler"\nrouter = "least_outstanding"\n' if mode == "scheduler" else "")
        + 'workload = { kind = "synthetic", seed = 1, duration_s = 60, sessions_per_s = 2.0 }\n'
        "held_out = { seed = 2 }\n"
        'pools = [{ name = "h100", accelerator = "H100", count = 2 }, '
        '{ name = "l40s", accelerator = "L40S", count = 2 }]\n'
        "slo = { ttft_s = 1.0, tpot_s = 0.1 }\n"
        "max_decision_ms = 1.0\n"
    )
    return folder


# -- kernel -----------------------------------------------------------------------------

_TENSOR_RE = re.compile(r"^\s*(?P<name>[A-Za-z_]\w*)\s*:\s*(?P<dtype>\w+)\s*"
                        r"\[(?P<shape>[^\]]*)\]\s*$")
_SCALAR_RE = re.compile(r"^\s*(?P<name>[A-Za-z_]\w*)\s*=\s*(?P<value>\S+)\s*$")
KERNEL_DTYPES = ("float32", "float16", "bfloat16", "float64")


def parse_shape(text: str, params: tuple[str, ...]) -> dict[str, Any]:
    """One ``--shape`` workload: ``"x: float32[6, 100]; w: float32[100]; eps=1e-6"``, a
    tensor or a value for every parameter of the launcher, in any order."""
    where = f"--shape {text!r}"
    tensors: dict[str, tuple[str, list[int]]] = {}
    scalars: dict[str, Any] = {}
    for part in (p for p in text.split(";") if p.strip()):
        m, s = _TENSOR_RE.match(part), _SCALAR_RE.match(part)
        if m:
            if m["dtype"] not in KERNEL_DTYPES:
                raise ConfigError(f"{where}: dtype {m['dtype']!r}; one of "
                                  f"{', '.join(KERNEL_DTYPES)}")
            dims = [d.strip() for d in m["shape"].split(",") if d.strip()]
            if not dims or not all(d.isdigit() and int(d) > 0 for d in dims):
                raise ConfigError(f"{where}: sizes of {m['name']} must be positive numbers")
            tensors[m["name"]] = (m["dtype"], [int(d) for d in dims])
        elif s:
            try:
                value = ast.literal_eval(s["value"])
            except (ValueError, SyntaxError):
                value = None
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ConfigError(f"{where}: {s['name']} = {s['value']!r} is not a number")
            scalars[s["name"]] = value
        else:
            raise ConfigError(f"{where}: write tensors as 'x: float32[6, 100]' and numbers as "
                              "'eps=1e-6', separated by ';'")
    named = set(tensors) | set(scalars)
    if named != set(params):
        missing, extra = sorted(set(params) - named), sorted(named - set(params))
        raise ConfigError(f"{where}: the launcher takes {', '.join(params)}"
                          + (f"; missing {', '.join(missing)}" if missing else "")
                          + (f"; {', '.join(extra)} is not a parameter" if extra else ""))
    if not tensors:
        raise ConfigError(f"{where}: at least one parameter must be a tensor")
    return {"tensors": tensors, "scalars": scalars}


def init_kernel(spec: str, *, cwd: Path, shapes: list[str], name: str | None = None,
                dest: Path | None = None) -> Path:
    """Write a kernel target for the launcher ``FILE.py::NAME`` of a Triton kernel: the
    user's file is edited in place, the reference is a copy of the module as it is now
    (run in float64 by the trusted side, through the Triton interpreter where there is no
    GPU), the workloads are the ``--shape`` specs (each on the GPU and, at its size, on the
    CPU through the interpreter)."""
    loc = locate(spec, cwd)
    if "." in loc.symbol or not loc.params:
        raise ConfigError(f"{spec}: name the top-level function that launches the kernel "
                          "(its parameters: the tensors and numbers of one call)")
    if "triton" not in loc.source:
        raise ConfigError(f"{_rel(loc.file, loc.repo)} does not use Triton; for plain Python "
                          "use `optimizer init function`")
    if not shapes:
        params = "; ".join(f"{p}: float32[...]" for p in loc.params)
        raise ConfigError(f"give at least one --shape, one tensor shape or number per "
                          f"parameter of {loc.symbol}, e.g. --shape '{params}'")
    work = [parse_shape(s, loc.params) for s in shapes]
    scalar_names = [p for p in loc.params if p in work[0]["scalars"]]
    for w in work[1:]:
        if [p for p in loc.params if p in w["scalars"]] != scalar_names:
            raise ConfigError("every --shape must give numbers for the same parameters "
                              f"({', '.join(scalar_names) or 'none'})")
    name, folder = _folder(loc, name, dest)
    folder.mkdir(parents=True, exist_ok=True)
    module = ".".join(Path(_rel(loc.file, loc.repo)).with_suffix("").parts)
    kinds = [("scalar" if p in scalar_names else "tensor") for p in loc.params]
    (folder / "reference_impl.py").write_text(
        f"# {_rel(loc.file, loc.repo)} as it was when this target was made (optimizer init):\n"
        "# the trusted reference's code. Never editable.\n" + loc.source)
    common = KERNEL_COMMON.format(params=repr(list(loc.params)), kinds=repr(kinds),
                                  function=loc.symbol, root=_rel(loc.repo, folder) or ".")
    (folder / "reference.py").write_text(KERNEL_REFERENCE.format(common=common))
    (folder / "kernel.py").write_text(KERNEL_MODEL.format(common=common, module=module,
                                                                  function=loc.symbol))
    lines = []
    for i, w in enumerate(work):
        dtype = next(iter(w["tensors"].values()))[0]
        args = ", ".join(f"{t} = {shape}" for t, (_, shape) in w["tensors"].items())
        dtypes = ", ".join(f'{t}_dtype = "{d}"' for t, (d, _) in w["tensors"].items())
        init = ", ".join(repr(w["scalars"][p]) for p in scalar_names)
        for device in ("cuda", "cpu"):
            lines.append(f'[[evaluator.workloads]]\nname = "{device}-{i}-{dtype}"\n'
                         f'device = "{device}"\nargs = {{ {args}, {dtypes} }}\n'
                         f"init = [{init}]\nparam_dtype = \"{dtype}\"\n")
    describe = loc.doc.strip() or f"The Triton kernel launched by {loc.symbol}."
    (folder / "target.toml").write_text(
        f"name = {_toml_string(name)}\n"
        'kind = "kernel"\n'
        f"description = {_toml_string(describe)}\n"
        f"editable = [{_toml_string(_rel(loc.file, folder))}]\n"
        'objectives = [{ metric = "time_ms", direction = "minimize" }]\n'
        'noise = "timing"\n'
        "min_gain = 0.03\n"
        "timeout_s = 300\n\n"
        "# made by `optimizer init`: each --shape on the GPU, and on the CPU through the\n"
        "# Triton interpreter (correctness only); docs/kernels.md lists every key\n"
        "[evaluator]\n"
        'distributions = ["normal", "uniform", "offset", "wide", "negative"]\n\n'
        + "\n".join(lines))
    return folder


KERNEL_COMMON = '''import importlib.util
import os
import sys
from pathlib import Path

import torch
import torch.nn as nn

PARAMS = {params}  # the launcher's parameters, in order
KINDS = {kinds}  # "tensor" (an input) or "scalar" (a constructor argument)
FUNCTION = "{function}"
HERE = Path(__file__).resolve().parent
ROOT = (HERE / "{root}").resolve()


def _call(fn, tensors, scalars):
    t, s = iter(tensors), iter(scalars)
    return fn(*[next(t) if k == "tensor" else next(s) for k in KINDS])
'''

KERNEL_REFERENCE = '''"""Trusted reference, made by `optimizer init`: the launcher as it was
(reference_impl.py), called in float64 on the trusted side (on the CPU through the Triton
interpreter)."""

{common}

def _impl():
    if not torch.cuda.is_available():
        os.environ["TRITON_INTERPRET"] = "1"  # a CPU reference runs the kernel interpreted
    if str(ROOT) not in sys.path:
        sys.path.append(str(ROOT))  # the repository: the module may import its package
    spec = importlib.util.spec_from_file_location(f"_ref_impl_{{id(HERE)}}",
                                                  HERE / "reference_impl.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return getattr(mod, FUNCTION)


_FN = None


class Model(nn.Module):
    def __init__(self, *scalars):
        super().__init__()
        self.scalars = scalars

    def forward(self, *tensors):
        global _FN
        if any(t.device.type == "meta" for t in tensors):
            return meta_output(*tensors)  # shapes only: no kernel runs on "meta"
        if _FN is None:
            _FN = _impl()
        return _call(_FN, tensors, self.scalars)


def meta_output(*tensors):
    """The output's shape and dtype, without values: the first tensor's. Change this if
    the launcher returns something else (a tuple, another shape)."""
    return torch.empty_like(tensors[0])


def get_inputs(**args):
    out = []
    for name, kind in zip(PARAMS, KINDS):
        if kind == "tensor":
            dtype = getattr(torch, args.get(f"{{name}}_dtype", "float32"))
            out.append(torch.randn(*args[name], dtype=dtype))
    return out


def get_init_inputs():
    return []
'''

KERNEL_MODEL = '''"""The candidate's side, made by `optimizer init` (not editable): ModelNew
calls the launcher from the candidate's copy of the repository, the file a night edits in place."""

{common}
from {module} import {function} as _launch  # noqa: E402


class ModelNew(nn.Module):
    def __init__(self, *scalars):
        super().__init__()
        self.scalars = scalars

    def forward(self, *tensors):
        return _call(_launch, tensors, self.scalars)
'''


# -- the subcommand ---------------------------------------------------------------------


def _arguments(it: Any) -> None:
    it.add_argument("kind", choices=["function", "kernel", "routing"])
    it.add_argument("source", help="FILE.py::NAME, the definition the target optimises in "
                    "place, e.g. serving/sampling/penalty.py::apply_repetition_penalty")
    it.add_argument("--name", help="the target's name (default: the definition's)")
    it.add_argument("--dest", type=Path, help="the target's folder (default targets/NAME)")
    it.add_argument("--arg", dest="args", action="append", default=[], metavar="SPEC",
                    help="function: one parameter's domain, in order: 'x: float32[N] in "
                    "-1.0..1.0', 'k: int in 1..8', 'p: float in 0.0..1.0', 'flag: bool'")
    it.add_argument("--dim", dest="dims", action="append", default=[], metavar="NAME=LO..HI",
                    help="function: a size's range (fuzzed over it, timed at its top)")
    it.add_argument("--rtol", type=float, default=1e-5, help="function: relative tolerance")
    it.add_argument("--atol", type=float, default=1e-6, help="function: absolute tolerance")
    it.add_argument("--shape", dest="shapes", action="append", default=[], metavar="SPEC",
                    help="kernel: a workload, e.g. 'x: float32[6, 100]; eps=1e-6' (repeatable)")


def _run(args: Any) -> int:
    import os

    cwd = Path.cwd()
    if args.kind == "function":
        folder = init_function(args.source, cwd=cwd, args=args.args, dims=args.dims,
                               name=args.name, dest=args.dest, rtol=args.rtol, atol=args.atol)
    elif args.kind == "kernel":
        folder = init_kernel(args.source, cwd=cwd, shapes=args.shapes, name=args.name,
                             dest=args.dest)
    else:
        folder = init_routing(args.source, cwd=cwd, name=args.name, dest=args.dest)
    shown = os.path.relpath(folder, cwd)
    print(f"wrote {shown}/ ({', '.join(sorted(p.name for p in folder.iterdir()))})")
    print(f"next: optimizer evaluate {shown}    (the seed should be VALID)")
    print(f"then: git add {shown} && git commit -m 'optimizer target' && "
          f"optimizer run --target {shown}")
    return 0


COMMAND = Command(
    name="init",
    help="make a target from code in this repository (function, kernel or routing policy)",
    add_arguments=_arguments,
    run=_run,
)
