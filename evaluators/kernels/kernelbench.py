"""Turn a KernelBench problem file into a kernel target folder.

A KernelBench problem defines ``Model`` (the reference), ``get_inputs()`` and
``get_init_inputs()``. ``import_kernelbench`` writes::

    <dest_dir>/<name>/reference.py   the problem file (trusted), with a size-override
                                     wrapper around get_inputs appended when the CPU
                                     workload needs one
    <dest_dir>/<name>/target.toml    kind "kernel", one GPU workload (the problem's own
                                     inputs), a CPU workload for the Triton interpreter:
                                     the problem's inputs when they are small enough, else
                                     its module-level size constants reduced (halving the
                                     largest until the inputs fit), else none, and then the
                                     file and the command say so; default tolerances; the
                                     stress distributions its reference supports (large
                                     offsets, wide ranges, tiny values, masks, special
                                     values: evaluators.numerics.screen), and why the others
                                     are dropped
    <dest_dir>/<name>/kernel.py      a STARTING POINT: the reference's ops renamed ModelNew,
                                     inside an EVOLVE-BLOCK. The static check rejects it
                                     (torch compute, no Triton kernel) until it is rewritten
                                     in Triton: a generic valid Triton seed cannot be derived
                                     from arbitrary torch code.

The problem file is executed once (to call ``get_inputs``) in this process: import only
problem files you would run yourself.
"""

from __future__ import annotations

import ast
import json
import re
import shutil
from pathlib import Path
from typing import Any

from evaluators._base import Command
from optimizer.errors import ConfigError
from optimizer.sandbox.loader import NotImportable, load_module

# under TRITON_INTERPRET=1 a kernel runs ~400x slower than torch on the CPU; 64k elements
# keep one CPU check of a simple op within a few seconds
CPU_MAX_ELEMENTS = 1 << 16

SEED_HEADER = '''"""STARTING POINT imported from KernelBench problem {problem!r}: NOT yet a kernel.

ModelNew below is the reference's own torch code. The static check rejects it (torch compute
in the forward path, no @triton.jit kernel) until the work is rewritten as Triton kernels
with the same constructor and forward signature.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl

'''


def _safe_name(text: str) -> str:
    name = re.sub(r"[^A-Za-z0-9_-]+", "_", text).strip("_-").lower()
    return name or "kernelbench"


def _load(problem_file: Path):
    try:
        mod = load_module(problem_file, f"_kb_{abs(hash(problem_file))}")
    except NotImportable:
        raise ConfigError("cannot import the problem file", file=str(problem_file)) from None
    except SyntaxError as exc:
        raise ConfigError(f"line {exc.lineno}: syntax error: {exc.msg}; fix the problem file",
                          file=str(problem_file)) from None
    except Exception as exc:  # noqa: BLE001 - whatever the problem's module code raises
        raise ConfigError(f"importing it raised {type(exc).__name__}: {exc}",
                          file=str(problem_file)) from None
    for attr in ("Model", "get_inputs", "get_init_inputs"):
        if not hasattr(mod, attr):
            raise ConfigError(
                f"a KernelBench problem defines Model, get_inputs and "
                f"get_init_inputs; '{attr}' is missing",
                file=str(problem_file),
            )
    return mod


def _seed_source(source: str, problem: str) -> str:
    """The problem's module body minus imports and the input functions, Model -> ModelNew."""
    tree = ast.parse(source)
    keep = []
    for node in tree.body:
        if isinstance(node, ast.Import | ast.ImportFrom):
            continue
        if isinstance(node, ast.FunctionDef) and node.name in ("get_inputs", "get_init_inputs"):
            continue
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            continue  # the module docstring
        keep.append(ast.get_source_segment(source, node) or "")
    body = "\n\n\n".join(keep)
    body = re.sub(r"\bModel\b", "ModelNew", body)
    extra_imports = [
        ast.get_source_segment(source, n) or ""
        for n in tree.body
        if isinstance(n, ast.Import | ast.ImportFrom)
        and ast.get_source_segment(source, n) not in ("import torch", "import torch.nn as nn")
    ]
    head = SEED_HEADER.format(problem=problem)
    if extra_imports:
        head += "\n".join(extra_imports) + "\n\n"
    return head + "# EVOLVE-BLOCK-START\n" + body + "\n# EVOLVE-BLOCK-END\n"


SIZE_WRAPPER = '''

# -- appended by `optimizer import-kernelbench`: the CPU workload's smaller sizes ----------
# get_inputs(**sizes) sets the problem's module-level size constants for the call only.
_kernelbench_get_inputs = get_inputs


def get_inputs(**sizes):
    saved = {name: globals()[name] for name in sizes}
    globals().update(sizes)
    try:
        return _kernelbench_get_inputs()
    finally:
        globals().update(saved)
'''


def _elements(inputs: list[Any]) -> int:
    import torch

    return sum(t.numel() for t in inputs if isinstance(t, torch.Tensor))


def _size_constants(source: str) -> dict[str, int]:
    """Module-level ``NAME = <int>`` assignments above 1 (KernelBench's batch_size, dim...)."""
    out = {}
    for node in ast.parse(source).body:
        if (isinstance(node, ast.Assign) and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name)
                and isinstance(node.value, ast.Constant) and type(node.value.value) is int
                and node.value.value > 1):
            out[node.targets[0].id] = node.value.value
    return out


def _with_sizes(mod: Any, sizes: dict[str, int], fn: Any) -> Any:
    saved = {k: getattr(mod, k) for k in sizes}
    mod.__dict__.update(sizes)
    try:
        return fn()
    finally:
        mod.__dict__.update(saved)


def _reduced_sizes(mod: Any, source: str) -> tuple[dict[str, int], list[Any]] | str:
    """Size constants that bring the inputs under CPU_MAX_ELEMENTS (the largest halved, one
    at a time) and the constructor arguments at those sizes, or why there are none."""
    consts = _size_constants(source)
    if not consts:
        return "its input shapes are not module-level size constants"
    sizes = dict(consts)
    for _ in range(256):
        try:
            inputs = list(_with_sizes(mod, sizes, mod.get_inputs))
        except Exception as exc:  # noqa: BLE001 - the problem's own code at other sizes
            return f"get_inputs() raised {type(exc).__name__} at sizes {sizes}: {exc}"
        if _elements(inputs) <= CPU_MAX_ELEMENTS:
            changed = {k: v for k, v in sizes.items() if v != consts[k]}
            init = list(_with_sizes(mod, sizes, mod.get_init_inputs))
            return changed, init
        largest = max(sizes, key=lambda k: sizes[k])
        if sizes[largest] <= 1:
            break
        sizes[largest] //= 2
    return "no smaller sizes of its constants bring the inputs under the CPU limit"


def _check_reduced(folder: Path, sizes: dict[str, int], init: list[Any]) -> str:
    """Run the written reference at the reduced sizes as the evaluator will; '' if it ran."""
    import torch

    try:
        mod = load_module(folder / "reference.py", register=False)
        inputs = list(mod.get_inputs(**sizes))
        with torch.no_grad():
            mod.Model(*init)(*inputs)
    except Exception as exc:  # noqa: BLE001 - the problem's own code at other sizes
        return (f"the reference fails at the reduced sizes {sizes} "
                f"({type(exc).__name__}: {exc}); its model reads sizes of its own")
    return ""


def _stress_lines(folder: Path, workloads: list[tuple[str, str, dict[str, int], list[Any]]]
                  ) -> list[str]:
    """The distributions the written reference supports and why the others are dropped
    (evaluators.numerics.screen), screened on the workloads small enough for the CPU: the
    GPU and the CPU then validate with the same ones."""
    from evaluators.kernels.evaluator import KernelConfig, load_reference, stress_toml

    raw = {"workloads": [{"name": n, "device": d, "args": a, "init": i}
                         for n, d, a, i in workloads]}
    config = KernelConfig.parse(raw, str(folder / "target.toml"))
    try:
        return stress_toml(config, load_reference(folder))
    except ConfigError as exc:
        raise ConfigError(f"{exc}; a kernel target needs a reference that is right on "
                          "normal inputs") from None


def _toml_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    # A TOML basic string: JSON's escapes, except that TOML has no surrogate pairs, so
    # characters beyond the BMP (an emoji in a docstring) are written as themselves.
    return json.dumps(str(value), ensure_ascii=False)


def import_kernelbench(problem_file: Path, dest_dir: Path, name: str | None = None) -> Path:
    """Create ``dest_dir/<name>/`` from a KernelBench problem; returns the new folder."""
    import torch

    problem_file = Path(problem_file)
    try:
        source = problem_file.read_text(encoding="utf-8-sig")  # a byte-order mark dropped
    except UnicodeDecodeError as exc:
        raise ConfigError(f"not UTF-8 text ({exc.reason} at byte {exc.start}); save it as UTF-8",
                          file=str(problem_file)) from None
    mod = _load(problem_file)
    name = _safe_name(name or problem_file.stem)
    folder = Path(dest_dir) / name
    if folder.exists():
        raise ConfigError(f"{folder} exists already; pass another name or remove it")
    try:
        inputs = list(mod.get_inputs())
        init = list(mod.get_init_inputs())
    except Exception as exc:  # noqa: BLE001 - the problem's own code
        raise ConfigError(f"get_inputs()/get_init_inputs() raised {type(exc).__name__}: {exc}",
                          file=str(problem_file)) from None
    if not all(isinstance(v, bool | int | float | str) for v in init):
        raise ConfigError(
            "get_init_inputs() must return numbers or strings to be written into target.toml",
            file=str(problem_file),
        )
    shapes = []
    elements = 0
    float_dtypes = set()
    for t in inputs:
        if isinstance(t, torch.Tensor):
            shapes.append(f"{tuple(t.shape)} {str(t.dtype).removeprefix('torch.')}")
            elements += t.numel()
            if t.is_floating_point():
                float_dtypes.add(str(t.dtype).removeprefix("torch."))
        else:
            shapes.append(repr(t))
    doc = (ast.get_docstring(ast.parse(source)) or "").strip()
    description = (doc + "\n" if doc else "") + (
        f"Imported from KernelBench problem {problem_file.name}; inputs: {'; '.join(shapes)}."
    )
    workloads: list[tuple[str, str, dict[str, int], list[Any]]] = [
        ("kernelbench", "cuda", {}, init)]
    no_cpu = ""
    reduced: dict[str, int] = {}
    if elements <= CPU_MAX_ELEMENTS:
        workloads.append(("kernelbench-cpu", "cpu", {}, init))
    else:
        found = _reduced_sizes(mod, source)
        if isinstance(found, str):
            no_cpu = found
        else:
            reduced, cpu_init = found
            if not all(isinstance(v, bool | int | float | str) for v in cpu_init):
                no_cpu = "get_init_inputs() at the reduced sizes is not numbers or strings"
            else:
                workloads.append(("kernelbench-cpu-reduced", "cpu", reduced, cpu_init))
    folder.mkdir(parents=True)
    (folder / "reference.py").write_text(source + (SIZE_WRAPPER if reduced else ""))
    if reduced:
        why = _check_reduced(folder, reduced, cpu_init)
        if why:  # back to the GPU workload alone, the problem file as it was
            no_cpu, workloads, reduced = why, workloads[:1], {}
            (folder / "reference.py").write_text(source)
    try:
        stress = _stress_lines(folder, workloads)
    except ConfigError:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    lines = [
        f'name = "{name}"',
        'kind = "kernel"',
        f"description = {_toml_value(description)}",
        'editable = ["kernel.py"]',
        'objectives = [{ metric = "time_ms", direction = "minimize" }]',
        'noise = "timing"',
        "min_gain = 0.03",
        "timeout_s = 300",
        "",
        "[evaluator]",
        *stress,
    ]
    for wname, device, args, winit in workloads:
        lines += [
            "",
            "[[evaluator.workloads]]",
            f'name = "{wname}"',
            f'device = "{device}"',
            "args = {" + ", ".join(f"{k} = {v}" for k, v in args.items()) + "}",
            f"init = {_toml_value(winit)}",
        ]
        if float_dtypes == {"bfloat16"} and device == "cpu":
            lines.append('skip = "bf16 inputs: checked natively on the GPU"')
    if no_cpu:
        lines += ["", f"# no CPU workload: {no_cpu}; without a GPU nothing of it is checked"]
    (folder / "target.toml").write_text("\n".join(lines) + "\n")
    (folder / "kernel.py").write_text(_seed_source(source, problem_file.name))
    return folder


def _add_arguments(parser: Any) -> None:
    parser.add_argument("file", type=Path)
    parser.add_argument(
        "--dest",
        type=Path,
        default=Path("targets/kernels"),
        help="folder the new target folder goes into (default targets/kernels)",
    )
    parser.add_argument("--name", help="target name (default: from the file name)")


def _run(args: Any) -> int:
    if not args.file.is_file():
        raise ConfigError(f"{args.file}: no such KernelBench problem file")
    folder = import_kernelbench(args.file, args.dest, args.name)
    print(f'target written to {folder}; add it to an experiment with [[targets]] path = "{folder}"')
    note = next((line for line in (folder / "target.toml").read_text().splitlines()
                 if line.startswith("# no CPU workload")), "")
    if note:
        print(note.removeprefix("# ").replace("; without", ":\nwithout"))
    return 0


COMMAND = Command(
    "import-kernelbench", "turn a KernelBench problem into a target", _add_arguments, _run
)
