"""What crosses between a kernel check's sandboxed process and the trusted side: output
files written straight from host memory, digests where only bits are asked for, and the
timed calls kept for checking."""

import random
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from evaluators import numerics
from evaluators.kernels import KernelEvaluator
from evaluators.kernels.child import _picks, write_tensors
from evaluators.kernels.evaluator import load_reference
from optimizer.records import CandidateState
from optimizer.targets import load_target

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.float16, torch.bfloat16,
                                   torch.int64, torch.int32, torch.int16, torch.int8,
                                   torch.uint8, torch.bool])
def test_written_files_read_back_bitwise_with_the_library_loader(tmp_path, dtype):
    g = torch.Generator().manual_seed(0)
    tensors = {"0": (torch.randn(37, 5, generator=g) * 50).to(dtype),
               "1": torch.tensor(7).to(dtype),  # 0-d
               "2": torch.zeros(0, 3, dtype=dtype),  # no elements
               "3": (torch.randn(8, 8, generator=g) * 50).to(dtype).t()}  # not contiguous
    write_tensors(tensors, tmp_path / "o.safetensors")
    back = load_file(str(tmp_path / "o.safetensors"))
    assert sorted(back) == sorted(tensors)
    for k, t in tensors.items():
        assert numerics.digest(back[k]) == numerics.digest(t), k


def test_a_non_tensor_output_is_written_as_nan(tmp_path):
    write_tensors({"0": "not a tensor", "1": torch.ones(2)}, tmp_path / "o.safetensors")
    back = load_file(str(tmp_path / "o.safetensors"))
    assert torch.isnan(back["0"]).all() and torch.equal(back["1"], torch.ones(2))


@pytest.mark.parametrize("blocks,n_sets,reps,checks", [(1, 3, 100, 3), (5, 3, 100, 3),
                                                       (2, 3, 100, 5), (1, 3, 100, 2),
                                                       (1, 3, 2, 3)])
def test_kept_calls_cover_every_set_of_each_block_before_any_twice(blocks, n_sets, reps, checks):
    per_set = max(1, reps // n_sets)
    for seed in range(20):
        picks = _picks(random.Random(seed), blocks, n_sets, reps, checks)
        for b in range(blocks):
            mine = [(j, k) for bb, j, k in picks if bb == b]
            assert len(mine) == min(checks, n_sets * per_set)
            assert len({j for j, _ in mine}) == min(checks, n_sets)
            assert all(0 <= k < per_set for _, k in mine)
    # which call of a set is kept differs from seed to seed
    assert len({frozenset(_picks(random.Random(s), 1, 3, 100, 3)) for s in range(20)}) > 10


def _timed_fixture(tmp_path):
    """The softmax evaluator with timed sets and references made here on the CPU (a GPU
    night draws them on the GPU), and one workload's job as its timing payload says."""
    spec = load_target(ROOT / "targets/kernels/softmax", ROOT)
    ev = KernelEvaluator(spec)
    reference = load_reference(spec.path)
    job = {"id": "w9", "name": "small", "args": {"rows": 4, "cols": 64, "dtype": "float32"},
           "init": [], "param_dtype": "float32", "dists": ["normal", "wide", "offset"]}
    sets = []
    for j, dist in enumerate(job["dists"]):
        case = numerics.make_case(reference, job["args"], [], dist, 100 + j, torch.float32)
        sets.append((case, numerics.reference_output(reference, [], case)))
    ev._timing_refs["w9"] = sets
    return ev, job, sets


def _answer(tmp_path, sets, j, name, scale=1.0):
    out = sets[j][1][0].float() * scale
    write_tensors({"0": out}, tmp_path / name)
    return out


def test_timed_outputs_digest_after_the_timing_is_checked_against_the_kept_call(tmp_path):
    ev, job, sets = _timed_fixture(tmp_path)
    outs = [_answer(tmp_path, sets, j, f"cap{j}.safetensors") for j in range(3)]
    captured = [{"file": f"cap{j}.safetensors", "set": j, "block": 0, "rep": j}
                for j in range(3)]

    def judge(after):
        return ev._check_timed_outputs(job, {"captured": captured, "after": after},
                                       tmp_path, "performance")

    same = [{"set": j, "digests": [numerics.digest(outs[j])]} for j in range(3)]
    assert judge(same) is None
    # one bit off after the timing: nondeterministic, though well within tolerance
    flipped = outs[1].clone()
    flipped.view(torch.int32)[0, 0] ^= 1
    other = [*same[:1], {"set": 1, "digests": [numerics.digest(flipped)]}, same[2]]
    res = judge(other)
    assert res.state is CandidateState.INVALID and "nondeterministic" in res.reason
    # a set without a kept call sends its outputs, which meet the reference
    _answer(tmp_path, sets, 2, "after2.safetensors", scale=1.5)
    res = judge([*same[:2], {"set": 2, "file": "after2.safetensors"}])
    assert res.state is CandidateState.INVALID and "after the timing" in res.reason
    # a digest for a set no kept call covers cannot be checked: the call is not believed
    res = ev._check_timed_outputs(job, {"captured": captured[:2], "after": same}, tmp_path,
                                  "performance")
    assert res.state is CandidateState.INVALID
    # a set missing after the timing
    res = judge(same[:2])
    assert res.state is CandidateState.FAILED
