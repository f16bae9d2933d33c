"""The kernel cheats of tests/adversarial against the kernel evaluator, on a GPU machine.

Each cheat is evaluated twice: through every stage (as a night would), and past the static
check (correctness and timing only), so that the runtime defences are seen to hold on
their own: the timed calls rotating over hidden input sets, the sample of timed outputs
and the re-validation after timing, the memory floor from the reference's outputs.

    python bench/adversarial_kernels.py --out bench/results/adversarial-kernels-h200.json

Needs torch and triton only (no MLflow, Optuna or git); without a GPU every timing is
PRUNED and only correctness speaks.
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from evaluators._base import EvalContext  # noqa: E402
from evaluators.kernels import KernelEvaluator  # noqa: E402
from optimizer.records import CandidateState, EvalResult  # noqa: E402
from optimizer.sandbox import Sandbox, SandboxSettings  # noqa: E402
from optimizer.targets import load_target  # noqa: E402

CHEATS = ROOT / "tests" / "adversarial" / "cheats" / "kernels"


def _device() -> str:
    import torch

    return torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"


_EVALUATORS: dict[Path, KernelEvaluator] = {}  # one per target, as in a night


def evaluate(target_dir: Path, source: str | None, root: Path, runtime_only: bool) -> EvalResult:
    spec = load_target(target_dir, ROOT)
    if target_dir not in _EVALUATORS:
        _EVALUATORS[target_dir] = KernelEvaluator(spec)
    evaluator = _EVALUATORS[target_dir]
    cand = root / "worktrees" / f"cand{time.monotonic_ns()}"
    shutil.copytree(target_dir, cand, ignore=shutil.ignore_patterns("__pycache__"))
    if source is not None:
        (cand / "kernel.py").write_text(source)
    io = root / "worktrees" / f"io{time.monotonic_ns()}"
    io.mkdir(parents=True)
    import torch

    device = "cuda" if torch.cuda.is_available() else "cpu"
    sandbox = Sandbox(SandboxSettings(timeout_s=600, rw_root=root / "worktrees",
                                      preload=("torch", "triton"), memory_mb=0,
                                      allow_gpu=device == "cuda",
                                      extra_env=evaluator.sandbox_env(device)))
    with sandbox:
        ctx = EvalContext(sandbox, seed=int(time.time()), scratch=root / "scratch", io_dir=io,
                          device=device, timeout_s=600)
        if not runtime_only:
            return evaluator.evaluate(cand, ctx)
        res = evaluator.correctness(cand, ctx)
        return res if not res.ok else evaluator.performance(cand, ctx)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--only", default="", help="comma-separated cheat names")
    args = ap.parse_args()
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for target in sorted(p for p in CHEATS.iterdir() if p.is_dir()):
            target_dir = ROOT / "targets" / "kernels" / target.name
            seed = evaluate(target_dir, None, root, runtime_only=False)
            rows[f"{target.name}/seed"] = {"state": seed.state.value, "reason": seed.reason,
                                           "time_ms": seed.metrics.get("time_ms")}
            print(f"{target.name}/seed: {seed.state.value} {seed.metrics.get('time_ms')}",
                  flush=True)
            for cheat in sorted(p for p in target.iterdir() if p.is_dir()):
                if args.only and cheat.name not in args.only.split(","):
                    continue
                source = (cheat / "kernel.py").read_text()
                for mode in ("all stages", "past the static check"):
                    t0 = time.perf_counter()
                    res = evaluate(target_dir, source, root, mode != "all stages")
                    row = {"state": res.state.value, "reason": res.reason[:400],
                           "stage": res.stage, "time_ms": res.metrics.get("time_ms"),
                           "seconds": round(time.perf_counter() - t0, 1)}
                    rows[f"{target.name}/{cheat.name} ({mode})"] = row
                    print(f"{target.name}/{cheat.name} ({mode}): {row['state']} "
                          f"{row['time_ms']} {row['reason'][:160]}", flush=True)
    valid = CandidateState.VALID.value
    won = [k for k, v in rows.items() if "/seed" not in k and v["state"] == valid]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({
        "device": _device(), "date": datetime.date.today().isoformat(),
        "host": platform.node(), "command": "python bench/adversarial_kernels.py --out ...",
        "rows": rows, "valid_cheats": won}, indent=1))
    print(f"{len(won)} cheat evaluations came out VALID: {won}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
