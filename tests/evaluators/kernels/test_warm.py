"""The zygote's warm-up for kernel candidates (evaluators.kernels.warm)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from evaluators.kernels.evaluator import KernelEvaluator

ROOT = Path(__file__).resolve().parents[3]

PROBE = """
import json, sys, time
import torch, triton
import evaluators.kernels.warm
from evaluators.kernels.audit import ForwardAudit, triton_launch_codes
before = set(sys.modules)
t0 = time.perf_counter()
with ForwardAudit(triton_launch_codes()) as audit:
    torch.empty(3)
print(json.dumps({"new": sorted(set(sys.modules) - before),
                  "audit_s": time.perf_counter() - t0,
                  "problems": audit.problems(),
                  "cuda_initialized": torch.cuda.is_initialized()}))
"""


def test_the_warm_sandbox_preloads_the_warm_up() -> None:
    assert "evaluators.kernels.warm" in KernelEvaluator.preload


def test_after_the_warm_up_the_first_audited_call_imports_nothing_and_no_cuda_starts() -> None:
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True,
                          text=True, check=True, cwd=ROOT)
    probe = json.loads(done.stdout.strip().splitlines()[-1])
    # without the warm-up the first audited call imported about 800 modules (sympy...)
    assert len(probe["new"]) < 20, probe["new"][:40]
    assert probe["problems"] == []
    assert probe["cuda_initialized"] is False  # the zygote forks: it must start no CUDA
