"""Where a kernel candidate's first calls spend their time (GPU): Triton's C helpers built
with the system compiler, the kernels' own compilation, and the launches.

For each kernel target, two fresh processes run the seed's ``ModelNew`` once per CUDA
workload of its target.toml, as the correctness check's first call does: the first with an
empty Triton cache (what every candidate's sandbox starts with), the second with the cache
the first left. Each process reports:

- ``import_s``: importing torch and triton; ``cuda_s``: the CUDA context;
- ``driver_s``: Triton's driver utilities (``cuda_utils``, a C module built with gcc on a
  cold cache);
- per workload: the first call (``first_s``), of which ``compile_s`` in
  ``triton.compiler.compile`` and ``build_s`` in C builds (launchers), and a second call.

    python bench/kernels_compile_cost.py [--targets softmax,gemm] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import tomllib
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
KERNELS = ROOT / "targets" / "kernels"


def child(target: str) -> dict:
    """In a fresh process: the costs above for one target's seed."""
    t0 = time.perf_counter()
    import torch
    import triton
    import triton.compiler.compiler as tcc
    import triton.runtime.build as build

    out: dict = {"import_s": time.perf_counter() - t0}
    dev = "cuda" if torch.cuda.is_available() else "cpu"  # cpu: the interpreter, a dry run
    sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)
    t0 = time.perf_counter()
    torch.zeros(1, device=dev).add_(1)
    sync()
    out["cuda_s"] = time.perf_counter() - t0
    spent = {"compile": 0.0, "build": 0.0}

    def timed(fn, key):  # noqa: ANN001, ANN202 - a thin wrapper
        def wrapper(*a, **k):  # noqa: ANN002, ANN003, ANN202
            s = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                spent[key] += time.perf_counter() - s
        return wrapper

    tcc.compile = timed(tcc.compile, "compile")
    import triton.runtime.jit as jit
    if getattr(jit, "compile", None) is not None:
        jit.compile = tcc.compile
    for name in ("_build", "compile_module_from_src", "_compile_so_from_src"):
        if hasattr(build, name):
            setattr(build, name, timed(getattr(build, name), "build"))
            break
    t0 = time.perf_counter()
    if dev == "cuda":
        _ = triton.runtime.driver.active.utils
    out["driver_s"] = time.perf_counter() - t0
    spec = tomllib.loads((KERNELS / target / "target.toml").read_text())
    sys.path.insert(0, str(KERNELS / target))
    import importlib.util

    def load(name: str, path: Path):  # noqa: ANN202
        s = importlib.util.spec_from_file_location(name, path)
        m = importlib.util.module_from_spec(s)
        s.loader.exec_module(m)
        return m

    ref = load("reference", KERNELS / target / "reference.py")
    kern = load("kernel", KERNELS / target / "kernel.py")
    rows = []
    for w in spec["evaluator"]["workloads"]:
        if w.get("device", "cuda") != ("cuda" if dev == "cuda" else "cpu") or w.get("skip"):
            continue
        args = dict(w["args"])
        init = list(w.get("init") or ref.get_init_inputs())
        torch.manual_seed(0)
        inputs = [x.to(dev) if isinstance(x, torch.Tensor) else x for x in ref.get_inputs(**args)]
        model = kern.ModelNew(*init).to(dev)
        pdt = w.get("param_dtype") or args.get("dtype")
        if pdt:
            model = model.to(getattr(torch, pdt))
        before = dict(spent)
        t0 = time.perf_counter()
        with torch.no_grad():
            model(*inputs)
        sync()
        first = time.perf_counter() - t0
        t0 = time.perf_counter()
        with torch.no_grad():
            model(*inputs)
        sync()
        rows.append({"workload": w["name"], "first_s": first,
                     "compile_s": spent["compile"] - before["compile"],
                     "build_s": spent["build"] - before["build"],
                     "second_s": time.perf_counter() - t0})
    out["workloads"] = rows
    out["first_calls_s"] = sum(r["first_s"] for r in rows)
    return out


def _gpu() -> bool:
    import torch

    return torch.cuda.is_available()


def measure(target: str, cache: str) -> dict:
    env = {**os.environ, "TRITON_CACHE_DIR": cache}
    if not _gpu():
        env["TRITON_INTERPRET"] = "1"
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, __file__, "--child", target], env=env,
                          capture_output=True, text=True, check=False)
    if done.returncode:
        return {"error": done.stderr[-2000:]}
    res = json.loads(done.stdout.strip().splitlines()[-1])
    res["process_s"] = time.perf_counter() - t0
    return res


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--child")
    ap.add_argument("--targets", default="softmax,rmsnorm,layernorm,cross_entropy,gemm")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "kernels-compile-cost.json"))
    a = ap.parse_args()
    if a.child:
        print(json.dumps(child(a.child)))
        return 0
    import torch

    result: dict = {"benchmark": "kernel seeds' first calls: cold vs warm Triton cache",
                    "date": date.today().isoformat(),
                    "device": torch.cuda.get_device_name() if torch.cuda.is_available()
                    else "no GPU", "command": "python bench/kernels_compile_cost.py",
                    "targets": {}}
    for t in a.targets.split(","):
        with tempfile.TemporaryDirectory() as cache:
            cold = measure(t, cache)
            warm = measure(t, cache)
        result["targets"][t] = {"cold": cold, "warm": warm}
        print(f"{t:14} cold: process {cold.get('process_s', 0):5.2f} s  driver "
              f"{cold.get('driver_s', 0):4.2f}  first calls {cold.get('first_calls_s', 0):5.2f}"
              f" (compile {sum(r['compile_s'] for r in cold.get('workloads', [])):5.2f}, "
              f"C builds {sum(r['build_s'] for r in cold.get('workloads', [])):4.2f})"
              f" | warm: driver {warm.get('driver_s', 0):4.2f} first calls "
              f"{warm.get('first_calls_s', 0):5.2f}", flush=True)
        if "error" in cold:
            print(cold["error"][-600:])
    Path(a.out).write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
