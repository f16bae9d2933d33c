"""Profile of one kernel correctness check: where the candidate-side call spends its time.

The kernel evaluator's correctness stage runs on the target's seed with the trusted child
entry (``evaluators.kernels.child:check``) called in this process instead of a sandbox, under
cProfile, so the functions that cost a check show by name. A measuring tool only: the
night always runs the child in its sandbox.

    python bench/kernels_check_profile.py softmax [--top 30] [--out FILE]
"""

from __future__ import annotations

import argparse
import cProfile
import importlib
import io
import json
import os
import pstats
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


@dataclass
class _Reply:
    response: dict | None
    timed_out: bool = False
    error: str = ""
    wall_s: float = 0.0
    stderr: str = ""


class _InProcess:
    """A stand-in for the sandbox: the entry runs here, profiled."""

    def __init__(self) -> None:
        self.profiles: list[tuple[str, float, pstats.Stats]] = []

    def call(self, entry: str, payload: dict, *, workdir: Path, io_dir: Path,
             timeout_s: float) -> _Reply:
        mod, fn = entry.split(":")
        func = getattr(importlib.import_module(mod), fn)
        here = os.getcwd()
        os.chdir(workdir)
        prof = cProfile.Profile()
        t0 = time.perf_counter()
        try:
            prof.enable()
            out = func(payload, Path(io_dir))
        finally:
            prof.disable()
            os.chdir(here)
        wall = time.perf_counter() - t0
        self.profiles.append((entry, wall, pstats.Stats(prof)))
        return _Reply(out, wall_s=wall)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("target")
    ap.add_argument("--top", type=int, default=30)
    ap.add_argument("--out")
    a = ap.parse_args()
    import torch

    from evaluators._base import EvalContext
    from evaluators.kernels.evaluator import KernelEvaluator
    from optimizer.targets import load_target

    device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cpu":
        os.environ["TRITON_INTERPRET"] = "1"
    spec = load_target(Path("targets") / "kernels" / a.target, ROOT)
    ev = KernelEvaluator(spec)
    box = _InProcess()
    lines = []
    with tempfile.TemporaryDirectory() as tmp:
        cand = Path(tmp) / "cand"
        shutil.copytree(spec.path, cand)
        for i in range(2):  # the second check: the night's pools are made
            io_dir = Path(tmp) / f"io{i}"
            io_dir.mkdir()
            ctx = EvalContext(sandbox=box, seed=11 + i, scratch=Path(tmp), io_dir=io_dir,
                              device=device, cache_dir=Path(tmp) / "cache")
            before = set(sys.modules)
            t0 = time.perf_counter()
            res = ev.correctness(cand, ctx)
            total = time.perf_counter() - t0
            entry, wall, stats = box.profiles[-1]
            lines.append(f"## check {i + 1}: {res.state.value} {res.reason[:200]} "
                         f"total {total:.2f} s, child call {wall:.2f} s")
            new = sorted(set(sys.modules) - before)
            heads = sorted({".".join(m.split(".")[:3]) for m in new})
            lines.append(f"{len(new)} modules imported during the check: {heads[:80]}")
            lines.append(json.dumps({k: round(v, 3) for k, v in res.metrics.items()
                                     if k.startswith("cost_s")}))
            for order in ("cumulative", "tottime"):
                buf = io.StringIO()
                stats.stream = buf
                stats.sort_stats(order).print_stats(a.top)
                lines.append(f"### by {order}\n" + "\n".join(
                    ln for ln in buf.getvalue().splitlines() if ln.strip())[-6000:])
    text = "\n".join(lines)
    print(text)
    if a.out:
        Path(a.out).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
