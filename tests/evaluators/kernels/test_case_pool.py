"""The night's validation cases: made once per workload, one of each distribution drawn
per evaluation, redrawn from their seeds by the candidate's process (no case crosses a
file)."""

from pathlib import Path

from evaluators._base import EvalContext
from evaluators.kernels import KernelEvaluator
from evaluators.kernels.evaluator import CASE_POOL
from optimizer.records import CandidateState
from optimizer.sandbox import Sandbox, SandboxSettings
from optimizer.targets import load_target

ROOT = Path(__file__).resolve().parents[3]


def test_cases_are_made_once_a_night_and_drawn_per_evaluation(tmp_path, monkeypatch):
    from evaluators.kernels import evaluator as kernel_evaluator

    # keep each evaluation's files to look at them (the check deletes them: next test)
    monkeypatch.setattr(kernel_evaluator, "_drop_tensor_files", lambda io_dir: None)
    spec = load_target(ROOT / "targets/kernels/softmax", ROOT)
    evaluator = KernelEvaluator(spec)
    with Sandbox(SandboxSettings(timeout_s=120)) as sandbox:
        for seed in range(4):
            io = tmp_path / f"io{seed}"
            io.mkdir()
            ctx = EvalContext(sandbox, seed=seed, scratch=tmp_path / f"s{seed}", io_dir=io,
                              device="cpu", timeout_s=120, cache_dir=tmp_path / "cache")
            # VALID: the inputs the child drew are bitwise the trusted side's (their
            # digests after each call are compared with the trusted side's)
            res = evaluator.correctness(spec.path, ctx)
            assert res.state is CandidateState.VALID, res.reason
            pools = evaluator._pools
            size = max(CASE_POOL, len(evaluator.config.distributions))
            assert pools and all(len(p.made) <= size for p in pools.values())
            names = sorted(p.name for p in io.iterdir())
            for wid in pools:
                # the parameters and A1, B, C's outputs cross files; no input set does,
                # nor A2's outputs or the inputs after a call (their digests do)
                assert f"{wid}.params.safetensors" in names
                assert {f"{wid}.out.{c}.safetensors" for c in ("A1", "B", "C")} <= set(names)
            assert not [n for n in names if ".post." in n or ".A2." in n
                        or n.split(".")[1] in ("A", "B", "C")]
    first = next(iter(evaluator._pools.values()))
    assert len(first.made) > 3  # later evaluations drew other cases of the pool


def test_a_check_leaves_no_tensor_files_behind(tmp_path):
    spec = load_target(ROOT / "targets/kernels/softmax", ROOT)
    evaluator = KernelEvaluator(spec)
    io = tmp_path / "io"
    io.mkdir()
    (io / "note.txt").write_text("kept")
    with Sandbox(SandboxSettings(timeout_s=120)) as sandbox:
        ctx = EvalContext(sandbox, seed=0, scratch=tmp_path / "s", io_dir=io, device="cpu",
                          timeout_s=120, cache_dir=tmp_path / "cache")
        res = evaluator.correctness(spec.path, ctx)
    assert res.state is CandidateState.VALID, res.reason
    assert not list(io.glob("*.safetensors"))  # inputs, outputs, inputs after the call
    assert (io / "note.txt").read_text() == "kept"
    assert all(pool.params is not None and pool.params.exists()
               for pool in evaluator._pools.values())  # the night's parameters stay
    # the trusted side keeps each case's references and digests, not its inputs: holding
    # them kept a night's every input set on the GPU (an 80 GB H100 ran out of memory)
    kept = [t for pool in evaluator._pools.values() for case, _, _ in pool.made.values()
            for t in case.inputs if hasattr(t, "device")]
    assert kept and all(t.device.type == "meta" for t in kept)


def test_clearing_the_io_folder_follows_no_link_and_trips_on_no_folder(tmp_path):
    from evaluators.kernels.evaluator import _drop_tensor_files

    io, outside = tmp_path / "io", tmp_path / "trusted.safetensors"
    io.mkdir()
    outside.write_bytes(b"the night's case")
    (io / "w0.params.safetensors").write_bytes(b"x")
    (io / "w0.out.A1.safetensors").symlink_to(outside)  # what a candidate could leave
    (io / "w0.out.B.safetensors").mkdir()
    _drop_tensor_files(io)
    assert outside.read_bytes() == b"the night's case"
    assert sorted(p.name for p in io.iterdir()) == ["w0.out.B.safetensors"]


def test_the_final_check_runs_every_case_of_the_pool(tmp_path):
    import sys

    sys.path.insert(0, str(Path(__file__).parent))
    from adversarial import CASES, CORRECT  # noqa: E402  (a test helper module)

    spec = load_target(ROOT / "targets/kernels/softmax", ROOT)
    wrong = next(src for name, _, _, src in CASES if name == "no_max_subtraction")
    with Sandbox(SandboxSettings(timeout_s=120)) as sandbox:
        def check(source: str, picks=None, final=False):
            cand = tmp_path / f"cand{len(list(tmp_path.iterdir()))}"
            cand.mkdir()
            (cand / "kernel.py").write_text(source)
            io = cand.with_name(cand.name + "-io")
            io.mkdir()
            ctx = EvalContext(sandbox, seed=1, scratch=tmp_path / "s", io_dir=io,
                              device="cpu", timeout_s=120, cache_dir=tmp_path / "cache")
            if final:
                return evaluator.final_check(cand, ctx)
            return evaluator.correctness(cand, ctx, picks=picks)

        evaluator = KernelEvaluator(spec)
        dists = list(evaluator.config.distributions)
        mild = tuple(dists.index(d) for d in ("normal", "uniform", "negative"))
        # wrong only where exp overflows without the row maximum (offset, wide inputs):
        # three mild distributions pass it, the final check over all of them does not
        assert check(wrong, picks=mild).state is CandidateState.VALID
        # an evaluation of its own meets every distribution, whatever its hidden seed
        assert check(wrong).state is CandidateState.INVALID
        final = check(wrong, final=True)
        assert final.state is CandidateState.INVALID and "final check" in final.reason
        ok = check(CORRECT, final=True)
        assert ok.state is CandidateState.VALID and f"all {len(dists)}" in ok.reason


def test_evaluations_in_several_slots_at_once_see_one_pool(tmp_path):
    """Four threads (four slots) check the RMSNorm seed at once, each with its own seed and
    context: all VALID, and the pool holds one parameter set, the one every case uses (a
    pool drawn from two threads once saved two, and the seed was judged INVALID)."""
    import threading

    spec = load_target(ROOT / "targets/kernels/rmsnorm", ROOT)
    evaluator = KernelEvaluator(spec)
    results: dict[int, object] = {}
    with Sandbox(SandboxSettings(timeout_s=180)) as sandbox:

        def check(seed: int) -> None:
            io = tmp_path / f"io{seed}"
            io.mkdir()
            ctx = EvalContext(sandbox, seed=seed, scratch=tmp_path / f"s{seed}", io_dir=io,
                              device="cpu", timeout_s=180, cache_dir=tmp_path / "cache")
            results[seed] = evaluator.correctness(spec.path, ctx)

        threads = [threading.Thread(target=check, args=(seed,)) for seed in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert all(r.state is CandidateState.VALID for r in results.values()), \
        [r.reason for r in results.values()]
    for pool in evaluator._pools.values():
        first = next(iter(pool.made.values()))[0]
        assert all(case.params is first.params for case, _, _ in pool.made.values())


def test_prepare_makes_every_case_before_the_first_evaluation(tmp_path):
    """What a GPU night does at its start (loop.prepare_night), here on the CPU
    workloads: every case of every pool with its references and files, so the first
    evaluation makes nothing; calling it again makes nothing twice."""
    spec = load_target(ROOT / "targets/kernels/rmsnorm", ROOT)
    evaluator = KernelEvaluator(spec)
    with Sandbox(SandboxSettings(timeout_s=120)) as sandbox:
        def context(seed: int) -> EvalContext:
            io = tmp_path / f"io{seed}"
            io.mkdir()
            return EvalContext(sandbox, seed=seed, scratch=tmp_path / f"s{seed}", io_dir=io,
                               device="cpu", timeout_s=120, cache_dir=tmp_path / "cache")

        evaluator.prepare(context(0))
        pools = dict(evaluator._pools)
        assert pools and all(len(p.made) == len(p) >= CASE_POOL for p in pools.values())
        made = {wid: dict(p.made) for wid, p in pools.items()}
        evaluator.prepare(context(1))
        assert {wid: dict(p.made) for wid, p in evaluator._pools.items()} == made
        res = evaluator.correctness(spec.path, context(2))
    assert res.state is CandidateState.VALID, res.reason
    assert {wid: dict(p.made) for wid, p in evaluator._pools.items()} == made
