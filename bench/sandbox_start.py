"""Per-candidate start cost of the sandbox: cold Popen, cold bwrap, warm zygote.

Each sample is one ``Sandbox.call`` round trip (start, run a trivial entry, JSON back,
leftovers swept), measured on the engine's side with a monotonic clock. Two entries:
``noop`` returns at once; ``imports`` imports the preload modules (torch, triton) as a
candidate would, which the warm zygote has already done.

    .venv/bin/python bench/sandbox_start.py            # writes bench/results/sandbox-start.json
    .venv/bin/python bench/sandbox_start.py --n 10 --preload numpy --out /tmp/x.json
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from optimizer.sandbox import Sandbox, SandboxSettings
from optimizer.sandbox.bwrap import probe

ENTRY = """
import importlib


def noop(payload, io_dir):
    return {}


def imports(payload, io_dir):
    for name in payload["modules"]:
        importlib.import_module(name)
    return {}
"""


def _samples(sb: Sandbox, entry: str, payload: dict, workdir: Path, io: Path, n: int):
    out = []
    for _ in range(n):
        start = time.perf_counter()
        res = sb.call(entry, payload, workdir=workdir, io_dir=io, timeout_s=300)
        out.append(time.perf_counter() - start)
        if res.response is None:
            raise SystemExit(f"{entry} failed: {res.error}\n{res.stderr[-2000:]}")
    return out


def _summary(samples: list[float]) -> dict:
    ms = sorted(s * 1000 for s in samples)
    return {
        "n": len(ms),
        "median_ms": round(statistics.median(ms), 2),
        "min_ms": round(ms[0], 2),
        "max_ms": round(ms[-1], 2),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=20, help="samples per noop mode")
    ap.add_argument("--n-imports", type=int, default=5, help="samples per cold import mode")
    ap.add_argument("--preload", default="torch,triton")
    ap.add_argument("--out", type=Path, default=Path("bench/results/sandbox-start.json"))
    args = ap.parse_args()
    preload = tuple(filter(None, args.preload.split(",")))
    modes = [("popen-cold", "rlimits", False), ("bwrap-cold", "bwrap", False),
             ("zygote-warm", "bwrap", True), ("zygote-warm-rlimits", "rlimits", True)]  # fmt: skip
    if probe():
        modes = [m for m in modes if m[1] != "bwrap"]
    results: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="sbx-bench-") as tmp:
        rw = Path(tmp) / "worktrees"
        workdir, io = rw / "cand", rw / "io"
        workdir.mkdir(parents=True)
        io.mkdir()
        (workdir / "bench_entry.py").write_text(ENTRY)
        for name, isolation, warm in modes:
            settings = SandboxSettings(rw_root=rw, preload=preload if warm else (),
                                       isolation=isolation, warm=warm, memory_mb=32768)  # fmt: skip
            with Sandbox(settings) as sb:
                start = time.perf_counter()
                sb.warm_up()
                warm_up_s = time.perf_counter() - start
                _samples(sb, "bench_entry:noop", {}, workdir, io, 2)  # first-call effects
                row = {
                    "noop": _summary(_samples(sb, "bench_entry:noop", {}, workdir, io, args.n)),
                    "imports": _summary(_samples(
                        sb, "bench_entry:imports", {"modules": list(preload)}, workdir, io,
                        args.n if warm else args.n_imports,
                    )),
                }  # fmt: skip
                if warm:
                    row["zygote_start_s"] = round(warm_up_s, 2)
                results[name] = row
                print(name, json.dumps(row))
    bwrap = shutil.which("bwrap")
    version = subprocess.run([bwrap, "--version"], capture_output=True, text=True).stdout
    report = {
        "what": "Sandbox.call round trip of a trivial entry (noop) and of one that imports "
        "the preload modules (imports); median of n",
        "command": "python bench/sandbox_start.py " + f"--n {args.n} --preload {args.preload}",
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
        "bwrap": version.strip() if bwrap else None,
        "date": datetime.date.today().isoformat(),
        "preload": list(preload),
        "results": results,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
