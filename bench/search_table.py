"""The best configurations of a `bench/kernels_h200.py` search, per target: the geometric
mean over the searched workloads and each workload's median (ms), fastest first.

    python bench/search_table.py RESULT.json [--top 8]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from pathlib import Path


def table(data: dict, top: int) -> list[str]:
    lines = []
    targets = dict.fromkeys(r["target"] for r in data.get("search", []))
    for target in targets:
        rows = [r for r in data["search"] if r["target"] == target and r["valid"] and r["ms"]]
        rows.sort(key=lambda r: statistics.fmean(map(math.log, r["ms"])))
        seed = next((r for r in rows if r["config"] == "seed"), None)
        bad = sum(1 for r in data["search"] if r["target"] == target and not r["valid"])
        lines.append(f"{target}: {len(rows)} valid, {bad} rejected")
        for r in rows[:top] + ([seed] if seed and seed not in rows[:top] else []):
            gm = math.exp(statistics.fmean(map(math.log, r["ms"])))
            per = " ".join(f"{m:.4f}" for m in r["ms"])
            lines.append(f"  {gm:.5f}  [{per}]  {r['config']}")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("result", type=Path)
    ap.add_argument("--top", type=int, default=8)
    args = ap.parse_args()
    print("\n".join(table(json.loads(args.result.read_text()), args.top)))


if __name__ == "__main__":
    main()
