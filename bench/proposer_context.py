"""The LLM proposer's own context policies compared: tokens and cache per call, per policy.

The agent-harness family replays context policies on agents' trajectories; this script
turns the same question on the project's own proposer. For each policy of
``optimizer/proposers/context.py`` it plays the simulated night of
``bench/prompt_cache_share.py`` (the real prompt builder and archive on every built-in
target, scripted answers and outcomes, the same seed for every policy) and reports, over
all targets:

* ``prompt_tokens_per_call``: what each call sends (tokens = characters / 4);
* ``cache_hit_share``: the share of those tokens a provider cache serves (the longest
  prefix shared with an earlier call of the target, 128-token blocks from 1,024 tokens on);
* ``uncached_tokens_per_call`` and ``usd_per_1000_calls`` at the default model's list
  prices (``LLMConfig``: input and cached input per million tokens);
* ``reports_shown_share``: of the validation reports and logs of the candidates in the
  feedback log, the share (in characters) the prompts show: what a policy that leaves
  reports out gives up.

Usage::

    .venv/bin/python bench/proposer_context.py --calls 40 \
        --json bench/results/proposer-context-2026-12-05.json
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import platform
import sys
from datetime import date
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script from anywhere
    sys.path.insert(0, str(ROOT))

from optimizer.config import LLMConfig  # noqa: E402
from optimizer.proposers.context import POLICIES  # noqa: E402


def _cache_bench() -> Any:
    path = ROOT / "bench" / "prompt_cache_share.py"
    spec = importlib.util.spec_from_file_location("prompt_cache_share", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


cache_bench = _cache_bench()

REPORT_MARK = "(reports left out: "


def _report_chars(prompt: str) -> int:
    """Characters of the feedback log's reports in one prompt (the artifact blocks)."""
    log = prompt.split("# Recent candidates", 1)[-1].split("# The program to improve", 1)[0]
    count, inside = 0, False
    for line in log.splitlines():
        if line.startswith("## "):
            inside = False
        elif line.startswith(("Reason:", "Metrics:", REPORT_MARK)):
            inside = False
        elif line.endswith(":") and not line.startswith(" "):
            inside = True  # "validation_report.txt:" and the text that follows
        elif inside and line:
            count += len(line) + 1
    return count


def compare(calls: int, seed: int, policies: list[str]) -> dict[str, dict[str, Any]]:
    targets = cache_bench.all_targets(ROOT)
    rows: dict[str, dict[str, Any]] = {}
    full_reports: int | None = None
    for name in policies:
        settings = LLMConfig(context=name)
        prices = settings.prices
        tokens = cached = reports = 0
        n = 0
        for target in targets:
            night = cache_bench.simulate(target, calls, seed, settings)
            row = cache_bench.measure(night)
            tokens += row["_tokens"]
            cached += row["_cached"]
            reports += sum(_report_chars(p) for p in night.prompts)
            n += row["calls"]
        usd = ((tokens - cached) * prices.input_per_m + cached * prices.cached_input_per_m) / 1e6
        rows[name] = {
            "calls": n,
            "prompt_tokens_per_call": round(tokens / n),
            "cache_hit_share": round(cached / tokens, 4),
            "uncached_tokens_per_call": round((tokens - cached) / n),
            "usd_per_1000_calls": round(1000 * usd / n, 4),
            "_reports": reports,
        }
        if name == "append-only":
            full_reports = reports
    for row in rows.values():
        shown = row.pop("_reports")
        row["reports_shown_share"] = round(shown / full_reports, 4) if full_reports else None
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=40, help="proposals per target")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, help="write the results here")
    args = parser.parse_args(argv)
    order = ["sliding", "append-only", *sorted(set(POLICIES) - {"sliding", "append-only"})]
    rows = compare(args.calls, args.seed, order)
    for name, row in rows.items():
        print(f"{name:12s} {row['prompt_tokens_per_call']:6d} tok/call  cache hit "
              f"{row['cache_hit_share']:.3f}  uncached {row['uncached_tokens_per_call']:6d} "
              f"tok/call  ${row['usd_per_1000_calls']:.3f} per 1000 calls  reports shown "
              f"{row['reports_shown_share']}")
    if args.json:
        prices = LLMConfig().prices
        result = {
            "what": "the LLM proposer's context policies over the simulated night of "
            "bench/prompt_cache_share.py (real prompt builder and archive, every built-in "
            "target, scripted answers and outcomes); tokens = characters / 4; USD at the "
            f"default model's list prices ({prices.input_per_m} input, "
            f"{prices.cached_input_per_m} cached input per million tokens)",
            "command": f"python bench/proposer_context.py --calls {args.calls} "
            f"--seed {args.seed} --json {args.json}",
            "platform": platform.platform(),
            "machine": platform.machine(),
            "python": platform.python_version(),
            "date": date.today().isoformat(),
            "calls_per_target": args.calls,
            "policies": rows,
        }
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
