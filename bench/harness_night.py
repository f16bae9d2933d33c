"""The harness night's figures on held-out tau-bench tasks: every baseline, the seed and the
night's best candidate (evaluated through the sandbox like any candidate), and, for scale, a
policy that knows the future (it stubs every tool result no later action needs: a bound on
what masking alone can save, which no real policy can reach).

    python bench/harness_night.py --candidate BEST_POLICY.py --night NIGHT_SUMMARY.json \
        --out bench/results/harness-night-2026-12-05.json \
        [--experiment experiments/harness-swe.toml --what TEXT]

Needs the experiment's trajectories: tau-bench's in ../shared/data/harness (relative to the
repository root) for experiments/harness.toml; the file its settings name otherwise.
"""

from __future__ import annotations

import argparse
import json
import platform
import tempfile
import tomllib
from pathlib import Path
from typing import Any

from evaluators.harness import HarnessEvaluator
from evaluators.harness.replay import Replay, summarise
from optimizer.targets import load_target
from optimizer.workbench import Workbench

ROOT = Path(__file__).resolve().parents[1]
KEYS = ("usd_per_task", "usd_per_task_anthropic", "recoveries_per_task", "cache_hit_share",
        "input_tokens_per_task", "context_growth_tokens_per_call", "compactions_per_task",
        "repeated_reads_per_task")


def _settings(experiment: Path = ROOT / "experiments" / "harness.toml") -> dict[str, Any]:
    exp = tomllib.loads(experiment.read_text())
    (entry,) = exp["targets"]
    return dict(entry["settings"])


def _pick(m: dict[str, float]) -> dict[str, float]:
    return {k: round(float(m[k]), 6) for k in KEYS if k in m}


def knows_the_future(replay: Replay):
    """Stub every tool result that is no longer new and that no call from here on needs."""
    def make(name: str):
        labels = replay.labels[name]

        def plan(view: dict[str, Any]) -> dict[str, Any]:
            segs = view["segments"]
            m = len(segs)
            prev = max((s["id"] for s in segs if s["role"] == "assistant" and s["id"] > 0),
                       default=0)
            needed = {src for call, needs in labels.items() if call >= m
                      for n in needs for src in n.sources}
            items = [[s["id"], "stub"] if s["role"] == "tool" and s["id"] < prev
                     and s["id"] not in needed else s["id"] for s in segs]
            return {"items": items, "breakpoints": [0, len(items) - 1]}
        return plan
    costs = [replay.trajectory(t, make(t.name)) for t in replay.tokenized.trajectories]
    return summarise(costs, "openai")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--candidate", type=Path, required=True)
    ap.add_argument("--night", type=Path, help="the night's --json summary")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--experiment", type=Path, default=ROOT / "experiments" / "harness.toml")
    ap.add_argument("--what", default="the harness target's 10-minute night on tau-bench "
                    "airline (gpt-4o trajectories, MIT, sierra-research/tau-bench): 160 "
                    "trajectories of 40 tasks searched, 40 of 10 other tasks held out")
    ap.add_argument("--date", default="2026-12-05")
    args = ap.parse_args()
    target = load_target(ROOT / "targets/harness/context", ROOT, _settings(args.experiment))
    ev = HarnessEvaluator(target)
    out: dict[str, Any] = {
        "what": args.what,
        "machine": f"2 CPU cores, no GPU ({platform.machine()}, Python "
                   f"{platform.python_version()})",
        "date": args.date,
        "commands": [f"optimizer run {args.experiment.resolve().relative_to(ROOT)} --json",
                     "python bench/harness_night.py --candidate BEST --night SUMMARY --out "
                     f"{args.out}" + ("" if args.experiment.name == "harness.toml" else
                                      f" --experiment {args.experiment} --what ... --date "
                                      f"{args.date}")],
        "pricing": "openai-style automatic prefix caching, gpt-4o list prices ($2.50 input, "
                   "$1.25 cached input, $10 output per million tokens); anthropic-style "
                   "breakpoint caching at $3/$15 with writes 1.25x and reads 0.1x reported "
                   "beside it",
    }
    if args.night:
        text = args.night.read_text()
        summary = json.loads(text[text.index("\n{\n") + 1:])
        (t,) = summary["targets"]
        out["night"] = {k: t[k] for k in ("candidates", "states", "seed_value", "best_value",
                                           "best_candidate", "winner")}
    for which in ("train", "held_out"):
        report = ev.baselines(which)
        assert report is not None
        out[f"baselines_{which}"] = {n: _pick(m) for n, m in report.metrics.items()}
        out[f"best_baseline_{which}"] = report.best
        out[f"knows_the_future_{which}"] = _pick(knows_the_future(ev.replay(which)))
        tr = ev.replay(which).tokenized.trajectories
        system = sum(len(ev.replay(which).tokenized.tokens(t, 0)) * len(t.calls) for t in tr)
        out[f"system_prompt_share_of_input_{which}"] = round(
            system / len(tr) / report.metrics["raw"]["input_tokens_per_task"], 4)
    cand = {"policy.py": args.candidate.read_text()}
    with tempfile.TemporaryDirectory() as tmp, Workbench(target, state_dir=Path(tmp)) as wb:
        seed_train, best_train = wb.evaluate(), wb.evaluate(cand)
        seed_held, best_held = wb.confirm(None), wb.confirm(cand)
    for name, res in (("seed_train", seed_train), ("best_train", best_train),
                      ("seed_held_out", seed_held), ("best_held_out", best_held)):
        out[name] = {"state": res.state.value, "reason": res.reason, **_pick(res.metrics)}
    base = out["baselines_held_out"][out["best_baseline_held_out"]]
    if best_held.ok:
        out["held_out_cheaper_than_best_baseline"] = round(
            1 - best_held.metrics["usd_per_task"] / base["usd_per_task"], 4)
    out["future_bound_cheaper_than_best_baseline_held_out"] = round(
        1 - out["knows_the_future_held_out"]["usd_per_task"] / base["usd_per_task"], 4)
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
