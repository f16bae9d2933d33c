"""The coinfer codec target's reference figures: every baseline codec and the seed at each
bit width, evaluated through the sandbox like any candidate (the default target model cut
after layer 4, the target's own prompts and gates), on the search prompts and on the
held-out ones.

    python bench/coinfer_codecs.py --out bench/results/coinfer-codecs-2026-12-05.json

The model is the speculative family's default target, trained into .optimizer/cache on first
use (about 65 s on 2 cores) or loaded from there.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import time
from pathlib import Path
from typing import Any

from optimizer.records import CandidateState
from optimizer.targets import load_target
from optimizer.workbench import Workbench

ROOT = Path(__file__).resolve().parents[1]
TARGET = ROOT / "targets" / "coinfer" / "codec"
KEYS = ("bytes_per_token", "vs_bf16", "kl_mean", "kl_p99", "top1_agreement",
        "greedy_agreement", "encode_cpu_us_per_token", "decode_cpu_us_per_token",
        "decode_cpu_s", "decode_budget_s")


def programs(bits: list[int]) -> dict[str, str]:
    out = {p.stem: p.read_text() for p in sorted((TARGET / "baselines").glob("*.py"))}
    seed = (TARGET / "codec.py").read_text()
    for b in bits:
        out[f"seed_bits{b}"] = re.sub(r"^BITS = \d+", f"BITS = {b}", seed, count=1,
                                      flags=re.M)
    return out


def figures(bench: Workbench, text: str, held_out: bool) -> dict[str, Any]:
    t0 = time.perf_counter()
    res = bench.confirm({"codec.py": text}) if held_out else bench.evaluate({"codec.py": text})
    row: dict[str, Any] = {"state": res.state.value, "reason": res.reason[:200],
                           "eval_s": round(time.perf_counter() - t0, 2)}
    row.update({k: round(float(res.metrics[k]), 7) for k in KEYS if k in res.metrics})
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--bits", type=int, nargs="*", default=[8, 7, 6, 5, 4, 3])
    args = ap.parse_args()
    target = load_target(TARGET, ROOT)
    rows: dict[str, Any] = {}
    with Workbench(target, cache_dir=ROOT / ".optimizer" / "cache") as bench:
        for name, text in programs(args.bits).items():
            search = figures(bench, text, held_out=False)
            held = (figures(bench, text, held_out=True)
                    if search["state"] == CandidateState.VALID.value else None)
            rows[name] = {"search": search, "held_out": held}
            print(name, search["state"], search.get("bytes_per_token"),
                  search.get("top1_agreement"), search["reason"][:80], flush=True)
    doc = {
        "about": "The coinfer codec target's baselines and its seed at each bit width "
                 "(bench/coinfer_codecs.py): the default speculative target cut after layer 4, "
                 "32 prompts of 96 tokens and 16 greedy tokens each, the target's gates.",
        "machine": f"{platform.machine()}, {len(os.sched_getaffinity(0))} cores, "
                   f"Python {platform.python_version()}",
        "date": time.strftime("%Y-%m-%d"),
        "settings": dict(target.evaluator),
        "codecs": rows,
    }
    args.out.write_text(json.dumps(doc, indent=1) + "\n")


if __name__ == "__main__":
    main()
