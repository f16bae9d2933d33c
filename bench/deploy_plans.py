"""Capacity per dollar of the deploy_instance target's seed, baselines and grid, per workload.

    python bench/deploy_plans.py [--target targets/routing/deploy_instance] [--json FILE]
        [--budgets 1536 1792 ...] [--bisect-steps N] [--candidate NAME=plan.py[@K=V,...] ...]
        [--trace ../shared/data/traces/mooncake_conversation.jsonl ... --windows 0 1800]

In-process (the seed and the baselines are the project's own files), the evaluator's
settings, simulations and bisection; prints one table per workload and writes the figures
to FILE. ``--budgets`` adds the seed's plan with each other token budget per step (values
between the grid's points); ``--bisect-steps`` overrides the target's bisection (finer
steps tell apart plans the target's resolution ties). ``--candidate`` adds a plan file (a
night's winner, say) as a row, with module constants set after ``@`` (``@HOST_GIB_PER_GPU=0``
takes one knob back); ``--trace`` adds held-out workloads: 600-second windows of a
recorded trace starting at each of ``--windows``, or with several traces their windows
served together (a mix); the traces are not part of the project, and the bench stops with
the reason when one is absent.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import platform
import sys
import time
from pathlib import Path

from evaluators.routing.deploy.evaluator import DeployEvaluator
from evaluators.routing.deploy.plan import check_plan
from optimizer.targets import load_target

ROOT = Path(__file__).resolve().parents[1]


def _module(path: Path):  # noqa: ANN202
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default="targets/routing/deploy_instance")
    ap.add_argument("--json", default="")
    ap.add_argument("--budgets", type=int, nargs="*", default=[])
    ap.add_argument("--bisect-steps", type=int, default=0)
    ap.add_argument("--candidate", nargs="*", default=[], metavar="NAME=PATH")
    ap.add_argument("--trace", nargs="*", default=[])
    ap.add_argument("--windows", type=float, nargs="*", default=[0.0])
    args = ap.parse_args()
    overrides: dict = {"evaluator": {}}
    if args.bisect_steps:
        overrides["evaluator"]["bisect_steps"] = args.bisect_steps
    if args.trace:
        traces = [Path(t).resolve() for t in args.trace]
        for given, trace in zip(args.trace, traces, strict=True):
            if not trace.is_file():
                sys.exit(f"--trace {given}: no such file (traces are not part of the project)")
        held = list(load_target(ROOT / args.target, ROOT).evaluator.get("held_out", []))
        windows = [[{"kind": "trace", "path": str(t), "start_s": a, "end_s": a + 600.0}
                    for t in traces] for a in args.windows]
        overrides["evaluator"]["held_out"] = held + [
            {"name": f"trace-{a:g}s", **parts[0]} if len(parts) == 1 else
            {"name": f"traces-{a:g}s", "kind": "mix", "parts": parts}
            for a, parts in zip(args.windows, windows, strict=True)]
    target = load_target(ROOT / args.target, ROOT, overrides)
    ev = DeployEvaluator(target)
    seed = _module(target.path / "plan.py")
    plans = {"seed": check_plan(seed.plan(), ev.limits), **ev.baseline_plans}
    for item in args.candidate:
        name, _, rest = item.partition("=")
        path, _, sets = rest.partition("@")
        module = _module(Path(path))
        for pair in filter(None, sets.split(",")):
            key, _, value = pair.partition("=")
            setattr(module, key, type(getattr(module, key))(value))
        plans[name] = check_plan(module.plan(), ev.limits)
    for budget in args.budgets:
        raw = seed.plan()
        for c in raw["classes"]:
            c["max_num_batched_tokens"] = c["chunk"] = budget
            c["max_num_seqs"] = min(c["max_num_seqs"], budget)
        plans[f"seed_b{budget}"] = check_plan(raw, ev.limits)
    out: dict[str, dict[str, dict[str, float]]] = {}
    t0 = time.perf_counter()
    for label in (ev.cfg.train, *ev.cfg.held_out):
        rows = {name: ev._capacity(f"bench:{name}", plan, label) for name, plan in plans.items()}
        out[label] = {name: {"capacity_per_usd": c.per_usd, "scale": c.scale, "rps": c.rps,
                             "gpus": c.gpus, "ttft_p90_s": c.metrics["ttft_p90_all_s"],
                             "tbt_p99_s": c.metrics["tbt_p99_s"],
                             "prefix_hit_ratio": c.metrics["prefix_hit_ratio"],
                             "host_hit_ratio": c.metrics["host_hit_ratio"]}
                        for name, c in rows.items()}
        print(f"\n{label}:")
        for name, r in sorted(out[label].items(), key=lambda kv: -kv[1]["capacity_per_usd"]):
            print(f"  {name:36s} {r['capacity_per_usd']:.4f} req/s per $/h  x{r['scale']:.3f}"
                  f"  TTFT p90 {r['ttft_p90_s']:.2f} s  TBT p99 {r['tbt_p99_s']:.3f} s"
                  f"  hits {r['prefix_hit_ratio']:.2f} (host {r['host_hit_ratio']:.2f})")
    took = time.perf_counter() - t0
    print(f"\n{len(plans)} plans x {len(out)} workloads in {took:.1f} s")
    if args.json:
        Path(args.json).write_text(json.dumps({
            "command": " ".join(["python bench/deploy_plans.py", *sys.argv[1:]]),
            "date": time.strftime("%Y-%m-%d"), "machine": platform.processor() or "cpu",
            "seconds": round(took, 1), "workloads": out}, indent=1) + "\n")


if __name__ == "__main__":
    main()
