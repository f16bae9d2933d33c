"""Profile of one kernel correctness check: where the candidate-side call spends its time.

The kernel evaluator's correctness stage runs on the target's seed with the trusted
child session (``evaluators.kernels.child:session``) served in this process instead of
a sandbox, its check request under cProfile, so the functions that cost a check show by
name. A measuring tool only: the night always runs the child in its sandbox.

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
    value: dict | None
    ok: bool = True
    timed_out: bool = False
    reason: str = ""
    wall_s: float = 0.0


class _InProcessSession:
    """A stand-in for a sandbox session: the handler runs here, each request profiled
    (tensors are handed over as they are, without the channel's copies)."""

    def __init__(self, box: _InProcess, entry: str, payload: dict, workdir: Path,
                 io_dir: Path):
        self.box, self.workdir = box, workdir
        self.error, self.timed_out, self.ok, self.ready_s = "", False, True, 0.0
        mod, fn = entry.split(":")
        here = os.getcwd()
        os.chdir(workdir)
        try:
            self.handler = getattr(importlib.import_module(mod), fn)(payload, Path(io_dir))
        finally:
            os.chdir(here)

    def request(self, message: dict, *, timeout_s: float, **_: object) -> _Reply:
        here = os.getcwd()
        os.chdir(self.workdir)
        prof = cProfile.Profile()
        t0 = time.perf_counter()
        try:
            prof.enable()
            out = self.handler.handle(message)
        finally:
            prof.disable()
            os.chdir(here)
        wall = time.perf_counter() - t0
        self.box.profiles.append((str(message.get("op")), wall, pstats.Stats(prof)))
        return _Reply(out, wall_s=wall)

    def close(self) -> None:
        pass


class _InProcess:
    """A stand-in for the sandbox: the session's handler runs here, profiled."""

    def __init__(self) -> None:
        self.profiles: list[tuple[str, float, pstats.Stats]] = []

    def open_session(self, entry: str, payload: dict, *, workdir: Path, io_dir: Path,
                     **_: object) -> _InProcessSession:
        return _InProcessSession(self, entry, payload, workdir, io_dir)


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
