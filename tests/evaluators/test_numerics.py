"""Floating-point validation: the checks fail the answers they exist to fail."""

import math
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from evaluators import numerics, timing
from evaluators.numerics import DEFAULT_TOLERANCES as TOL


def _softmax_ref(rows, cols, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, cols, generator=g, dtype=torch.float64)
    return torch.softmax(x, -1)


@settings(max_examples=20, deadline=None)
@given(rows=st.integers(1, 8), cols=st.integers(1024, 8192), seed=st.integers(0, 2**31 - 1))
def test_all_zeros_softmax_fails_although_every_element_is_tiny(rows, cols, seed):
    # flat logits (randn / 4) keep every probability far below the 5e-2 bound below; plain
    # randn put the largest one at 0.068 for one row of 1024 (seed 413)
    g = torch.Generator().manual_seed(seed)
    ref = torch.softmax(torch.randn(rows, cols, generator=g, dtype=torch.float64) / 4, -1)
    zeros = torch.zeros(rows, cols, dtype=torch.bfloat16)
    # an absolute per-element bound of 5e-2 alone would pass this
    assert float((zeros.double() - ref).abs().max()) < 5e-2
    v = numerics.compare(zeros, ref, TOL["bfloat16"])
    assert not v.ok and "relative norm error" in v.reason and v.norm_err == pytest.approx(1.0)


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_correct_rounding_passes_at_every_dtype(dtype):
    ref = _softmax_ref(16, 1000, 3) * 7 - 0.003
    out = ref.to(numerics.torch_dtype(dtype))
    v = numerics.compare(out, ref, TOL[dtype])
    assert v.ok, v.reason


def test_nan_where_reference_is_finite_names_unwritten_memory():
    ref = _softmax_ref(4, 64, 1)
    out = ref.float().clone()
    out[2, 5:] = float("nan")
    v = numerics.compare(out, ref, TOL["float32"])
    assert not v.ok and "never written" in v.reason and "(2, 5)" in v.reason


def test_float32_downcast_is_named():
    ref = _softmax_ref(8, 512, 2)
    out = ref.to(torch.bfloat16).float()
    v = numerics.compare(out, ref, TOL["float32"], allow_downcast=False, out_dtype="float32")
    assert not v.ok and "downcast" in v.reason
    allowed = numerics.compare(out, ref, TOL["float32"], allow_downcast=True,
                               out_dtype="float32")
    assert "downcast" not in allowed.reason


def test_shape_and_inf_mismatch():
    ref = torch.ones(3, 4, dtype=torch.float64)
    assert "shape" in numerics.compare(torch.ones(4, 3), ref, TOL["float32"]).reason
    bad = torch.ones(3, 4)
    bad[0, 0] = float("inf")
    assert "Inf" in numerics.compare(bad, ref, TOL["float32"]).reason


def test_a_wrong_shape_is_judged_before_the_output_moves_to_the_reference():
    """An output of any size is judged by its shape before a byte of it moves to where the
    reference lives (a GPU): a meta tensor, which has no data to move, shows it."""
    huge = torch.empty(1 << 20, 1 << 20, device="meta", dtype=torch.bfloat16)
    ref = torch.ones(3, 4, dtype=torch.float64)
    assert "shape" in numerics.compare(huge, ref, TOL["bfloat16"]).reason
    assert not numerics.bitwise_equal(ref.to(torch.bfloat16), huge)


def test_bitwise_equal_sees_one_ulp_and_accepts_equal_nans():
    a = torch.tensor([1.0, float("nan")])
    assert numerics.bitwise_equal(a, a.clone())
    b = a.clone()
    b[0] = torch.nextafter(torch.tensor(1.0), torch.tensor(2.0))
    assert not numerics.bitwise_equal(a, b)
    assert not numerics.bitwise_equal(a, a.double())


@pytest.mark.parametrize("dist", numerics.DISTRIBUTIONS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_distributions_are_fresh_and_never_zero(dist, dtype):
    g1, g2 = torch.Generator().manual_seed(1), torch.Generator().manual_seed(2)
    a = numerics.draw((17, 33), dtype, dist, g1)
    b = numerics.draw((17, 33), dtype, dist, g2)
    assert a.dtype == dtype and bool((a != 0).any())
    assert not torch.equal(a, b)
    if dist == "neginf_mask":
        assert bool(torch.isinf(a).any()) and bool(torch.isfinite(a).any(dim=-1).all())
    else:
        assert bool(torch.isfinite(a).all())


def test_tolerance_overrides_keep_dtype_defaults():
    tols = numerics.tolerances_from_config({"tolerances": {"bfloat16": {"norm": 1e-2}}})
    assert tols["bfloat16"].norm == 1e-2 and tols["bfloat16"].rtol == TOL["bfloat16"].rtol
    with pytest.raises(ValueError, match="unknown dtype"):
        numerics.tolerances_from_config({"tolerances": {"fp8": {}}})


def test_implausible_times_are_named():
    copy = 4000.0  # GB/s
    nbytes = 512 * 2**20  # 0.134 ms at copy bandwidth
    fast = timing.Samples((0.05,) * 10, (0.1,) * 10)
    assert "below the memory floor" in timing.implausible(fast, nbytes, copy)
    side = timing.Samples((0.15,) * 10, (1.2,) * 10)
    assert "side stream" in timing.implausible(side, nbytes, copy)
    honest = timing.Samples((0.14,) * 10, (0.19,) * 10)
    assert timing.implausible(honest, nbytes, copy) is None
    s = timing.summary(honest, nbytes, copy)
    assert s["frac_copy_bw"] == pytest.approx(nbytes / 0.14e-3 / 1e9 / copy)
    assert math.isclose(s["ms"], 0.14)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU")
def test_a_reference_computed_on_the_gpu_agrees_with_the_cpu_one():
    import importlib.util

    nm = numerics

    path = Path(__file__).resolve().parents[2] / "targets/kernels/cross_entropy/reference.py"
    spec = importlib.util.spec_from_file_location("ce_reference", path)
    ref = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ref)
    case = nm.make_case(ref, {"rows": 64, "vocab": 4099, "dtype": "bfloat16"},
                        list(ref.get_init_inputs()), "normal", 7, torch.bfloat16)
    cpu = nm.reference_output(ref, list(ref.get_init_inputs()), case)
    gpu = nm.reference_output(ref, list(ref.get_init_inputs()), case, "cuda")
    assert gpu[0].device.type == "cuda"
    assert torch.allclose(gpu[0].cpu(), cpu[0], rtol=1e-12, atol=1e-12)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU")
def test_a_case_drawn_on_the_gpu_is_the_same_for_the_same_seed():
    # the trusted side and the sandboxed child draw a workload's timed sets alike
    ref = _cross_entropy_reference()
    args = {"rows": 33, "vocab": 5003, "dtype": "bfloat16"}
    a, b, c = (numerics.make_case(ref, args, [], dist, seed, torch.bfloat16, "cuda")
               for dist, seed in (("wide", 11), ("wide", 11), ("wide", 12)))
    assert all(t.device.type == "cuda" for t in a.inputs)
    assert all(numerics.bitwise_equal(x, y) for x, y in zip(a.inputs, b.inputs, strict=True))
    assert not numerics.bitwise_equal(a.inputs[0], c.inputs[0])
    assert int(a.inputs[1].max()) < 5003  # the labels come from get_inputs, on the GPU


def test_a_case_drawn_on_the_cpu_is_the_same_for_the_same_seed():
    ref = _cross_entropy_reference()
    args = {"rows": 5, "vocab": 301, "dtype": "float32"}
    a, b = (numerics.make_case(ref, args, [], "offset", 3, torch.float32) for _ in range(2))
    assert all(numerics.bitwise_equal(x, y) for x, y in zip(a.inputs, b.inputs, strict=True))
    assert a.inputs[0].device.type == "cpu"


def _cross_entropy_reference():
    from evaluators.kernels.evaluator import load_reference

    return load_reference(Path(__file__).resolve().parents[2] / "targets/kernels/cross_entropy")


def test_cases_drawn_in_several_threads_at_once_are_the_cases_drawn_alone() -> None:
    """A template's integer inputs (cross-entropy labels) come from torch's global
    generators, which make_case seeds: threads that draw at once (a shared night's slots,
    building different targets' cases) must each get their own seed's values."""
    import threading
    import types

    def get_inputs(rows: int, vocab: int) -> list:
        return [torch.randn(rows, vocab), torch.randint(0, vocab, (rows,))]

    class Model(torch.nn.Module):
        def forward(self, logits, labels):  # type: ignore[no-untyped-def]
            return logits, labels

    ref = types.SimpleNamespace(get_inputs=get_inputs, Model=Model)
    args = {"rows": 512, "vocab": 1000}
    alone = {s: numerics.make_case(ref, args, [], "normal", s, None).inputs[1] for s in range(6)}
    wrong: list[int] = []

    def draw(seed: int) -> None:
        for _ in range(40):
            labels = numerics.make_case(ref, args, [], "normal", seed, None).inputs[1]
            if not torch.equal(labels, alone[seed]):
                wrong.append(seed)

    threads = [threading.Thread(target=draw, args=(s,)) for s in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not wrong, f"{len(wrong)} draws got another seed's labels"


@settings(max_examples=30, deadline=None)
@given(n=st.integers(1, 3000), pos=st.integers(0, 10**6), bit=st.integers(0, 15),
       dtype=st.sampled_from([torch.bfloat16, torch.float32, torch.int64, torch.uint8]))
def test_digest_sees_any_one_bit_and_nothing_else(n, pos, bit, dtype):
    """Equal bits give equal digests; one flipped bit anywhere (the tail bytes of a
    length that is no multiple of four included) changes it."""
    g = torch.Generator().manual_seed(n)
    x = (torch.randn(n, generator=g) * 100).to(dtype)
    d = numerics.digest(x)
    assert numerics.digest(x.clone()) == d
    raw = x.clone().view(torch.uint8)
    i = pos % raw.numel()
    raw[i] ^= 1 << (bit % 8)
    assert numerics.digest(raw.view(dtype)) != d


def test_digest_names_dtype_and_shape_and_swaps_count():
    x = torch.arange(12, dtype=torch.int32)
    assert numerics.digest(x) != numerics.digest(x.view(3, 4))  # same bytes, other shape
    assert numerics.digest(x) != numerics.digest(x.view(torch.float32))
    swapped = x.clone()
    swapped[[2, 3]] = swapped[[3, 2]]  # the same words in another order
    assert numerics.digest(swapped) != numerics.digest(x)
    assert numerics.digest(x[::2]) == numerics.digest(x[::2].contiguous())
    assert numerics.digest(3.0) == "not a tensor: float"
    assert numerics.digest(torch.zeros(0)) != numerics.digest(torch.zeros(0, dtype=torch.int8))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_tiny_and_special_values_are_what_their_names_say(dtype):
    g = torch.Generator().manual_seed(3)
    tiny = numerics.draw((64, 64), dtype, "tiny", g).double()
    scale = torch.finfo(dtype).tiny ** 0.25
    assert float(tiny.abs().max()) < 8 * scale and float(tiny.abs().median()) > scale / 8
    special = numerics.draw((64, 64), dtype, "special", g)
    zeros = special == 0
    assert bool(zeros.any()) and bool(torch.signbit(special[zeros]).any())  # -0.0 too
    sub = (special != 0) & (special.abs() < torch.finfo(dtype).tiny)
    assert bool(sub.any()), "no subnormal drawn"
    assert 0.05 < float((zeros | sub).double().mean()) < 0.2


class _Ref:
    """A stand-in reference module: ``Model`` applies ``fn`` to its inputs."""

    def __init__(self, fn, shape, dtype=torch.float32):
        class Model(torch.nn.Module):
            def forward(self, *xs):
                return fn(*xs)

        self.Model = Model
        self.get_inputs = lambda **_: [torch.randn(*shape, dtype=dtype)]
        self.get_init_inputs = lambda: []


def _screen(fn, shape=(8, 300), dtype=torch.float32):
    ref = _Ref(fn, shape, dtype)
    return numerics.screen(ref, [numerics.ScreenWorkload("w", {}, [], None)])


def test_the_screen_keeps_what_a_stable_reference_supports_and_says_why_not_the_rest():
    found = _screen(lambda x: torch.log_softmax(x, -1))
    assert {d for d, why in found.items() if not why} == {
        "normal", "uniform", "offset", "wide", "negative", "tiny", "special"}
    assert "not finite" in found["neginf_mask"]  # log(0) where the mask is


def test_the_screen_drops_inputs_a_float32_reference_cannot_agree_on():
    # exp without the max: float64 is finite at offset 300 (e^300 < 1.8e308), float32 is not
    found = _screen(lambda x: torch.exp(x) / torch.exp(x).sum(-1, keepdim=True))
    assert "float32 run of the reference disagrees" in found["offset"], found["offset"]
    assert not found["normal"]


def test_the_screen_drops_outputs_that_overflow_the_output_dtype():
    found = _screen(lambda x: x * 1000.0, dtype=torch.float16)
    assert "too near the largest float16" in found["offset"], found["offset"]
    assert not found["normal"] and not found["uniform"]
