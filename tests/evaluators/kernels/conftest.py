"""Shared fixtures: a KernelEvaluator for a repository target and a fresh context."""

import random
from pathlib import Path

import pytest

from evaluators._base import EvalContext
from evaluators.kernels import KernelEvaluator
from optimizer.sandbox import Sandbox, SandboxSettings
from optimizer.targets import load_target

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def kernel_eval(tmp_path):
    """``run(target, source | None) -> EvalResult`` evaluating a kernel.py on the CPU."""

    def run(target: str, source: str | None = None, seed: int | None = None,
            runtime_only: bool = False, in_session: bool = False):
        spec = load_target(ROOT / "targets" / "kernels" / target, ROOT)
        cand = spec.path
        if source is not None:
            cand = tmp_path / f"cand{random.getrandbits(32)}"
            cand.mkdir()
            (cand / "kernel.py").write_text(source)
        io = tmp_path / f"io{random.getrandbits(32)}"
        io.mkdir()
        ctx = EvalContext(Sandbox(SandboxSettings(timeout_s=120)),
                          seed=20261130 if seed is None else seed,
                          scratch=tmp_path, io_dir=io, device="cpu", timeout_s=120)
        evaluator = KernelEvaluator(spec)
        if in_session:  # the calls in one process, as on a GPU
            evaluator.session_devices = ("cpu",)
        if runtime_only:  # the checks that run the kernel, past the static check
            if not in_session:
                return evaluator.correctness(cand, ctx)
            evaluator._sessions[id(ctx)] = None
            try:
                return evaluator.correctness(cand, ctx)
            finally:
                session = evaluator._sessions.pop(id(ctx))
                assert session is not None and session.ok  # the check went through it
                session.close()
        return evaluator.evaluate(cand, ctx)

    return run
