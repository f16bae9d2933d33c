"""Simulation and evaluation speed of the routing kind.

    .venv/bin/python bench/routing_speed.py [--json bench/results/routing-speed.json]
    .venv/bin/python bench/routing_speed.py --only eval --tree /tmp/old   # another checkout

- CPU time of one in-process simulation per baseline policy on the Mooncake conversation
  hour (12,031 requests, 8 H200; best of --repeats, one core);
- the channel: the round trip of a session request that calls an empty function, and of a
  route() request to a policy that returns 0, both timed around ``session.request``;
- the wall time of one sandboxed evaluation (correctness + performance) of the nightly
  target's seed policy on the Mooncake hour and on the nightly workload (``--sandbox``:
  rlimits, a cold interpreter per session, or warm, the engine's zygote in bubblewrap;
  after a warm-up evaluation that caches the workload and the baselines; every measured
  evaluation is of a new program, a comment appended, so both of its sessions run).

``--tree`` measures the evaluations of another checkout with this script (e.g. the code
before a change: ``git archive HEAD | tar -x -C /tmp/old``); the channel is then skipped.
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MOONCAKE = ROOT.parent / "shared" / "data" / "traces" / "mooncake_conversation.jsonl"


def _tree() -> Path:
    if "--tree" in sys.argv:
        return Path(sys.argv[sys.argv.index("--tree") + 1]).resolve()
    return ROOT


TREE = _tree()
sys.path.insert(0, str(TREE))

from evaluators import get  # noqa: E402
from evaluators._base import EvalContext  # noqa: E402
from optimizer.sandbox import Sandbox, SandboxSettings  # noqa: E402
from optimizer.targets import Objective, TargetSpec, load_target  # noqa: E402


def _sandbox(kind: str, tmp: Path) -> Sandbox:
    if kind == "warm":  # the engine's: a warm zygote in bubblewrap (the trace bound read-only
        # for code that reads it in the sandbox, as the code before the boundary did)
        return Sandbox(SandboxSettings(rw_root=tmp, preload=("numpy",), timeout_s=120,
                                       extra_ro=(MOONCAKE.parent,)))
    return Sandbox(SandboxSettings(timeout_s=120, isolation="rlimits"))


def evaluation_s(spec: TargetSpec, repeats: int, kind: str) -> list[float]:
    """Wall seconds of ``repeats`` evaluations of new programs (the seed plus a comment)."""
    ev = get("routing")(spec)
    out = []
    with tempfile.TemporaryDirectory() as tmp, _sandbox(kind, Path(tmp)) as sb:
        io = Path(tmp) / "io"
        io.mkdir()
        ctx = EvalContext(sandbox=sb, seed=0, scratch=Path(tmp), io_dir=io, timeout_s=120)
        cand = Path(tmp) / "cand"
        shutil.copytree(spec.path, cand)
        source = (spec.path / "policy.py").read_text()
        res = ev.evaluate(cand, ctx)  # warm the trusted side's workload and baseline caches
        assert res.ok, res.reason
        for i in range(repeats):
            (cand / "policy.py").write_text(source + f"# evaluation {i}\n")
            start = time.perf_counter()
            res = ev.evaluate(cand, ctx)
            out.append(time.perf_counter() - start)
            assert res.ok, res.reason
    return out


def mooncake_spec() -> TargetSpec:
    seed = load_target(TREE / "targets/routing/global", TREE)
    settings = {"workload": {"kind": "trace", "path": str(MOONCAKE)},
                "pools": [{"accelerator": "H200", "count": 8}]}
    return TargetSpec(name="mooncake", kind="routing", path=seed.path, rel_path=seed.rel_path,
                      description="", editable=("policy.py",),
                      objectives=(Objective("ttft_p99_s"),), noise="deterministic",
                      evaluator=settings)


def channel_us(n: int = 5000) -> dict[str, float]:
    """Mean round trip (us) of an empty function call and of a route() request."""
    out = {}
    with tempfile.TemporaryDirectory() as tmp, Sandbox(
        SandboxSettings(rw_root=Path(tmp), preload=("numpy",), timeout_s=60)
    ) as sb:
        cand, io = Path(tmp) / "c", Path(tmp) / "io"
        cand.mkdir()
        io.mkdir()
        (cand / "prog.py").write_text("def f():\n    return 0\n")
        (cand / "policy.py").write_text("def route(request, view):\n    return 0\n")
        from evaluators.routing.api import RequestInfo, View
        from evaluators.routing.remote import route_message

        view = View()
        for name, value in {"n": 8, "block_tokens": 512, "speed": [1.0] * 8,
                            "accelerator": ["H200"] * 8, "pool": ["p"] * 8,
                            "region": ["local"] * 8, "price": [3.8] * 8,
                            "kv_capacity": [845642] * 8, "queue": [1] * 8,
                            "queued_tokens": [1000] * 8, "running": [3] * 8,
                            "kv_used": [0.2512345678] * 8, "prefix_blocks": [2] * 8,
                            "rtt_s": [0.0] * 8}.items():
            setattr(view, name, value)
        request = RequestInfo(5, 1.5, 12000, tuple(range(24)), 7, "local")  # Mooncake's mean
        regions: dict[str, int] = {}
        first = route_message(request, view, regions)
        later = route_message(request, view, regions)
        cases = [("empty_call", "optimizer.sandbox.serve:functions",
                  {"module": "prog.py", "functions": ["f"]}, None,
                  {"op": "call", "fn": "f", "args": []}),
                 ("route_request", "evaluators.routing.child:serve_policy",
                  {"module": "policy.py", "functions": ["route"]}, first,
                  {"op": "route", "d": later})]
        for name, entry, payload, hello, message in cases:
            with sb.open_session(entry, payload, workdir=cand, io_dir=io) as s:
                assert s.ok, s.error
                if hello is not None:
                    assert s.request({"op": "start"}, timeout_s=10).ok
                    assert s.request({"op": "route", "d": hello}, timeout_s=10).ok
                for _ in range(200):
                    s.request(message, timeout_s=10)
                start = time.perf_counter()
                for _ in range(n):
                    s.request(message, timeout_s=10)
                out[name] = round((time.perf_counter() - start) / n * 1e6, 1)
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--only", choices=("all", "sim", "eval"), default="all")
    ap.add_argument("--tree", type=Path, default=None)
    ap.add_argument("--sandbox", choices=("rlimits", "warm"), default="rlimits",
                    help="rlimits: a cold interpreter per session, no bubblewrap (the "
                         "figures before 2026-12-01); warm: the engine's zygote in bubblewrap")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    if not MOONCAKE.is_file():
        print(f"skipped: trace {MOONCAKE} not found (traces are not part of the project)")
        return 0
    result: dict[str, object] = {
        "workload": "mooncake_conversation (12,031 requests, 1 h)", "fleet": "8 x H200",
        "tree": str(TREE), "date": time.strftime("%Y-%m-%d"),
        "machine": f"{platform.machine()} {platform.processor()}, 2 cores shared, "
                   f"Python {platform.python_version()}",
    }
    if args.only in ("all", "sim"):
        from evaluators.routing.fleet import build_fleet
        from evaluators.routing.sim import simulate
        from evaluators.routing.workload import load_mooncake

        try:
            from evaluators.routing.baselines import load_policy
        except ImportError:  # the code before the session boundary kept it in child.py
            from evaluators.routing.child import load_policy  # type: ignore[no-redef]

        workload = load_mooncake(MOONCAKE)
        fleet = build_fleet([{"accelerator": "H200", "count": 8}])
        cpu: dict[str, float] = {}
        for path in sorted((TREE / "targets/routing/baselines").glob("*.py")):
            best = float("inf")
            for _ in range(args.repeats):
                route = load_policy(path)
                start = time.process_time()
                simulate(workload, fleet, route)
                best = min(best, time.process_time() - start)
            cpu[path.stem] = round(best, 3)
            print(f"{path.stem:20s} {best:.3f} s CPU")
        result["cpu_s_per_simulation"] = cpu
        if TREE == ROOT:
            result["channel_round_trip_us"] = rtt = channel_us()
            print(f"channel round trip: {rtt}")
    if args.only in ("all", "eval"):
        moon = evaluation_s(mooncake_spec(), args.repeats, args.sandbox)
        nightly = evaluation_s(load_target(TREE / "targets/routing/global", TREE), args.repeats,
                               args.sandbox)
        result["sandbox"] = args.sandbox
        result["mooncake_evaluation_wall_s"] = [round(x, 2) for x in moon]
        result["nightly_evaluation_wall_s"] = [round(x, 2) for x in nightly]
        print(f"Mooncake hour: one evaluation {statistics.median(moon):.2f} s wall (median of "
              f"{[round(x, 2) for x in moon]})")
        print(f"nightly routing_global: one evaluation {statistics.median(nightly):.2f} s wall "
              f"(median of {[round(x, 2) for x in nightly]})")
    if args.json:
        args.json.write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
