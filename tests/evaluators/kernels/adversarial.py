"""Adversarial softmax kernels: each games one check; the evaluator must name that check.

Every entry is (name, expected state, a phrase the reason must contain, source). Sources are
complete kernel.py files built from a correct Triton softmax by small, targeted changes.
"""

HEADER = '''import torch
import torch.nn as nn
import triton
import triton.language as tl

'''

KERNEL = '''
@triton.jit
def _softmax(x_ptr, y_ptr, n_cols, xs, ys, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * xs + cols, mask=mask, other=-float("inf")).to(tl.float32)
    e = tl.exp(x - tl.max(x, axis=0))
    y = e / tl.sum(e, axis=0)
    tl.store(y_ptr + row * ys + cols, y.to(y_ptr.dtype.element_ty), mask=mask)

'''

LAUNCH = '''
def run(x):
    y = torch.empty_like(x)
    _softmax[(x.shape[0],)](x, y, x.shape[1], x.stride(0), y.stride(0),
                            BLOCK=triton.next_power_of_2(x.shape[1]))
    return y

'''

MODEL = '''
class ModelNew(nn.Module):
    def forward(self, x):
        return run(x)
'''


def _src(kernel: str = KERNEL, launch: str = LAUNCH, model: str = MODEL, header: str = HEADER):
    return header + kernel + launch + model


# partial_write, plus a forward that turns the child's allocation poisoning off first
POISON_OFF = _src(
    kernel=KERNEL.replace("mask=mask)\n", "mask=cols < n_cols - 1)\n"),
    model=MODEL.replace("        return run(x)", """\
        for cell in torch.empty_like.__closure__:
            names = getattr(cell.cell_contents, "__globals__", {})
            if "_Poison" in names:
                names["_Poison"].on = False
        return run(x)"""))

CORRECT = _src()

CASES = [
    ("all_zeros", "INVALID", "relative norm error",
     _src(kernel=KERNEL.replace("tl.store(y_ptr + row * ys + cols, y.to(",
                                "tl.store(y_ptr + row * ys + cols, (y * 0).to("))),
    ("partial_write", "INVALID", "never written",
     _src(kernel=KERNEL.replace("tl.store(y_ptr + row * ys + cols, y.to(y_ptr.dtype.element_ty), "
                                "mask=mask)",
                                "tl.store(y_ptr + row * ys + cols, y.to(y_ptr.dtype.element_ty), "
                                "mask=cols < n_cols - 1)"))),
    ("uninitialised_read", "INVALID", "uninitialised",
     _src(kernel=KERNEL.replace("def _softmax(x_ptr, y_ptr,", "def _softmax(x_ptr, y_ptr, s_ptr,")
          .replace("y = e / tl.sum(e, axis=0)",
                   "y = e / tl.sum(e, axis=0) + tl.load(s_ptr + cols, mask=mask, other=0.0)"),
          launch=LAUNCH.replace("_softmax[(x.shape[0],)](x, y,",
                                "s = torch.empty_like(x)\n    _softmax[(x.shape[0],)](x, y, s,"))),
    ("input_mutation", "INVALID", "input 0 was modified",
     _src(kernel=KERNEL.replace("    tl.store(y_ptr", "    tl.store(x_ptr + row * xs + cols, "
                                "(x + 1).to(x_ptr.dtype.element_ty), mask=mask)\n"
                                "    tl.store(y_ptr"))),
    ("no_max_subtraction", "INVALID", "NaN",
     _src(kernel=KERNEL.replace("e = tl.exp(x - tl.max(x, axis=0))", "e = tl.exp(x)"))),
    ("wrong_axis_scale", "INVALID", "outside atol",
     _src(kernel=KERNEL.replace("y = e / tl.sum(e, axis=0)", "y = e / tl.sum(e, axis=0) * 1.01"))),
    ("nondeterministic", "INVALID", "nondeterministic",
     _src(kernel=KERNEL.replace("def _softmax(x_ptr, y_ptr, n_cols,",
                                "def _softmax(x_ptr, y_ptr, seed, n_cols,")
          .replace("y = e / tl.sum(e, axis=0)",
                   "y = e / tl.sum(e, axis=0) * (1 + 3e-7 * tl.rand(seed, cols))"),
          launch=LAUNCH.replace("_softmax[(x.shape[0],)](x, y,",
                                "_softmax[(x.shape[0],)](x, y, id(y) % 100003,"))),
    ("downcast_bf16", "INVALID", "downcast",
     _src(kernel=KERNEL.replace("tl.store(y_ptr + row * ys + cols, y.to(y_ptr.dtype.element_ty)",
                                "tl.store(y_ptr + row * ys + cols, y.to(tl.bfloat16).to("
                                "y_ptr.dtype.element_ty)"))),
    ("wrong_dtype", "INVALID", "dtype",
     _src(launch=LAUNCH.replace("y = torch.empty_like(x)",
                                "y = torch.empty(x.shape, dtype=torch.float64, device=x.device)"))),
    ("aliases_input", "REJECTED", "aliases input",
     _src(launch=LAUNCH.replace("y = torch.empty_like(x)", "y = x"))),
    ("tensor_subclass", "REJECTED", "not a plain torch.Tensor",
     _src(model=MODEL.replace("return run(x)", "return run(x).as_subclass(Sub)")
          .replace("class ModelNew", "class Sub(torch.Tensor):\n    pass\n\n\nclass ModelNew"))),
    ("reused_output_buffer", "REJECTED", "earlier call",
     _src(model='''
class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.slot = []

    def forward(self, x):
        if not self.slot:
            self.slot.append(torch.empty_like(x))
        y = self.slot[0]
        _softmax[(x.shape[0],)](x, y, x.shape[1], x.stride(0), y.stride(0),
                                BLOCK=triton.next_power_of_2(x.shape[1]))
        return y
''')),
    ("results_cached_by_shape", "REJECTED", "keeps state across calls",
     _src(model='''
class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.memo = {}

    def forward(self, x):
        if x.shape not in self.memo:
            self.memo[x.shape] = run(x)
        return self.memo[x.shape]
''')),
    # on a GPU the check and the timing share one process, and poisoning is switched off
    # for the timing: a candidate that reaches the switch (through the allocator wrapper's
    # closure) to leave its unwritten outputs unpoisoned during the check
    ("poison_switched_off", "REJECTED", "introspection via __closure__", POISON_OFF),
    # the static check stops these before they run
    ("torch_fallback", "REJECTED", "torch compute",
     _src(model=MODEL.replace("return run(x)", "return torch.softmax(x, dim=-1)"))),
    ("method_compute", "REJECTED", "tensor compute",
     _src(model=MODEL.replace("return run(x)", "return run(x.float()).to(x.dtype)"))),
    ("calls_reference", "REJECTED", "import",
     _src(header=HEADER + "from reference import Model\n")),
    ("try_except_fallback", "REJECTED", "try/except",
     _src(model=MODEL.replace("return run(x)",
                              "try:\n            return run(x)\n        except Exception:\n"
                              "            return x"))),
    ("module_cache", "REJECTED", "module-level dict",
     _src(header=HEADER + "_CACHE = {}\n",
          model=MODEL.replace("return run(x)",
                              "k = (x.shape, x.data_ptr())\n        if k not in _CACHE:\n"
                              "            _CACHE[k] = run(x)\n        return _CACHE[k]"))),
    ("lru_cache", "REJECTED", "keeps results across calls",
     _src(header=HEADER + "import functools\n",
          launch="\n@functools.lru_cache(maxsize=None)\n" + LAUNCH.lstrip("\n"))),
    ("side_stream", "REJECTED", "side stream",
     _src(model=MODEL.replace("return run(x)",
                              "with torch.cuda.stream(torch.cuda.Stream()):\n"
                              "            return run(x)"))),
    ("tf32_dot", "REJECTED", "input_precision",
     _src(kernel=KERNEL.replace(
         "    e = tl.exp", "    z = tl.dot(x[None, :], x[:, None], input_precision=\"tf32\")\n"
         "    e = tl.exp"))),
    ("no_triton", "REJECTED", "no @triton.jit",
     HEADER + "\nclass ModelNew(nn.Module):\n    def forward(self, x):\n"
     "        return x.softmax(-1)\n"),
    ("backend_flags", "REJECTED", "precision",
     _src(header=HEADER + "torch.backends.cuda.matmul.allow_tf32 = True\n")),
]

# compute the static check cannot see; the runtime audit around forward stops it
_AUDIT = "runtime audit"


def _hidden(body: str) -> str:
    """A kernel.py with the honest kernel present (the static check passes) whose forward
    does the work in torch by ``body`` (indented into forward)."""
    return _src(model="\nclass ModelNew(nn.Module):\n    def forward(self, x):\n"
                + "".join(f"        {line}\n" for line in body.strip().splitlines()))


AUDIT_CASES = [
    ("operator_compute", "REJECTED", _AUDIT,
     _hidden("y = run(x)\nreturn y * 2 - y")),
    ("getattr_methods", "REJECTED", _AUDIT,
     _hidden('e = getattr(torch, "ex" + "p")(x - getattr(x, "am" + "ax")(-1, keepdim=True))\n'
             'return e / getattr(e, "su" + "m")(-1, keepdim=True)')),
    ("aten_op_direct", "REJECTED", _AUDIT,
     _hidden('aten = getattr(torch, "o" + "ps").aten\n'
             'return aten._softmax.default(x, -1, False)')),
    ("functional_alias", "REJECTED", _AUDIT,
     _hidden("act = torch.nn.functional.softmax\nreturn act(x, dim=-1)")),
    ("pop_dispatch_mode", "REJECTED", "removed from the mode stack",
     _hidden('getattr(getattr(torch, "_" + "C"), "_pop_torch_dispatch_stack")(None)\n'
             'return getattr(torch, "soft" + "max")(x, -1)')),
    ("pop_and_restore_mode", "REJECTED", "disables the runtime torch audit",
     _hidden('c = getattr(torch, "_" + "C")\n'
             'mode = getattr(c, "_pop_torch_dispatch_stack")(None)\n'
             'y = getattr(torch, "soft" + "max")(x, -1)\n'
             'getattr(c, "_push_on_torch_dispatch_stack")(mode)\n'
             'return y')),
    ("exclude_python_key", "REJECTED", "disables the runtime torch audit",
     _hidden('c = getattr(torch, "_" + "C")\n'
             'keys = c.DispatchKeySet(c.DispatchKey.Python)\n'
             'with getattr(c, "_ExcludeDispatchKeyGuard")(keys):\n'
             '    y = getattr(torch, "soft" + "max")(x, -1)\n'
             'return y')),
    # a function whose code claims to live in triton's interpreter (where host copies are
    # allowed): only triton's real code objects are exempt, so the multiply is still charged
    ("forged_triton_frame", "REJECTED", _AUDIT,
     _hidden('def double(t):\n    return t * 2\n'
             'code = getattr(double, "__co" + "de__")\n'
             'path = getattr(triton, "__fi" + "le__").replace("__init__.py", '
             '"runtime/interpreter.py")\n'
             'forged = type(double)(getattr(code, "repl" + "ace")(co_filename=path), {})\n'
             'y = run(x)\nreturn forged(y) - y')),
    # the trusted reference is imported in the candidate's process (the harness draws the
    # validation sets there from their seeds): answering with it is torch compute
    ("borrow_trusted_reference", "REJECTED", _AUDIT,
     _hidden('mods = getattr(getattr(torch, "sy" + "s"), "modu" + "les")\n'
             'return mods["trusted_" + "reference"].Model()(x)')),
    ("numpy_on_cpu_copy", "REJECTED", _AUDIT,
     _hidden('n = getattr(getattr(x, "cp" + "u")(), "num" + "py")()\n'
             'e = 2.718281828459045 ** (n - getattr(n, "m" + "ax")(-1, keepdims=True))\n'
             'y = torch.empty_like(x)\n'
             'getattr(y, "num" + "py")()[:] = e / getattr(e, "su" + "m")(-1, keepdims=True)\n'
             'return y')),
]
