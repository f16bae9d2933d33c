"""What the boundary between the trusted harness and a candidate's process costs per call.

A warm sandboxed session (bubblewrap where it works, Landlock, rlimits) serves an identity
function; the trusted side times each round trip as evaluators do (``Reply.wall_s``:
from the request leaving to the whole answer arriving, encoding not counted). Reported per
argument size: the median and 90th percentile of the round trip, and the same function
called in-process, so the difference is the boundary's own cost.

    python bench/boundary_cost.py --out bench/results/boundary-cost.json

``--spin-ms`` opens the session with a spin (``spin_s``): each side busy-waits that long
for the next message before it blocks, which trades idle cores for latency.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from optimizer.sandbox import Sandbox, SandboxSettings  # noqa: E402

PROGRAM = "def echo(x):\n    return x\n\ndef noop():\n    return None\n"


def _pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))]


def raw_round_trip_us(n: int) -> tuple[float, float]:
    """A 5-byte ping-pong over a bare socketpair with a forked echo process (no sandbox,
    no framing): what the machine's scheduler and sockets cost at this moment."""
    import socket

    a, b = socket.socketpair()
    pid = os.fork()
    if pid == 0:  # the echo
        a.close()
        buf = bytearray(1 << 16)
        while True:
            k = b.recv_into(buf)
            if k == 0:
                os._exit(0)
            b.sendall(memoryview(buf)[:k])
    b.close()
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        a.sendall(b"hello")
        a.recv(64)
        times.append(time.perf_counter() - t0)
    a.close()
    os.waitpid(pid, 0)
    return statistics.median(times) * 1e6, _pct(times, 0.9) * 1e6


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path)
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--spin-ms", type=float, default=0.0,
                    help="each side's busy wait before it blocks (the session's spin_s)")
    args = ap.parse_args()
    rows = []
    raw_before = raw_round_trip_us(args.calls)
    print(f"{'bare socketpair (reference)':34s} median {raw_before[0]:9.1f} us  "
          f"p90 {raw_before[1]:9.1f} us", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "worktrees"
        (root / "c").mkdir(parents=True)
        (root / "c" / "prog.py").write_text(PROGRAM)
        settings = SandboxSettings(rw_root=root, preload=("numpy",), timeout_s=600)
        with Sandbox(settings) as sb:
            isolation = sb.isolation
            with sb.open_session("optimizer.sandbox.serve:functions",
                                 {"module": "prog.py", "functions": ["echo", "noop"]},
                                 workdir=root / "c", io_dir=root / "io",
                                 shm_bytes=64 << 20, spin_s=args.spin_ms / 1e3) as s:
                assert s.ok, s.error
                cases = [("no argument", None), ("float", 1.5),
                         ("1 KB array", np.ones(128)), ("64 KB array", np.ones(8192)),
                         ("1 MB array", np.ones(131072)),
                         ("8 MB array (64 x 32000 float32)",
                          np.ones((64, 32000), np.float32))]
                for name, value in cases:
                    big = value is not None and getattr(value, "nbytes", 0) >= 1 << 20
                    n = max(50, args.calls // (40 if big else 1))
                    msg = ({"op": "call", "fn": "noop"} if value is None else
                           {"op": "call", "fn": "echo", "args": [value]})
                    for _ in range(min(100, n)):
                        s.request(msg, timeout_s=60)
                    walls = [s.request(msg, timeout_s=60).wall_s for _ in range(n)]
                    local = []
                    for _ in range(n):
                        t0 = time.perf_counter()
                        (lambda x: x)(value)
                        local.append(time.perf_counter() - t0)
                    row = {"case": name, "calls": n,
                           "median_us": statistics.median(walls) * 1e6,
                           "p90_us": _pct(walls, 0.9) * 1e6,
                           "in_process_us": statistics.median(local) * 1e6}
                    rows.append(row)
                    print(f"{name:34s} median {row['median_us']:9.1f} us  "
                          f"p90 {row['p90_us']:9.1f} us  (in process "
                          f"{row['in_process_us']:.2f} us)", flush=True)
    raw_after = raw_round_trip_us(args.calls)
    print(f"{'bare socketpair, again':34s} median {raw_after[0]:9.1f} us  "
          f"p90 {raw_after[1]:9.1f} us", flush=True)
    if args.out:
        args.out.write_text(json.dumps({
            "bare_socketpair_us": {"before": raw_before, "after": raw_after},
            "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python "
                       f"{platform.python_version()}",
            "isolation": isolation, "spin_ms": args.spin_ms,
            "date": datetime.date.today().isoformat(),
            "load_average": os.getloadavg(),
            "command": " ".join(["python bench/boundary_cost.py", *sys.argv[1:]]),
            "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
