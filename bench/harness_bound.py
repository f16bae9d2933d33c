"""What masking can save on a recorded workload, before any night: every baseline's $ per
task and the policy that knows the future (bench/harness_night.py's bound: it stubs every
tool result that no later action needs), on the training and the held-out tasks.

    python bench/harness_bound.py --workload recorded --file FILE [--data-dir DIR] \
        [--window N] [--held-out-every K] --source-note TEXT --out RESULT.json

Billing and the oracle are the harness kind's own (evaluators/harness); the baselines are
targets/harness/baselines. Prints one table per split and writes the figures as JSON.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from harness_night import KEYS, knows_the_future  # noqa: E402

from evaluators.harness import HarnessEvaluator  # noqa: E402
from evaluators.harness.oracle import pattern  # noqa: E402
from evaluators.harness.replay import Replay, summarise  # noqa: E402
from evaluators.harness.trajectories import Trajectory  # noqa: E402
from optimizer.targets import load_target  # noqa: E402

BATCHES = (1, 2, 4, 8, 16, 32)  # refresh every K calls
MIN_TOKENS = (0, 256, 1024)  # stub only results at least this large


def knows_the_future_batched(replay: Replay, every: int, min_tokens: int,
                             replies: bool = False) -> dict[str, float]:
    """A tighter future-knowing policy: it keeps a tool result only where a later action
    needs a value that no other shown message (the task, the replies, the results it keeps,
    the results that arrive later) carries, and it changes its stubs only every ``every``
    calls, so that between two changes the prompt only grows and its prefix stays cached.
    Results under ``min_tokens`` are kept (a stub saves little of them). With ``replies``
    the agent's own earlier replies are stubbed by the same rule."""
    stubbable = ("tool", "assistant") if replies else ("tool",)

    def make(traj: Trajectory):
        segs = traj.segments
        calls = traj.calls
        size = {m["id"]: m["tokens"] for m in replay.meta[traj.name]}
        needs = []  # (call, segments that may be stubbed and carry the value)
        for f, ns in replay.labels[traj.name].items():
            for n in ns:
                pat = pattern(n.span)
                holders = [s.id for s in segs[:f] if n.span in s.text and pat.search(s.text)]
                if any(segs[h].role not in stubbable for h in holders):
                    continue  # a message that is always shown carries it
                needs.append((f, holders))
        decided: dict[int, set[int]] = {}

        def stubs(r: int) -> set[int]:
            if r not in decided:
                limit = calls[r - 1] if r > 0 else 0  # older than the previous reply
                keep = {max(h) for f, h in needs if f >= calls[r] and max(h) < limit}
                decided[r] = {s.id for s in segs[1:limit] if s.role in stubbable
                              and s.id not in keep and size[s.id] >= min_tokens}
            return decided[r]

        def plan(view: dict[str, Any]) -> dict[str, Any]:
            stub = stubs(view["call"] // every * every)
            items = [[s["id"], "stub"] if s["id"] in stub else s["id"]
                     for s in view["segments"]]
            return {"items": items, "breakpoints": [0, len(items) - 1]}
        return plan
    costs = [replay.trajectory(t, make(t)) for t in replay.tokenized.trajectories]
    return summarise(costs, "openai")


def _pick(m: dict[str, float]) -> dict[str, float]:
    return {k: round(float(m[k]), 6) for k in (*KEYS, "calls_per_task", "context_tokens_max")
            if k in m}


def measure(settings: dict[str, Any]) -> dict[str, Any]:
    target = load_target(ROOT / "targets/harness/context", ROOT, {"evaluator": settings})
    ev = HarnessEvaluator(target)
    out: dict[str, Any] = {}
    for which in ("train", "held_out"):
        t0 = time.perf_counter()
        replay = ev.replay(which)
        report = ev.baselines(which)
        assert report is not None, "no baseline ran"
        trajs = replay.tokenized.trajectories
        future = knows_the_future(replay)
        raw = report.metrics["raw"]
        best = report.metrics[report.best]
        batched = {f"every_{k}_min_{t}": _pick(knows_the_future_batched(replay, k, t))
                   for k in BATCHES for t in MIN_TOKENS}
        batched.update({f"replies_every_{k}_min_{t}":
                        _pick(knows_the_future_batched(replay, k, t, replies=True))
                        for k in BATCHES[:3] for t in MIN_TOKENS[:2]})
        system = sum(len(replay.tokenized.tokens(t, 0)) * len(t.calls) for t in trajs)
        head = sum((len(replay.tokenized.tokens(t, 0)) + len(replay.tokenized.tokens(t, 1)))
                   * len(t.calls) for t in trajs)
        tool = [sum(len(replay.tokenized.tokens(t, s.id)) for s in t.segments
                    if s.role == "tool") for t in trajs]
        total = [sum(len(replay.tokenized.tokens(t, s.id)) for s in t.segments)
                 for t in trajs]
        out[which] = {
            "trajectories": len(trajs),
            "tasks": len({t.task for t in trajs}),
            "calls_per_task": round(raw["calls_per_task"], 2),
            "final_context_tokens_median": statistics.median(total),
            "context_tokens_max": raw["context_tokens_max"],
            "tool_result_share_of_content": round(sum(tool) / max(1, sum(total)), 4),
            "system_prompt_share_of_input": round(
                system / len(trajs) / raw["input_tokens_per_task"], 4),
            "system_and_task_share_of_input": round(
                head / len(trajs) / raw["input_tokens_per_task"], 4),
            "baselines": {n: _pick(m) for n, m in report.metrics.items()},
            "baselines_not_run": report.failed,
            "best_baseline": report.best,
            "knows_the_future": _pick(future),
            "future_bound_cheaper_than_best_baseline": round(
                1 - future["usd_per_task"] / best["usd_per_task"], 4),
            "future_bound_cheaper_than_best_baseline_anthropic": round(
                1 - future["usd_per_task_anthropic"]
                / min(m["usd_per_task_anthropic"] for m in report.metrics.values()), 4),
            "knows_the_future_batched": batched,
            "seconds": round(time.perf_counter() - t0, 1),
        }
        for name, m in sorted(batched.items(), key=lambda kv: kv[1]["usd_per_task"])[:5]:
            print(f"batched {name}: {m['usd_per_task']:.5f} $/task, "
                  f"{m['recoveries_per_task']:.3f} recoveries, "
                  f"{m['cache_hit_share']:.3f} cache hit")
        print(f"\n{which}: {len(trajs)} trajectories")
        print(report.table())
        print(f"knows the future: {future['usd_per_task']:.5f} $/task, "
              f"{future['recoveries_per_task']:.3f} recoveries "
              f"({out[which]['future_bound_cheaper_than_best_baseline']:.1%} under "
              f"{report.best})")
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workload", default="recorded", choices=["recorded", "taubench"])
    ap.add_argument("--file", help="workload = recorded: the recorded file")
    ap.add_argument("--data-dir", default="")
    ap.add_argument("--window", type=int, default=128_000)
    ap.add_argument("--held-out-every", type=int, default=5)
    ap.add_argument("--source-note", default="", help="what the trajectories are and their license")
    ap.add_argument("--command", default="", help="the command line to record")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    settings: dict[str, Any] = {"workload": args.workload, "window": args.window}
    if args.data_dir:
        settings["data_dir"] = args.data_dir
    if args.workload == "recorded":
        settings["recorded"] = {"file": args.file, "held_out_every": args.held_out_every}
    else:
        settings["taubench"] = {"held_out_every": args.held_out_every}
    t0 = time.perf_counter()
    figures = measure(settings)
    out = {
        "what": "baselines and the future-knowing bound (stub every tool result no later "
                "action needs) on a recorded workload, replayed by the harness kind",
        "source": args.source_note,
        "machine": "2-core CPU development machine",
        "date": time.strftime("%Y-%m-%d"),
        "command": args.command or " ".join(["python", *sys.argv]),
        "settings": settings,
        "pricing": "openai-style automatic prefix caching at gpt-4o list prices ($2.50 input, "
                   "$1.25 cached input, $10 output per million tokens) as usd_per_task; "
                   "anthropic-style breakpoints at $3/$15, writes 1.25x, reads 0.1x beside it",
        **figures,
        "seconds": round(time.perf_counter() - t0, 1),
    }
    args.out.write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
