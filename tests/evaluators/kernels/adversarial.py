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
