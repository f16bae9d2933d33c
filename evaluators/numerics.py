"""Floating-point validation: fresh inputs, a float64 reference, and a verdict with reasons.

Used on the trusted side only (the engine process, or a trusted benchmark script). Imports
torch and the standard library, never candidate code.

Why each check exists (each one has an adversarial kernel in tests/evaluators/kernels/):

- relative norm error ``||out - ref|| / ||ref||`` *and* a per-element bound
  ``|out - ref| <= atol * rms(ref) + rtol * |ref|``: an all-zeros softmax over 4096 columns
  has every element below 1e-3, so an absolute per-element bound alone passes it; the norm
  ratio is 1.0 and fails it. ``atol`` is scaled by ``rms(ref)`` so that one tolerance fits
  inputs with a large offset and inputs near zero alike.
- NaN or Inf where the reference is finite: outputs are poisoned with NaN before each call,
  so an element the kernel never wrote, or a read of uninitialised scratch, shows up here.
- float32 targets: an error between the float32 bound and 3e-2 is what a TF32, fp16 or bf16
  downcast produces (TF32 near 3e-4, bf16 near 2e-3 on these targets), and is reported so.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

FLOAT_DTYPES = ("float64", "float32", "float16", "bfloat16")


@dataclass(frozen=True)
class Tolerance:
    """Bounds for one output dtype (see module docstring for the per-element formula)."""

    norm: float  # bound on ||out - ref|| / ||ref||
    rtol: float  # per element, relative to |ref|
    atol: float  # per element, relative to rms(ref)

    @classmethod
    def from_config(cls, value: Any, where: str, base: Tolerance) -> Tolerance:
        if isinstance(value, Mapping) and set(value) <= {"norm", "rtol", "atol"}:
            return cls(
                float(value.get("norm", base.norm)),
                float(value.get("rtol", base.rtol)),
                float(value.get("atol", base.atol)),
            )
        raise ValueError(
            f"{where}: a tolerance is {{ norm = x, rtol = y, atol = z }}, not {value!r}"
        )


# Output rounding alone gives a relative norm error near ulp/2/sqrt(3): 1.1e-3 for bf16
# (8 bits), 2.8e-4 for fp16 (11 bits); the bounds leave room for fp32 accumulation order.
DEFAULT_TOLERANCES: dict[str, Tolerance] = {
    "float64": Tolerance(1e-12, 1e-10, 1e-12),
    "float32": Tolerance(1e-5, 1e-4, 1e-5),
    "float16": Tolerance(2e-3, 4e-3, 2e-3),
    "bfloat16": Tolerance(8e-3, 2e-2, 1e-2),
}

# Distributions a target may ask for; none produces a tensor of zeros (it would hide
# unwritten outputs). Which of them a target validates with is decided from its reference
# (see :func:`screen`).
DISTRIBUTIONS = ("normal", "uniform", "offset", "wide", "negative", "neginf_mask", "tiny",
                 "special")


def torch_dtype(name: str) -> torch.dtype:
    dtype = getattr(torch, name, None)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"unknown dtype {name!r}; use one of {', '.join(FLOAT_DTYPES)}, int64")
    return dtype


def draw(shape: Sequence[int], dtype: torch.dtype, dist: str, gen: torch.Generator) -> torch.Tensor:
    """A fresh floating tensor from ``dist`` (drawn in float32 on the generator's device,
    rounded to ``dtype``)."""
    shape = tuple(int(s) for s in shape)
    dev = gen.device
    if dist == "uniform":  # the one distribution that is not built from a normal draw
        x = torch.rand(shape, generator=gen, dtype=torch.float32, device=dev) * 6.0 - 3.0
        x = x.to(dtype)
        if x.numel() and not bool((x != 0).any()):
            raise AssertionError("draw produced an all-zero tensor")
        return x
    x = torch.randn(shape, generator=gen, dtype=torch.float32, device=dev)
    if dist == "normal":
        pass
    elif dist == "offset":
        # catches one-pass E[x^2] - E[x]^2 variance and max-free exp
        x = x * 4.0 + 300.0
    elif dist == "wide":
        x = x * 40.0  # exp() overflows in float32 unless the row maximum is subtracted
    elif dist == "negative":
        x = -x.abs() * 5.0 - 20.0
    elif dist == "neginf_mask":
        mask = torch.rand(shape, generator=gen, device=dev) < 0.15
        if len(shape) >= 1 and shape[-1] > 0:
            mask[..., 0] = False  # never a row of -inf only (softmax is NaN there)
        x = x.masked_fill(mask, float("-inf"))
    elif dist == "tiny":
        # products of two values sit at the square root of the dtype's smallest normal
        # number, well above it (tensor cores flush subnormal products to zero): an
        # intermediate in a narrower type (float16 under a float32 kernel) underflows, and
        # a misplaced eps swamps the values
        scale = torch.finfo(dtype).tiny ** 0.25
        x = (x.double() if dtype == torch.float64 else x) * scale
    elif dist == "special":
        # one element in eight is a signed zero or a subnormal of the dtype (the rest
        # normal): sign handling of zeros, flush-to-zero, a max or log that meets zero
        pick = torch.rand(shape, generator=gen, device=dev)
        sub = torch.finfo(dtype).tiny / 4.0
        special = torch.tensor([0.0, -0.0, sub, -sub], dtype=torch.float64, device=dev)
        which = (pick * 32.0).long().clamp(max=31)  # 0-3 special (1 in 8), else normal
        x = x.to(dtype)
        if x.numel():
            x = torch.where(which < 4, special[which.clamp(max=3)].to(dtype), x)
    else:
        raise ValueError(f"unknown distribution {dist!r}; known: {', '.join(DISTRIBUTIONS)}")
    x = x.to(dtype)
    # a value that rounded to exactly zero is fine; a tensor of zeros is not
    if x.numel() and not bool((x != 0).any()):
        raise AssertionError("draw produced an all-zero tensor")
    return x


# A reference's get_inputs draws its integer inputs (a cross-entropy target's labels) from
# torch's process-wide generators, which make_case seeds first: two threads that did so at
# once (the slots of a shared night, building different targets' cases) drew each other's
# labels, and the trusted references of a whole target came out wrong (its seed judged
# INVALID on the H200, 2026-12-03). Seeding and drawing take turns.
_GLOBAL_RNG = threading.Lock()


@dataclass(frozen=True)
class Case:
    """One set of inputs (model parameters included) for one workload."""

    dist: str
    inputs: tuple[Any, ...]  # tensors or Python scalars, as the reference's forward takes
    params: Mapping[str, torch.Tensor] = field(default_factory=dict)


def _template(reference: Any, args: Mapping[str, Any], device: str = "cpu") -> list[Any]:
    """``reference.get_inputs(**args)``, whose floating values are redrawn anyway: on the
    meta device (shapes and dtypes only, no values drawn) when that gives no integer
    tensor, whose values are kept and so must be real (a cross-entropy target's labels);
    otherwise for real, on ``device``. Drawing a 4096 x 128256 template on the CPU cost as
    much as the draw itself."""
    try:
        with torch.device("meta"):
            meta = list(reference.get_inputs(**args))
    except Exception:  # noqa: BLE001 - a reference the meta device cannot run
        meta = None
    if meta is not None and not any(isinstance(t, torch.Tensor) and not t.is_floating_point()
                                    and t.device.type == "meta" for t in meta):
        return meta
    with torch.device(device):
        return [t.to(device) if isinstance(t, torch.Tensor) else t
                for t in reference.get_inputs(**args)]


def make_case(
    reference: Any,
    args: Mapping[str, Any],
    init_inputs: Sequence[Any],
    dist: str,
    seed: int,
    param_dtype: torch.dtype | None,
    device: str = "cpu",
) -> Case:
    """Shapes, dtypes and integer inputs from ``reference.get_inputs(**args)``; floating values
    redrawn from ``dist``; parameters of ``Model(*init_inputs)`` drawn near 1 (not exactly 1,
    so a kernel that ignores a weight fails).

    Drawn on ``device``, where the tensors stay: a 4096 x 128256 bf16 case takes 22 s on
    two CPU cores and milliseconds on a GPU. The same seed gives the same values on the
    same kind of device (the trusted side and the sandbox draw a GPU workload's timed
    inputs alike), not across devices."""
    with _GLOBAL_RNG:  # the template's integer inputs come from torch's global generators
        torch.manual_seed(seed)  # seeds the CUDA generators too
        template = _template(reference, args, device)
    gen = torch.Generator(device=device).manual_seed(seed ^ 0x5EED)
    inputs: list[Any] = []
    for t in template:
        if isinstance(t, torch.Tensor) and t.is_floating_point():
            inputs.append(draw(t.shape, t.dtype, dist, gen))
        elif isinstance(t, torch.Tensor):
            inputs.append(t.clone())
        else:
            inputs.append(t)
    model = reference.Model(*init_inputs)
    params: dict[str, torch.Tensor] = {}
    for name, p in model.state_dict().items():
        dtype = param_dtype if (param_dtype and p.is_floating_point()) else p.dtype
        if p.is_floating_point():
            noise = torch.randn(p.shape, generator=gen, device=device) * 0.5 + 1.0
            params[name] = noise.to(dtype)
        else:
            params[name] = p.clone().to(device)
    return Case(dist, tuple(inputs), params)


def reference_output(reference: Any, init_inputs: Sequence[Any], case: Case,
                     device: str = "cpu") -> list[torch.Tensor]:
    """The reference model's answer in float64, from the same rounded values, computed on
    ``device`` (the outputs stay there; :func:`compare` compares where they are). A GPU
    that cannot (out of memory, an op without a float64 kernel) falls back to the CPU."""
    if device != "cpu":
        try:
            return _reference_output(reference, init_inputs, case, device)
        except (RuntimeError, NotImplementedError):
            torch.cuda.empty_cache()
    return _reference_output(reference, init_inputs, case, "cpu")


def _reference_output(reference: Any, init_inputs: Sequence[Any], case: Case,
                      device: str) -> list[torch.Tensor]:
    model = reference.Model(*init_inputs).double().to(device)
    if case.params:
        model.load_state_dict(
            {k: (v.double() if v.is_floating_point() else v) for k, v in case.params.items()}
        )
    inputs = [
        t.to(device, torch.float64) if isinstance(t, torch.Tensor) and t.is_floating_point()
        else t.to(device) if isinstance(t, torch.Tensor) else t
        for t in case.inputs
    ]
    with torch.no_grad():
        out = model(*inputs)
    return [o.double() for o in as_list(out)]


def shapes_only(case: Case) -> Case:
    """``case`` with its tensor inputs as 'meta' tensors (shape and dtype, no storage): what
    the trusted side keeps of a case once its references and digests are made. The
    candidate's process draws the values itself; keeping them held a night's every input
    set on the GPU (a kernel night on an 80 GB H100 ran out of memory, 2026-12-06)."""
    inputs = tuple(t.to("meta") if isinstance(t, torch.Tensor) else t for t in case.inputs)
    return Case(case.dist, inputs, case.params)


def expected_meta(
    reference: Any, init_inputs: Sequence[Any], case: Case
) -> list[tuple[tuple[int, ...], torch.dtype]]:
    """Shape and dtype the reference gives at the workload's own dtype, computed on 'meta'."""
    with torch.device("meta"):
        model = reference.Model(*init_inputs)
    for name, p in case.params.items():
        _set_meta_param(model, name, p.dtype)
    inputs = [t.to("meta") if isinstance(t, torch.Tensor) else t for t in case.inputs]
    with torch.no_grad():
        out = model(*inputs)
    return [(tuple(o.shape), o.dtype) for o in as_list(out)]


def _set_meta_param(model: torch.nn.Module, name: str, dtype: torch.dtype) -> None:
    owner_name, _, attr = name.rpartition(".")
    owner = model.get_submodule(owner_name) if owner_name else model
    current = getattr(owner, attr)
    new = current.to(dtype)
    if isinstance(current, torch.nn.Parameter):
        new = torch.nn.Parameter(new, requires_grad=False)
    setattr(owner, attr, new)


def as_list(out: Any) -> list[torch.Tensor]:
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, list | tuple) and all(isinstance(o, torch.Tensor) for o in out):
        return list(out)
    raise TypeError(f"forward must return a tensor or a tuple of tensors, not {type(out).__name__}")


@dataclass(frozen=True)
class Verdict:
    ok: bool
    reason: str = ""
    norm_err: float = 0.0
    max_abs: float = 0.0
    bad: int = 0


def compare(out: torch.Tensor, ref: torch.Tensor, tol: Tolerance, *, allow_downcast: bool = True,
            out_dtype: str = "") -> Verdict:
    """Compare one output with its float64 reference; the reason says what is wrong and where."""
    if tuple(out.shape) != tuple(ref.shape):
        return Verdict(False, f"shape {tuple(out.shape)} != reference {tuple(ref.shape)}")
    # compare where the reference lives (the GPU on a GPU machine): the output travels in
    # its own dtype, once its shape is known to be right, and is widened there
    r = ref.to(torch.float64)
    o = out.detach().to(r.device).to(torch.float64)
    ref_nan = torch.isnan(r)
    out_nan = torch.isnan(o)
    bad_nan = out_nan & ~ref_nan
    if bool(bad_nan.any()):
        n = int(bad_nan.sum())
        first = _index(bad_nan)
        return Verdict(
            False,
            f"{n} of {o.numel()} elements are NaN where the reference is finite (first at "
            f"{first}): outputs are NaN-poisoned before each call, so these were never written "
            f"or were computed from uninitialised memory",
            math.inf,
            math.inf,
            n,
        )
    if bool((ref_nan & ~out_nan).any()):
        return Verdict(False, "reference is NaN where the output is not", math.inf, math.inf, 1)
    finite = ~ref_nan
    r_inf = torch.isinf(r) & finite
    if bool((torch.isinf(o) & finite & (o != r)).any()) or bool((r_inf & (o != r)).any()):
        n = int(((torch.isinf(o) | r_inf) & (o != r) & finite).sum())
        return Verdict(False, f"{n} elements are +-Inf where the reference differs", math.inf,
                       math.inf, n)
    cmp = finite & ~r_inf
    rv, ov = r[cmp], o[cmp]
    diff, bound, norm_err = _errors(ov, rv, tol)
    over = diff > bound
    n_bad = int(over.sum())
    max_abs = float(diff.max()) if diff.numel() else 0.0
    if norm_err <= tol.norm and n_bad == 0:
        return Verdict(True, "", norm_err, max_abs, 0)
    parts = []
    if norm_err > tol.norm:
        parts.append(f"relative norm error {norm_err:.3g} > {tol.norm:.3g}")
    if n_bad:
        worst = int(torch.argmax(diff - bound))
        parts.append(
            f"{n_bad} of {rv.numel()} elements outside atol*rms+rtol*|ref| "
            f"(worst: got {float(ov[worst]):.6g}, want {float(rv[worst]):.6g})"
        )
    reason = "; ".join(parts)
    if out_dtype == "float32" and not allow_downcast and tol.norm < norm_err < 3e-2:
        reason += (
            "; an error of this size is what a TF32/fp16/bf16 downcast gives, and this target "
            "requires full float32 (set allow_tf32 = true in [evaluator] to permit it)"
        )
    return Verdict(False, reason, norm_err, max_abs, n_bad)


def _errors(
    ov: torch.Tensor, rv: torch.Tensor, tol: Tolerance
) -> tuple[torch.Tensor, torch.Tensor, float]:
    """Per-element error, its bound ``atol*rms(ref) + rtol*|ref|`` and the relative norm
    error, over matching float64 elements ``ov`` (output) and ``rv`` (reference)."""
    diff = (ov - rv).abs()
    ref_norm = float(torch.linalg.vector_norm(rv)) if rv.numel() else 0.0
    err_norm = float(torch.linalg.vector_norm(diff)) if diff.numel() else 0.0
    norm_err = err_norm / ref_norm if ref_norm > 0 else err_norm
    rms = ref_norm / math.sqrt(max(rv.numel(), 1))
    return diff, tol.atol * rms + tol.rtol * rv.abs(), norm_err


def bound_ratio(out: torch.Tensor, ref: torch.Tensor, tol: Tolerance) -> float:
    """How close ``out`` comes to failing ``compare``: the larger of the norm error over its
    bound and the worst element's error over its bound (1.0 sits on the bound). Finite
    reference elements only; used to show that a tolerance leaves honest code room."""
    r = ref.to(torch.float64)
    keep = torch.isfinite(r)
    if not bool(keep.any()):
        return 0.0
    diff, bound, norm_err = _errors(out.detach().to(r.device, torch.float64)[keep], r[keep], tol)
    return max(norm_err / tol.norm, float((diff / bound).max()))


def _index(mask: torch.Tensor) -> tuple[int, ...]:
    flat = int(torch.nonzero(mask.reshape(-1))[0])
    idx = []
    for size in reversed(mask.shape):
        idx.append(flat % size)
        flat //= size
    return tuple(reversed(idx))


def bitwise_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Same dtype, shape and bits (NaN == NaN when the bits agree), compared where ``a``
    lives (``b`` moves there once its dtype and shape agree)."""
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    a = a.detach().contiguous()
    b = b.detach().to(a.device).contiguous()
    if a.dtype.is_floating_point:
        view = {2: torch.int16, 4: torch.int32, 8: torch.int64}[a.element_size()]
        return bool(torch.equal(a.view(view), b.view(view)))
    return bool(torch.equal(a, b))


# digest(): two position-weighted sums of a tensor's 32-bit words modulo two primes (62 bits)
_DIGEST_PRIMES = (2_147_483_647, 2_147_483_629)
_DIGEST_WEIGHTS = ((1_103_515_245, 12_345), (69_069, 1))
_DIGEST_CHUNK = 1 << 22  # words per step: a 1 GB tensor takes 64 steps


def digest(t: Any) -> str:
    """A fingerprint of a tensor's dtype, shape and bytes, the same on any device.

    The bytes are read as 32-bit words; each of two sums weighs word ``i`` by
    ``(a*i + b) mod p`` and is taken modulo its prime ``p``, all in exact int64 arithmetic.
    Equal tensors give equal digests; any change of one word changes both sums. It stands
    in for sending a tensor back when only bitwise equality is asked (inputs after a call,
    a repeated call's output): a cross-entropy check wrote 2 GB of inputs-after-the-call
    for that (2.7 s of a 7.3 s evaluation on an NVIDIA H200, 2026-12-04). A non-tensor
    digests to its type's name."""
    if not isinstance(t, torch.Tensor):
        return f"not a tensor: {type(t).__name__}"
    flat = t.detach().contiguous().reshape(-1)
    raw = flat.view(torch.uint8) if flat.numel() else flat.new_empty(0, dtype=torch.uint8)
    n4 = raw.numel() // 4 * 4
    words = raw[:n4].view(torch.int32)
    tail = raw[n4:].to(torch.int64)
    sums = []
    for (a, b), p in zip(_DIGEST_WEIGHTS, _DIGEST_PRIMES, strict=True):
        total = torch.zeros((), dtype=torch.int64, device=raw.device)
        for start in range(0, words.numel(), _DIGEST_CHUNK):
            w = words[start:start + _DIGEST_CHUNK].to(torch.int64)
            idx = torch.arange(start, start + w.numel(), dtype=torch.int64, device=raw.device)
            # every factor is below 2^32 after the reductions: products stay below 2^63
            weight = (idx * a + b) % p
            total = (total + ((w % p) * weight % p).sum()) % p
        if tail.numel():  # the last 1-3 bytes, each weighed by its position
            pos = torch.arange(n4 + 1, n4 + 1 + tail.numel(), dtype=torch.int64,
                               device=raw.device)
            total = (total + (tail * pos).sum()) % p
        sums.append(int(total))
    shape = "x".join(str(d) for d in t.shape)
    return f"{str(t.dtype).removeprefix('torch.')}[{shape}]:{sums[0]:08x}{sums[1]:08x}"


def tolerances_from_config(cfg: Mapping[str, Any]) -> dict[str, Tolerance]:
    """Defaults, overridden per dtype by ``[evaluator.tolerances.<dtype>]``."""
    tols = dict(DEFAULT_TOLERANCES)
    for name, value in dict(cfg.get("tolerances", {})).items():
        if name not in FLOAT_DTYPES:
            raise ValueError(f"[evaluator.tolerances]: unknown dtype {name!r}")
        tols[name] = Tolerance.from_config(value, f"[evaluator.tolerances.{name}]", tols[name])
    return tols


# -- stress from the reference ----------------------------------------------------------
#
# A distribution stresses a kernel only where the problem is defined on it: a layer norm
# of inputs with -inf is NaN, a float16 GEMM of inputs near 300 overflows its output. So a
# target validates with every distribution on which its own reference stays finite (at
# the output dtype, with room to spare) and agrees with a float32 run of itself (the
# problem is well conditioned there); the others are dropped with the reason. A kernel
# that is only right on gentle inputs (a log-softmax without the max subtraction) then
# meets the inputs it is wrong on, whatever the target's origin.

SCREEN_SEEDS = (11, 12, 13)  # fixed: the same reference gives the same record
SCREEN_MAX_ELEMENTS = 1 << 20  # workloads screened on the CPU (inputs, all tensors)
OUTPUT_HEADROOM = 2.0  # the reference's largest output at most the dtype's max / this


@dataclass(frozen=True)
class ScreenWorkload:
    """One workload as the screen runs it: ``get_inputs(**args)``, ``Model(*init)``."""

    name: str
    args: Mapping[str, Any]
    init: Sequence[Any]
    param_dtype: torch.dtype | None = None


def _float32_output(reference: Any, init_inputs: Sequence[Any], case: Case) -> list[torch.Tensor]:
    """The reference run in float32 on the same rounded values (integer inputs kept)."""
    model = reference.Model(*init_inputs).float()
    if case.params:
        model.load_state_dict(
            {k: (v.float() if v.is_floating_point() else v) for k, v in case.params.items()}
        )
    inputs = [t.to(torch.float32) if isinstance(t, torch.Tensor) and t.is_floating_point()
              else t for t in case.inputs]
    with torch.no_grad():
        return as_list(model(*inputs))


def _screen_one(reference: Any, w: ScreenWorkload, dist: str, seed: int,
                tol32: Tolerance) -> str:
    """Why ``dist`` is no stress for this workload ('' when it is)."""
    where = f"workload {w.name}"
    try:
        case = make_case(reference, w.args, w.init, dist, seed, w.param_dtype)
    except AssertionError:
        return f"{where}: it draws only zeros at this dtype"
    try:
        refs = reference_output(reference, w.init, case)
        meta = expected_meta(reference, w.init, case)
    except Exception as exc:  # noqa: BLE001 - the reference's own code on these inputs
        return f"{where}: the reference raised {type(exc).__name__}: {exc}"
    for j, (ref, (_shape, dtype)) in enumerate(zip(refs, meta, strict=True)):
        bad = int((~torch.isfinite(ref)).sum())
        if bad:
            return (f"{where}: the float64 reference is not finite on it ({bad} of "
                    f"{ref.numel()} elements of output {j})")
        if dtype.is_floating_point and ref.numel():
            top, limit = float(ref.abs().max()), torch.finfo(dtype).max / OUTPUT_HEADROOM
            if top > limit:
                return (f"{where}: the reference's output {j} reaches {top:.3g}, too near "
                        f"the largest {str(dtype).removeprefix('torch.')} "
                        f"({torch.finfo(dtype).max:.3g})")
    try:
        runs = _float32_output(reference, w.init, case)
    except Exception as exc:  # noqa: BLE001 - an op without a float32 kernel, and so on
        return f"{where}: a float32 run of the reference raised {type(exc).__name__}: {exc}"
    for j, (out, ref) in enumerate(zip(runs, refs, strict=True)):
        v = compare(out, ref, tol32)
        if not v.ok:
            return (f"{where}: a float32 run of the reference disagrees with its float64 "
                    f"run (output {j}: {v.reason})")
    return ""


def screen(reference: Any, workloads: Sequence[ScreenWorkload],
           dists: Sequence[str] = DISTRIBUTIONS,
           tol32: Tolerance = DEFAULT_TOLERANCES["float32"]) -> dict[str, str]:
    """Each of ``dists`` -> '' when it is kept (on every workload and every screen seed the
    float64 reference is finite, fits the output dtype with OUTPUT_HEADROOM, and a float32
    run of the reference agrees with it within ``tol32``), else why it is dropped. Runs on
    the CPU: pass workloads of at most SCREEN_MAX_ELEMENTS input elements."""
    if not workloads:
        raise ValueError("no workload to screen the distributions on")
    out: dict[str, str] = {}
    for dist in dists:
        why = ""
        for w in workloads:
            for seed in SCREEN_SEEDS:
                why = _screen_one(reference, w, dist, seed, tol32)
                if why:
                    break
            if why:
                break
        out[dist] = why
    return out
