"""Where a kernel check's bytes cost time: drawing a validation set, its digest, copying
an output to the host (pageable and pinned), and writing it (straight from host memory,
and with safetensors' own writer) to a folder on disk and to one in memory.

    python bench/kernels_transport_cost.py [--out FILE] [--rows 16381] [--cols 5120]

Runs on the GPU when there is one, else on the CPU (the figures then say little).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from evaluators import numerics  # noqa: E402
from evaluators.kernels.child import write_tensors  # noqa: E402
from evaluators.kernels.evaluator import load_reference  # noqa: E402


def _significant(x: float, digits: int = 4) -> float:
    """``x`` to ``digits`` significant figures (a fixed number of decimals rounds a slow
    step's rate to zero)."""
    return float(f"{x:.{digits}g}")


def _timed(fn, reps: int = 5) -> float:
    """Median seconds of ``fn`` over ``reps`` calls after one warm-up."""
    fn()
    out = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        out.append(time.perf_counter() - t0)
    return _significant(statistics.median(out))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path)
    ap.add_argument("--rows", type=int, default=16381)
    ap.add_argument("--cols", type=int, default=5120)
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args(argv)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    reference = load_reference(ROOT / "targets/kernels/rmsnorm")
    wl = {"rows": args.rows, "hidden": args.cols, "dtype": "bfloat16"}
    case = numerics.make_case(reference, wl, [args.cols, 1e-6], "normal", 1, torch.bfloat16,
                              device)
    x = case.inputs[0]
    nbytes = x.numel() * x.element_size()
    pinned = torch.empty(x.shape, dtype=x.dtype, pin_memory=device == "cuda")
    host = x.to("cpu")
    res: dict[str, object] = {"device": torch.cuda.get_device_name() if device == "cuda"
                              else "cpu", "bytes": nbytes, "torch": torch.__version__,
                              "seconds": {}}
    secs = res["seconds"]
    secs["make_case"] = _timed(lambda: numerics.make_case(
        reference, wl, [args.cols, 1e-6], "normal", 2, torch.bfloat16, device), args.reps)
    secs["digest"] = _timed(lambda: numerics.digest(x), args.reps)
    secs["to_cpu_pageable"] = _timed(lambda: x.to("cpu"), args.reps)
    secs["to_cpu_pinned"] = _timed(lambda: pinned.copy_(x), args.reps)
    from safetensors.torch import save_file

    folders = {"disk": Path(tempfile.mkdtemp(prefix="transport-", dir=ROOT))}
    if Path("/dev/shm").is_dir():
        folders["shm"] = Path(tempfile.mkdtemp(prefix="transport-", dir="/dev/shm"))
    for name, folder in folders.items():
        f = folder / "o.safetensors"
        secs[f"write_{name}"] = _timed(lambda f=f: write_tensors({"0": host}, f), args.reps)
        secs[f"save_file_{name}"] = _timed(lambda f=f: save_file({"0": host}, str(f)),
                                           args.reps)
        secs[f"device_to_file_{name}"] = _timed(lambda f=f: write_tensors({"0": x}, f),
                                                args.reps)
        for p in folder.iterdir():
            p.unlink()
        os.rmdir(folder)
    res["gb_per_s"] = {k: _significant(nbytes / v / 1e9, 3) for k, v in secs.items()
                       if k not in ("make_case", "digest") and v}
    text = json.dumps(res, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
