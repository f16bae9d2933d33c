"""AST checks that a kernel candidate does its work in Triton (or Gluon), honestly.

Run before anything executes. Each rule names a way a candidate can look fast or correct
without being either:

- torch compute in the host code (``torch.softmax``, ``F.*``, ``x.sum()``, ``a @ b``):
  the work must be in a ``@triton.jit`` / ``@gluon.jit`` kernel. Allocation, views and
  metadata (``torch.empty``, ``.view``, ``.stride()``...) are allowed.
- calling the reference (``import reference``, ``Model``), or dynamic imports/eval.
- ``try``/``except``: a fallback path the timing never sees.
- state across calls: module-level dicts/lists/sets, ``global``/``nonlocal``,
  ``functools.cache``/``lru_cache``, assignments to ``self.*`` outside ``__init__``.
- side streams, threads and processes (``torch.cuda.Stream``, ``threading``...), and the
  attribute names that reach them some other way (``getattr``, ``torch.sys``, frames,
  ``torch.cuda._sleep``); mutable default arguments (state across calls).
- a module-level value read inside a kernel that is not ``tl.constexpr(...)``: the CPU
  interpreter accepts it, compiling for a GPU does not (caught here, before a GPU is used).
- reduced precision in float32 dots (``allow_tf32=True``, ``input_precision="tf32"``,
  ``torch.backends`` flags) unless the target sets ``allow_tf32 = true``.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from optimizer import syntax

ALLOWED_IMPORTS = ("torch", "triton", "math", "typing", "functools", "__future__")
# torch.<name> calls that only allocate, describe or convert metadata
TORCH_ALLOWED = {
    "empty", "empty_like", "empty_strided", "zeros", "zeros_like", "ones", "ones_like",
    "full", "full_like", "arange", "device", "Size", "finfo", "iinfo", "promote_types",
    "result_type", "is_tensor", "is_floating_point", "no_grad", "inference_mode", "dtype",
    "get_device_properties", "current_device", "device_count", "get_device_name",
    "get_device_capability", "is_available", "Module", "Parameter", "Tensor",
}
# tensor methods that compute (anything numeric); views and metadata stay allowed
METHODS_FORBIDDEN = {
    "softmax", "log_softmax", "sum", "mean", "exp", "exp_", "log", "max", "min", "amax",
    "amin", "matmul", "mm", "bmm", "addmm", "baddbmm", "norm", "var", "std", "pow", "sqrt",
    "rsqrt", "mul", "mul_", "add", "add_", "sub", "sub_", "div", "div_", "cumsum", "logsumexp",
    "gather", "scatter", "scatter_", "index_select", "where", "clamp", "relu", "gelu", "silu",
    "sigmoid", "tanh", "einsum", "float", "half", "bfloat16", "double", "to", "type",
    "layer_norm", "rms_norm", "cross_entropy", "nll_loss", "linear", "addcmul", "lerp",
    "masked_fill", "abs", "neg", "reciprocal", "square", "prod", "argmax", "topk", "sort",
    "cpu", "numpy", "tolist", "item", "copy_", "clone", "fill_", "zero_", "normal_", "uniform_",
    "random_", "apply_", "map_", "record_stream", "wait_stream",
}
MODULES_FORBIDDEN = {
    "reference", "importlib", "threading", "multiprocessing", "concurrent", "asyncio",
    "subprocess", "os", "sys", "ctypes", "gc", "inspect", "pickle", "numpy", "cupy",
}
NAMES_FORBIDDEN = {
    "exec": "dynamic code", "eval": "dynamic code", "compile": "dynamic code",
    "__import__": "dynamic import", "open": "file access", "globals": "module state",
    "setattr": "attribute writes by name", "Model": "calls the reference model",
    "getattr": "attribute reads by name", "delattr": "attribute writes by name",
    "vars": "introspection", "locals": "introspection", "__builtins__": "introspection",
    "breakpoint": "a debugger hook",
}
# Attribute names no kernel needs, whatever object they are read from: frames (telling the
# checks from the timing), the interpreter's modules reached through another module
# (``torch.sys``, ``torch.os``), timing and stream machinery (work the timed stream does not
# see, a spin that stretches the baseline), and dynamic attribute access.
ATTRS_FORBIDDEN = {
    "_getframe", "f_back", "f_locals", "f_globals", "f_code", "gi_frame", "tb_frame",
    "sys", "os", "gc", "inspect", "threading", "builtins", "importlib", "subprocess",
    "__getattribute__", "__getattr__", "__setattr__", "__subclasses__", "__import__",
    "_sleep", "Stream", "ExternalStream", "set_stream", "current_stream", "default_stream",
    "stream", "Event", "graph", "CUDAGraph", "graphs", "synchronize_stream",
}
# receivers whose methods are plain host arithmetic (math.sqrt, triton.cdiv, tl.max)
HOST_MODULES = {"math", "triton", "tl", "gl", "gluon", "ttgl"}
CACHE_DECORATORS = {"lru_cache", "cache", "cached_property"}


@dataclass(frozen=True)
class Finding:
    line: int
    rule: str
    message: str

    def __str__(self) -> str:
        return f"line {self.line}: [{self.rule}] {self.message}"


def _dotted(node: ast.AST) -> str:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return ""


def _is_kernel(fn: ast.FunctionDef) -> bool:
    for dec in fn.decorator_list:
        target = dec.func if isinstance(dec, ast.Call) else dec
        name = _dotted(target)
        if name.endswith("jit") or name.endswith("autotune") or name.endswith("heuristics"):
            return True
    return False


class _Checker(ast.NodeVisitor):
    def __init__(self, allow_tf32: bool):
        self.allow_tf32 = allow_tf32
        self.findings: list[Finding] = []
        self.torch_aliases = {"torch"}
        self.functional_aliases: set[str] = set()
        self.kernels = 0
        self.has_model_new = False
        self._in_kernel = 0
        self._func_stack: list[str] = []
        self._plain_globals: set[str] = set()  # module-level values that are not constexpr
        self._kernel_locals: list[set[str]] = []

    def add(self, node: ast.AST, rule: str, message: str) -> None:
        self.findings.append(Finding(getattr(node, "lineno", 0), rule, message))

    # -- imports -----------------------------------------------------------------
    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._check_module(node, alias.name)
            if alias.name == "torch" and alias.asname:
                self.torch_aliases.add(alias.asname)
            if alias.name == "torch.nn.functional":
                self.functional_aliases.add(alias.asname or "torch.nn.functional")

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        module = node.module or ""
        if node.level:
            self.add(node, "import", "relative imports are not allowed")
        self._check_module(node, module)
        for alias in node.names:
            if module == "torch.nn" and alias.name == "functional":
                self.functional_aliases.add(alias.asname or "functional")
            if module == "functools" and alias.name in CACHE_DECORATORS:
                self.add(node, "cache", f"functools.{alias.name} keeps results across calls")
            if module == "torch" and alias.name not in TORCH_ALLOWED | {"nn"}:
                self.add(node, "torch-compute", f"'from torch import {alias.name}': only "
                         "allocation and metadata may come from torch")

    def _check_module(self, node: ast.AST, module: str) -> None:
        root = module.split(".")[0]
        if root in MODULES_FORBIDDEN or root not in ALLOWED_IMPORTS:
            self.add(node, "import", f"import of '{module}' is not allowed; kernels may import "
                     f"{', '.join(ALLOWED_IMPORTS)} (triton.experimental.gluon included)")
        if module.startswith("torch.cuda") or module.startswith("torch.backends"):
            self.add(node, "import", f"import of '{module}' (streams and precision flags)")

    # -- structure -----------------------------------------------------------------
    def visit_Try(self, node: ast.AST) -> None:
        self.add(node, "fallback", "try/except is not allowed: no fallback paths that the "
                 "checks or the timing do not see")
        self.generic_visit(node)

    visit_TryStar = visit_Try

    def visit_Global(self, node: ast.Global) -> None:
        self.add(node, "cache", "'global' keeps state across calls")

    def visit_Nonlocal(self, node: ast.Nonlocal) -> None:
        self.add(node, "cache", "'nonlocal' keeps state across calls")

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        if node.name == "ModelNew":
            self.has_model_new = True
        for stmt in node.body:
            if isinstance(stmt, ast.Assign | ast.AnnAssign) and _mutable(stmt.value):
                    self.add(stmt, "cache", "a mutable class attribute keeps state across calls")
        self.generic_visit(node)

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        for default in [*node.args.defaults, *node.args.kw_defaults]:
            if default is not None and _mutable(default):
                self.add(default, "cache", "a mutable default argument keeps state across calls")
        for dec in node.decorator_list:
            name = _dotted(dec.func if isinstance(dec, ast.Call) else dec)
            if name.split(".")[-1] in CACHE_DECORATORS:
                self.add(dec, "cache", f"@{name} keeps results across calls")
        kernel = _is_kernel(node)
        self.kernels += kernel
        self._in_kernel += kernel
        self._func_stack.append(node.name)
        if kernel:
            args = node.args
            names = {a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs]}
            names |= {n.id for n in ast.walk(node) if isinstance(n, ast.Name)
                      and isinstance(n.ctx, ast.Store)}
            self._kernel_locals.append(names)
        self.generic_visit(node)
        if kernel:
            self._kernel_locals.pop()
        self._func_stack.pop()
        self._in_kernel -= kernel

    visit_AsyncFunctionDef = visit_FunctionDef  # type: ignore[assignment]

    def visit_Module(self, node: ast.Module) -> None:
        for stmt in node.body:
            if isinstance(stmt, ast.Assign | ast.AnnAssign) and _mutable(stmt.value):
                    self.add(stmt, "cache", "a module-level dict/list/set can keep results "
                             "across calls; use constants (tuples) or locals")
            if isinstance(stmt, ast.Assign | ast.AnnAssign) and not (
                    isinstance(stmt.value, ast.Call)
                    and _dotted(stmt.value.func).split(".")[-1] == "constexpr"):
                targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
                self._plain_globals |= {n.id for t in targets for n in ast.walk(t)
                                        if isinstance(n, ast.Name)}
        self.generic_visit(node)

    def visit_Assign(self, node: ast.Assign) -> None:
        in_init = bool(self._func_stack) and self._func_stack[-1] == "__init__"
        for tgt in node.targets:
            self._check_target(tgt, in_init)
        self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        in_init = bool(self._func_stack) and self._func_stack[-1] == "__init__"
        self._check_target(node.target, in_init)
        self.generic_visit(node)

    def _check_target(self, tgt: ast.AST, in_init: bool) -> None:
        if self._in_kernel:
            return
        base = tgt
        while isinstance(base, ast.Attribute | ast.Subscript):
            if (isinstance(base, ast.Attribute) and isinstance(base.value, ast.Name)
                    and base.value.id == "self" and self._func_stack and not in_init):
                self.add(tgt, "cache", f"assignment to self.{base.attr} outside __init__ "
                         "keeps state across calls")
                return
            base = base.value
        name = _dotted(tgt)
        if name.split(".")[0] in self.torch_aliases and ".backends" in "." + name:
            self.add(tgt, "precision", f"setting {name} changes precision globally")

    # -- calls and operators -------------------------------------------------------
    def visit_BinOp(self, node: ast.BinOp) -> None:
        if isinstance(node.op, ast.MatMult) and not self._in_kernel:
            self.add(node, "torch-compute", "'@' computes with torch; use a Triton kernel")
        self.generic_visit(node)

    def visit_Name(self, node: ast.Name) -> None:
        if node.id in NAMES_FORBIDDEN:
            self.add(node, "forbidden", f"'{node.id}' is not allowed ({NAMES_FORBIDDEN[node.id]})")
        if (self._kernel_locals and isinstance(node.ctx, ast.Load)
                and node.id in self._plain_globals and node.id not in self._kernel_locals[-1]):
            self.add(node, "gpu-global", f"the kernel reads the module-level '{node.id}', "
                     "which is not tl.constexpr(...): compiling for a GPU refuses it (the CPU "
                     f"interpreter does not); write {node.id} = tl.constexpr(...) or pass it "
                     "as an argument")

    def visit_Attribute(self, node: ast.Attribute) -> None:
        name = _dotted(node)
        root = name.split(".")[0]
        if root in self.torch_aliases:
            parts = name.split(".")
            rest = parts[1:]
            if rest[:1] == ["cuda"] and any(p in ("Stream", "stream", "ExternalStream",
                                                  "set_stream", "graph", "CUDAGraph")
                                             for p in rest):
                self.add(node, "side-stream", f"{name}: side streams and graphs hide work "
                         "from the timed stream")
            elif rest[:1] in (["backends"], ["set_float32_matmul_precision"], ["_C"], ["ops"],
                              ["library"], ["compile"], ["_dynamo"], ["_inductor"]):
                self.add(node, "torch-compute", f"{name} is not allowed in a kernel candidate")
        if node.attr in ("__dict__", "__globals__", "__code__", "__closure__"):
            self.add(node, "forbidden", f"introspection via {node.attr}")
        elif node.attr in ATTRS_FORBIDDEN:
            self.add(node, "forbidden", f".{node.attr}: frames, interpreter modules, streams "
                     "and timing machinery are not for kernels")
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        name = _dotted(node.func)
        parts = name.split(".")
        if not self._in_kernel:
            if parts[0] in self.torch_aliases and len(parts) >= 2:
                if parts[1] == "nn" and len(parts) >= 3 and parts[2] == "functional":
                    self.add(node, "torch-compute", f"{name}: torch compute in the forward path")
                elif parts[1] == "cuda" or parts[1] == "nn":
                    pass
                elif parts[-1] not in TORCH_ALLOWED:
                    self.add(node, "torch-compute", f"{name}: torch compute in the forward "
                             "path; do the work in a Triton kernel")
            elif parts[0] == "F" or parts[0] in self.functional_aliases:
                self.add(node, "torch-compute", f"{name}: torch.nn.functional compute")
            elif parts[0] in HOST_MODULES:
                pass
            elif isinstance(node.func, ast.Attribute) and node.func.attr in METHODS_FORBIDDEN:
                self.add(node, "torch-compute", f".{node.func.attr}(): tensor compute in host "
                         "code; do the work in a Triton kernel")
        if not self.allow_tf32:
            for kw in node.keywords:
                if kw.arg == "allow_tf32" and _is_const(kw.value, True):
                    self.add(node, "precision", "allow_tf32=True on a float32 target")
                if kw.arg == "input_precision" and isinstance(kw.value, ast.Constant) and str(
                    kw.value.value
                ).startswith("tf32"):
                    self.add(node, "precision", f"input_precision={kw.value.value!r} on a "
                             "float32 target (use \"ieee\")")
        self.generic_visit(node)


def _mutable(value: ast.AST | None) -> bool:
    if isinstance(value, ast.Dict | ast.List | ast.Set | ast.DictComp | ast.ListComp |
                  ast.SetComp):
        return True
    return isinstance(value, ast.Call) and _dotted(value.func).split(".")[-1] in (
        "dict", "list", "set", "OrderedDict", "defaultdict", "deque")


def _is_const(node: ast.AST, value: object) -> bool:
    return isinstance(node, ast.Constant) and node.value is value


def check_source(source: str, filename: str = "kernel.py", *, allow_tf32: bool = False,
                 require_model: bool = True) -> list[Finding]:
    """Every rule the source breaks (empty when it passes)."""
    try:
        tree = syntax.parse(source, filename=filename)
    except SyntaxError as exc:
        return [Finding(exc.lineno or 0, "syntax", exc.msg)]
    checker = _Checker(allow_tf32)
    checker.visit(tree)
    if require_model and not checker.has_model_new:
        checker.findings.append(Finding(0, "structure", "no class ModelNew"))
    if require_model and not checker.kernels:
        checker.findings.append(Finding(0, "structure", "no @triton.jit or @gluon.jit kernel: "
                                        "the work must be done in Triton"))
    return sorted(checker.findings, key=lambda f: f.line)
