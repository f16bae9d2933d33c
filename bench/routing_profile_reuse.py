"""Prefix reuse of a trace profile's workloads against the recorded trace's own windows.

    python bench/routing_profile_reuse.py [--trace PATH] [--profile NAME] [--json FILE]

For each workload, the share of prompt tokens one LRU prefix cache of 0.25M, 1M, 4M tokens
and of unbounded size would serve (leading blocks only, every request through the same
cache, prompts cut at 16,384 tokens as the deployment targets cut them): the recorded
trace's 600-second windows starting at 0, 600 and 1,800 s, and the profile's 600-second
workloads of seeds 3 and 4 with each way of choosing a follow-up's parent
(``parents = "latest"`` and ``"covering"``, evaluators/routing/profiles.py). It measures how
far the profile stands from the trace on the one figure a host-memory KV tier depends on.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

from evaluators.routing.deploy.capacity import clip
from evaluators.routing.profiles import generate, load_profile
from evaluators.routing.workload import load_mooncake, prefix_reuse

SIZES = (250_000, 1_000_000, 4_000_000, None)  # tokens; None: unbounded


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", default="../shared/data/traces/mooncake_conversation.jsonl")
    ap.add_argument("--profile", default="mooncake_conversation")
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    if not Path(args.trace).is_file():
        sys.exit(f"--trace {args.trace}: no such file (traces are not part of the project)")
    rows: dict[str, list[float]] = {}
    trace = load_mooncake(args.trace)
    for start in (0.0, 600.0, 1800.0):
        w = clip(trace.window(start, start + 600.0), 16384, 2048)
        rows[f"trace {start:g}-{start + 600:g} s"] = [prefix_reuse(w, s) for s in SIZES]
    profile = load_profile(args.profile)
    for parents in ("latest", "covering"):
        for seed in (3, 4):
            w = clip(generate(profile, seed, 600.0, parents=parents), 16384, 2048)
            rows[f"profile seed {seed}, parents={parents}"] = [prefix_reuse(w, s) for s in SIZES]
    print("workload                                 0.25M    1M      4M      unbounded")
    for name, r in rows.items():
        print(f"{name:40s} " + "  ".join(f"{x:.3f} " for x in r))
    if args.json:
        Path(args.json).write_text(json.dumps({
            "command": " ".join(["python bench/routing_profile_reuse.py", *sys.argv[1:]]),
            "date": time.strftime("%Y-%m-%d"), "machine": platform.processor() or "cpu",
            "cache_tokens": [s or "unbounded" for s in SIZES], "reuse": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
