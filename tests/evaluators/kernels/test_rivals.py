"""The production rivals (evaluators/kernels/rivals.py): every target and library has a row
or a reason, each rival has its reference's constructor and parameters, and those that run
in the Triton interpreter give the reference's outputs. Liger-Kernel is optional
(``pip install -c constraints.txt -e '.[rivals]'``); without it those tests skip."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from evaluators import numerics
from evaluators.kernels import rivals
from evaluators.kernels.evaluator import load_reference

ROOT = Path(__file__).resolve().parents[3]
TARGETS = ROOT / "targets" / "kernels"
HAS_LIGER = importlib.util.find_spec("liger_kernel") is not None
needs_liger = pytest.mark.skipif(not HAS_LIGER, reason="liger-kernel is not installed (an "
                                 "optional dependency: pip install -e '.[rivals]')")


def test_every_target_and_library_has_a_row_or_a_reason() -> None:
    t = rivals.table("cpu")
    assert sorted(t) == sorted(p.name for p in TARGETS.iterdir() if (p / "target.toml").exists())
    for target, row in t.items():
        assert set(row) == set(rivals.LIBRARIES), target
    assert all(t["gemm"].values())  # no rival: each says why
    assert "cuBLAS" in t["gemm"]["liger"]
    assert "CUDA only" in t["rmsnorm"]["flashinfer"]


def test_a_missing_library_is_named_with_why_it_is_missing(monkeypatch: pytest.MonkeyPatch
                                                             ) -> None:
    rival = rivals.find("rmsnorm", "quack")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    why = rivals.unavailable(rival, "cuda")
    if importlib.util.find_spec("quack") is None:
        assert why.startswith("not installed") and "CUTLASS DSL" in why
    with pytest.raises(KeyError, match="no rival"):
        rivals.find("gemm", "liger")


@pytest.mark.parametrize("rival", rivals.RIVALS, ids=lambda r: f"{r.target}-{r.name}")
def test_each_rival_has_its_references_constructor_and_parameters(rival: rivals.Rival) -> None:
    ref = load_reference(TARGETS / rival.target)
    init = ref.get_init_inputs()
    mine = rivals.rival_class(rival.target, rival.name)(*init)
    assert sorted(mine.state_dict()) == sorted(ref.Model(*init).state_dict())


_INTERPRETED = """
import sys
import torch
from evaluators import numerics
from evaluators.kernels import rivals
from evaluators.kernels.evaluator import load_reference
from pathlib import Path

target = sys.argv[1]
rival = rivals.find(target, "liger")
assert rivals.unavailable(rival, "cpu") == "", rivals.unavailable(rival, "cpu")
ref = load_reference(Path("targets/kernels") / target)
args = ({"rows": 5, "cols": 130, "dtype": "float32"} if target == "softmax" else
        {"rows": 3, "vocab": 1000, "dtype": "float32"})
for dist, seed in (("normal", 1), ("offset", 2), ("wide", 3)):
    case = numerics.make_case(ref, args, [], dist, seed, torch.float32)
    want = ref.Model()(*[t.double() if t.is_floating_point() else t for t in case.inputs])
    with torch.no_grad():
        got = rivals.rival_class(target, "liger")()(*case.inputs)
    v = numerics.compare(got, want, numerics.DEFAULT_TOLERANCES["float32"])
    assert v.ok, (dist, v.reason)
print("ok")
"""


@needs_liger
@pytest.mark.parametrize("target", ["softmax", "cross_entropy"])
def test_liger_gives_the_references_outputs_in_the_interpreter(target: str) -> None:
    """In a process of its own: Triton reads TRITON_INTERPRET when a kernel is defined, and
    this one's may already have imported Liger's kernels for the GPU."""
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    res = subprocess.run([sys.executable, "-c", _INTERPRETED, target], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0 and res.stdout.strip() == "ok", res.stderr[-2000:]


@needs_liger
def test_liger_norms_say_why_they_do_not_run_in_the_interpreter() -> None:
    for target in ("rmsnorm", "layernorm"):
        why = rivals.unavailable(rivals.find(target, "liger"), "cpu")
        assert "interpreter" in why and "CUDA only" in why


@pytest.mark.gpu
@needs_liger
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("target", ["rmsnorm", "layernorm", "softmax", "cross_entropy"])
def test_liger_gives_the_references_outputs_on_a_gpu(target: str) -> None:
    ref = load_reference(TARGETS / target)
    init = ref.get_init_inputs()
    args = {"rows": 64, "dtype": "bfloat16", **({"cols": 4096} if target == "softmax" else
                                               {"vocab": 32000} if target == "cross_entropy"
                                               else {"hidden": init[0]})}
    case = numerics.make_case(ref, args, init, "normal", 1, torch.bfloat16)
    model = ref.Model(*init).double()
    want = model(*[t.double() if t.is_floating_point() else t for t in case.inputs])
    mine = rivals.rival_class(target, "liger")(*init).cuda().to(torch.bfloat16)
    with torch.no_grad():
        got = mine(*[t.cuda() for t in case.inputs])
    dt = str(got.dtype).removeprefix("torch.")
    assert numerics.compare(got.cpu(), want, numerics.DEFAULT_TOLERANCES[dt]).ok
