"""Every kernel target: loads, its seed passes the static check and CPU correctness, and its
knobs are declared inside the EVOLVE-BLOCK (the contract each new kernel target inherits)."""

import re
from pathlib import Path

import pytest

from evaluators._base import EvalContext
from evaluators.kernels import NO_GPU, KernelEvaluator
from evaluators.kernels.static_checks import check_source
from optimizer.edits import evolve_regions
from optimizer.sandbox import Sandbox
from optimizer.targets import load_target

ROOT = Path(__file__).resolve().parents[3]
KERNELS = ROOT / "targets" / "kernels"
TARGETS = sorted(p.name for p in KERNELS.iterdir() if (p / "target.toml").is_file())
KNOB = re.compile(r"^[A-Z_][A-Z0-9_]* = .+# knob: ", re.M)


def test_the_five_kernel_targets_exist():
    assert {"softmax", "rmsnorm", "layernorm", "cross_entropy", "gemm"} <= set(TARGETS)


@pytest.mark.parametrize("name", TARGETS)
def test_target_shape(name):
    spec = load_target(KERNELS / name, ROOT)
    assert spec.kind == "kernel" and spec.editable == ("kernel.py",)
    assert spec.primary.metric == "time_ms" and spec.primary.minimize
    ev = KernelEvaluator(spec)
    devices = {w.device for w in ev.config.workloads if not w.skip}
    assert devices == {"cpu", "cuda"}, "needs interpreter-sized and GPU-sized workloads"
    src = (spec.path / "kernel.py").read_text()
    (start, end), = evolve_regions(src)
    knobs = [m.start() for m in KNOB.finditer(src)]
    assert knobs and all(start <= k < end for k in knobs)
    ref = (spec.path / "reference.py").read_text()
    assert "class Model" in ref and "def get_inputs" in ref and "def get_init_inputs" in ref


@pytest.mark.parametrize("name", TARGETS)
def test_seed_and_variants_pass_static_check(name):
    for path in [KERNELS / name / "kernel.py", *sorted((KERNELS / name).glob("variants/*.py"))]:
        assert check_source(path.read_text(), path.name) == [], path


@pytest.mark.parametrize("name", TARGETS)
def test_seed_is_correct_on_cpu(name, tmp_path):
    spec = load_target(KERNELS / name, ROOT)
    io = tmp_path / "io"
    io.mkdir()
    ctx = EvalContext(Sandbox(), seed=20261130, scratch=tmp_path, io_dir=io,
                      device="cpu", timeout_s=120)
    res = KernelEvaluator(spec).evaluate(spec.path, ctx)
    assert res.state.value == "PRUNED" and res.reason == NO_GPU, res.reason
    assert any(k.startswith("norm_err/") for k in res.metrics)


VARIANTS = sorted(str(p.relative_to(KERNELS)) for p in KERNELS.glob("*/variants/*.py"))


@pytest.mark.parametrize("rel", VARIANTS)
def test_variant_is_correct_on_cpu_under_the_runtime_audit(rel, tmp_path):
    # variants are searched by the benchmark, so they face the same sandboxed check as a seed
    # (the runtime torch audit included: no aten compute outside Triton)
    name = rel.split("/")[0]
    spec = load_target(KERNELS / name, ROOT)
    cand = tmp_path / "cand"
    cand.mkdir()
    (cand / "kernel.py").write_text((KERNELS / rel).read_text())
    io = tmp_path / "io"
    io.mkdir()
    ctx = EvalContext(Sandbox(), seed=20261130, scratch=tmp_path, io_dir=io,
                      device="cpu", timeout_s=120)
    res = KernelEvaluator(spec).evaluate(cand, ctx)
    assert res.state.value == "PRUNED" and res.reason == NO_GPU, res.reason
