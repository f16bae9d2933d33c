"""Profile the norm programs at one workload, for Nsight Compute (``ncu``) or plain timing.

    python bench/norms_profile.py PROGRAM.py[:NAME=V,NAME=V] [PROGRAM2.py...] [--rows 16381]
        [--hidden 5120] [--calls 3] [--set NAME=VALUE] [--time 0]

Imports ``ModelNew`` from each PROGRAM.py (a LayerNorm or RMSNorm kernel file; knobs set by
``--set`` for all programs or by a ``:NAME=V,...`` suffix for one), draws a bf16 input on the
GPU and calls the model ``--calls`` times, synchronising after each; run it under ``ncu
--launch-skip 2 --launch-count 1`` with one program to read one warm call's counters
(registers, occupancy, achieved DRAM bandwidth, warp stall reasons). After the calls it
prints, per program, what the compiler reports for each compiled kernel (registers per
thread, spills, shared memory) and, with ``--time N``, the median of N calls (CUDA events,
L2 flushed before each) and the fraction of a device-to-device copy of the same bytes.
Needs torch and triton only.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
from pathlib import Path


def load(path: str, values: list[str], tag: int):
    spec = importlib.util.spec_from_file_location(f"norm_program_{tag}", Path(path))
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    for item in values:
        name, _, value = item.partition("=")
        setattr(mod, name, type(getattr(mod, name))(value))
    return mod


def compiled_kernels(mod) -> list[str]:
    """One line per compiled kernel of the module's jitted functions (Triton's own record)."""
    lines = []
    for name, obj in vars(mod).items():
        caches = getattr(obj, "device_caches", None)
        if not caches:
            continue
        for entry in caches.values():
            kcache = entry[0] if isinstance(entry, tuple) else entry
            for kernel in kcache.values():
                md = getattr(kernel, "metadata", None)
                lines.append(f"{name}: regs/thread {getattr(kernel, 'n_regs', '?')}, spills "
                             f"{getattr(kernel, 'n_spills', '?')}, shared "
                             f"{getattr(md, 'shared', '?')} B, warps "
                             f"{getattr(md, 'num_warps', '?')}, stages "
                             f"{getattr(md, 'num_stages', '?')}")
    return lines


def time_ms(torch, fn, reps: int) -> float:
    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    fn()
    out = []
    for _ in range(reps):
        flush.zero_()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        torch.cuda.synchronize()
        out.append(a.elapsed_time(b))
    return statistics.median(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("programs", nargs="+")
    ap.add_argument("--rows", type=int, default=16381)
    ap.add_argument("--hidden", type=int, default=5120)
    ap.add_argument("--calls", type=int, default=3)
    ap.add_argument("--set", action="append", default=[],
                    help="NAME=VALUE: a module constant (a knob) set before the calls")
    ap.add_argument("--time", type=int, default=0, help="median of this many timed calls")
    args = ap.parse_args()
    import torch

    x = None
    copy_ms = None
    for i, prog in enumerate(args.programs):
        path, _, suffix = prog.partition(":")
        mod = load(path, args.set + [s for s in suffix.split(",") if s], i)
        torch.manual_seed(0)
        model = mod.ModelNew(args.hidden).cuda()
        with torch.no_grad():
            for p in model.parameters():
                p.normal_()
        if x is None:
            x = torch.randn(args.rows, args.hidden, device="cuda", dtype=torch.bfloat16)
        with torch.no_grad():
            for _ in range(args.calls):
                model(x)
                torch.cuda.synchronize()
        for line in compiled_kernels(mod):
            print(f"{prog}: {line}", flush=True)
        if args.time:
            if copy_ms is None:
                dst = torch.empty_like(x)
                copy_ms = time_ms(torch, lambda d=dst, s=x: d.copy_(s), args.time)
            with torch.no_grad():
                ms = time_ms(torch, lambda m=model, s=x: m(s), args.time)
            print(f"{prog}: {args.rows}x{args.hidden} {ms:.4f} ms, {copy_ms / ms:.3f} of a "
                  f"copy ({copy_ms:.4f} ms)", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
