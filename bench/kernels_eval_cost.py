"""What one kernel evaluation costs, alone on the machine: per target, the sandbox's start,
the night's preparation (``KernelEvaluator.prepare``: validation cases, timed inputs and
references), then the seed and the target's first starts evaluated one after another in the
night's sandbox settings, each with its stages and cost metrics.

    python bench/kernels_eval_cost.py --out FILE.json [--targets softmax,gemm] [--starts 2]

Needs torch and triton only (no optuna, mlflow or git): it runs where a GPU night's engine
would, with one slot, so every figure is the evaluation's own time (a night with four slots
adds the wait for the device and the slots' contention). Results are written after every
target, so a run cut short keeps what it measured.
"""

from __future__ import annotations

import argparse
import datetime
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def measure(target: str, starts: int) -> dict:
    import torch

    from evaluators._base import EvalContext
    from evaluators.kernels import KernelEvaluator
    from optimizer.sandbox import Sandbox, SandboxSettings
    from optimizer.targets import load_target

    spec = load_target(ROOT / "targets" / "kernels" / target, ROOT)
    evaluator = KernelEvaluator(spec)
    gpu = torch.cuda.is_available()
    device = "cuda" if gpu else "cpu"
    out: dict = {"target": target, "device": device, "evaluations": []}
    with tempfile.TemporaryDirectory() as d:
        rw = Path(d) / "rw"
        rw.mkdir()
        # the engine's settings for this kind (optimizer/evaluation.py make_sandbox)
        settings = SandboxSettings(memory_mb=0 if gpu else 16384, timeout_s=spec.timeout_s,
                                   allow_gpu=gpu, rw_root=rw, preload=KernelEvaluator.preload,
                                   extra_ro=(spec.path,),
                                   extra_env=evaluator.sandbox_env(device))

        def context(key: str, sandbox: Sandbox) -> EvalContext:
            (rw / f"io-{key}").mkdir()
            (Path(d) / f"scratch-{key}").mkdir()
            return EvalContext(sandbox, seed=int(time.time() * 1000) % (1 << 31),
                               scratch=Path(d) / f"scratch-{key}", io_dir=rw / f"io-{key}",
                               device=device, timeout_s=spec.timeout_s,
                               cache_dir=Path(d) / "cache")

        with Sandbox(settings) as sandbox:
            t0 = time.perf_counter()
            sandbox.warm_up()
            out["sandbox_start_s"] = round(time.perf_counter() - t0, 3)
            t0 = time.perf_counter()
            evaluator.prepare(context("prepare", sandbox))
            out["prepare_s"] = round(time.perf_counter() - t0, 3)
            programs = [("seed", None), *((s, s) for s in spec.starts[:starts])]
            for name, start in programs:
                cand = rw / f"cand-{len(out['evaluations'])}"
                shutil.copytree(spec.path, cand)
                if start is not None:
                    files = spec.start_files(start)
                    for rel, text in files.items():
                        (cand / rel).write_text(text)
                t0 = time.perf_counter()
                res = evaluator.evaluate(cand, context(cand.name, sandbox))
                wall = time.perf_counter() - t0
                out["evaluations"].append({
                    "program": name, "state": res.state.value, "reason": res.reason[:200],
                    "wall_s": round(wall, 3),
                    "cost": {k: round(v, 3) for k, v in res.metrics.items()
                             if k.startswith(("stage_s/", "cost_s/"))}})
                print(f"{target:<14} {name:<28} {res.state.value:<8} {wall:6.2f} s  "
                      + " ".join(f"{k.split('/')[1]}={v:.2f}" for k, v in
                                 out["evaluations"][-1]["cost"].items()), flush=True)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--targets", default="softmax,rmsnorm,layernorm,cross_entropy,gemm")
    ap.add_argument("--starts", type=int, default=2, help="starts evaluated after the seed")
    args = ap.parse_args()
    import torch

    result: dict = {"device": (torch.cuda.get_device_name() if torch.cuda.is_available()
                               else "CPU"),
                    "date": datetime.date.today().isoformat(),
                    "command": " ".join(["python", "bench/kernels_eval_cost.py", *sys.argv[1:]]),
                    "targets": {}}
    for target in filter(None, args.targets.split(",")):
        result["targets"][target] = measure(target, args.starts)
        t = result["targets"][target]
        print(f"{target:<14} sandbox start {t['sandbox_start_s']:.2f} s, prepare "
              f"{t['prepare_s']:.2f} s", flush=True)
        args.out.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
