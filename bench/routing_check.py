"""A routing policy through its target's sweep and final check: the per-workload table.

    .venv/bin/python bench/routing_check.py targets/routing/global [policy.py] \
        [--json bench/results/routing-x.json] [--md bench/results/routing-x.md]

Builds the target's evaluator, evaluates the policy (the target's seed by default, or a
night's candidate: `git show <branch>:targets/routing/global/policy.py > /tmp/p.py`) in the
sandbox over the training set, then runs the final check a winner passes before its pull
branch (every held-out workload where the baselines differ by more than 5% must be won)
and prints the table the pull branch would carry.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from evaluators import get  # noqa: E402
from evaluators._base import EvalContext  # noqa: E402
from optimizer.sandbox import Sandbox, SandboxSettings  # noqa: E402
from optimizer.targets import load_target  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("target", type=Path)
    ap.add_argument("policy", type=Path, nargs="?", default=None)
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--md", type=Path, default=None)
    ap.add_argument("--label", default="", help="what the policy is (for the result file)")
    args = ap.parse_args()
    spec = load_target(args.target.resolve(), ROOT)
    policy = args.policy or spec.path / spec.editable[0]
    tmp = Path(tempfile.mkdtemp(prefix="routing-check-"))
    try:
        cand = tmp / "cand"
        cand.mkdir()
        shutil.copyfile(policy, cand / spec.editable[0])
        ev = get(spec.kind)(spec)
        ev.stop_at_first_loss = False  # the whole table, also for a policy that loses
        with Sandbox(SandboxSettings(timeout_s=600)) as sandbox:
            ctx = EvalContext(sandbox=sandbox, seed=0, scratch=tmp, io_dir=tmp / "io",
                              timeout_s=600)
            start = time.perf_counter()
            res = ev.evaluate(cand, ctx)
            if not res.ok:
                print(f"{res.state.name}: {res.reason}")
                return 1
            final = ev.final_check(cand, ctx)
            took = time.perf_counter() - start
        if final is None:
            print("this target has no held-out sweep")
            return 1
        text = final.artifacts["evidence.md"]
        verdict = ("passes: a pull branch would be published" if final.ok
                   else "fails: no pull branch")
        print(text)
        print(f"final check {verdict}: {final.reason}")
        print("training objective: " + ", ".join(
            f"{k} {res.metrics[k]:.4g}" for k in ("vs_baselines", "vs_baselines_gmean",
                                                  "vs_baselines_worst")))
        machine = f"{platform.machine()}, {os.cpu_count()} CPU cores, no GPU"
        if args.md:
            args.md.write_text(
                f"# {spec.name}: {args.label or policy.name} against the best production "
                f"baseline per workload\n\n{time.strftime('%Y-%m-%d')}, {machine}; "
                f"`bench/routing_check.py {args.target} ...` ({took:.0f} s).\n\n"
                f"{text}\nFinal check {verdict}: {final.reason}\n")
        if args.json:
            args.json.write_text(json.dumps({
                "target": spec.name, "policy": args.label or str(policy),
                "date": time.strftime("%Y-%m-%d"), "machine": machine,
                "training": {k: v for k, v in res.metrics.items()
                             if k.startswith(("vs_", "ttft_p99_s/", "slo_attainment/"))},
                "final_check": {"ok": final.ok, "reason": final.reason},
                "table": text, "seconds": round(took, 1)}, indent=1, sort_keys=True) + "\n")
        return 0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
