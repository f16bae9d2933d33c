"""The trusted decode engine's step costs on a cached target: eager PyTorch against the
static-cache engine (CUDA graphs on a GPU), one token and verification passes of k+1.

    python bench/speculative_engine.py --preset h200 --out OUT.json
    python bench/speculative_engine.py --preset tiny --out /tmp/engine.json   # CPU, seconds

The target is the preset's cached one (trained on first use: ``python -m
evaluators.speculative.prepare --preset NAME``). Greedy decoding on the engine must give
the eager tokens on every prompt; the run fails otherwise.
"""

from __future__ import annotations

import argparse
import copy
import datetime
import json
import platform
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from evaluators.speculative.decoding import plain_decode  # noqa: E402
from evaluators.speculative.engine import StaticDecoder  # noqa: E402
from evaluators.speculative.target import load_or_build  # noqa: E402


def sync(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def per_call(fn, dev: torch.device, n: int) -> float:
    """Median seconds of ``fn()`` over ``n`` calls (after 3 warm-up calls)."""
    for _ in range(3):
        fn()
    times = []
    for _ in range(n):
        sync(dev)
        t0 = time.perf_counter()
        fn()
        sync(dev)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


@torch.no_grad()
def measure(model, prompts: list[torch.Tensor], n_new: int, ks: list[int],
            steps: int) -> dict:
    dev = model.embed.weight.device
    prompt_len = len(prompts[0])
    need = -(-(prompt_len + n_new + max(ks) + 2) // 16) * 16
    engine = StaticDecoder(model, min(need, model.cfg.max_len))
    t0 = time.perf_counter()
    engine.capture([*range(1, max(ks) + 2), prompt_len])
    capture_s = time.perf_counter() - t0
    rows: dict[str, dict[str, float]] = {}
    engine_steps = {}
    for t in [1, *[k + 1 for k in ks]]:
        ids = prompts[0][None, :t]
        eager_cache = model.new_cache(1, need)

        def eager_step(ids=ids, cache=eager_cache):
            cache.length = 72  # a decode well under way (the slots' contents do not matter)
            model(ids, cache)

        def engine_step(ids=ids):
            cache = engine.new_cache(1, need)
            cache.length = 72
            engine(ids, cache)

        engine_steps[str(t)] = engine_step
        rows[str(t)] = {"eager_ms": 1e3 * per_call(eager_step, dev, steps),
                        "engine_ms": 1e3 * per_call(engine_step, dev, steps)}
    # the engine's own calibration: every verification size timed as a replay, each padded
    # to the cheapest captured size at or above it; the same steps timed again with it
    t0 = time.perf_counter()
    engine.calibrate(range(1, max(ks) + 2))
    calibrate_s = time.perf_counter() - t0
    for t, r in rows.items():
        r["engine_padded_ms"] = 1e3 * per_call(engine_steps[t], dev, steps)
    one = rows["1"]["engine_ms"]
    for r in rows.values():
        r["engine_over_1_token"] = r["engine_ms"] / one
        r["padded_over_1_token"] = r["engine_padded_ms"] / one
    plain_eager, plain_engine, same = [], [], True
    for p in prompts:
        sync(dev)
        t0 = time.perf_counter()
        ref = plain_decode(model, p, n_new)
        sync(dev)
        plain_eager.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        got = plain_decode(engine, p, n_new)
        sync(dev)
        plain_engine.append(time.perf_counter() - t0)
        same = same and got == ref
    if not same:
        raise SystemExit("greedy decoding on the engine differs from eager decoding")
    tokens = n_new * len(prompts)
    return {"capture_s": capture_s, "graphs": len(engine.captured), "steps": rows,
            "calibrate_s": calibrate_s, "calibration": engine.describe(),
            "plain_decode": {"tokens": tokens, "eager_tok_s": tokens / sum(plain_eager),
                             "engine_tok_s": tokens / sum(plain_engine),
                             "greedy_identical": same}}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--preset", default="h200")
    ap.add_argument("--cache", type=Path, default=None)
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--n-new", type=int, default=128)
    ap.add_argument("--ks", default="2,4,8,12")
    ap.add_argument("--steps", type=int, default=200, help="timed calls per step shape")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    torch.set_num_threads(1)
    bundle = load_or_build(args.preset, args.cache)
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model = copy.deepcopy(bundle.model).to(dev).eval()
    held = bundle.heldout_tokens
    stride = len(held) // (args.prompts + 1)
    prompts = [held[i * stride : i * stride + 64].to(dev) for i in range(args.prompts)]
    ks = [int(k) for k in args.ks.split(",")]
    res = measure(model, prompts, args.n_new, ks, args.steps)
    out = {"device": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu",
           "date": datetime.date.today().isoformat(), "torch": torch.__version__,
           "python": platform.python_version(), "preset": args.preset,
           "params": sum(p.numel() for p in model.parameters()),
           "layers": model.cfg.n_layers, "width": model.cfg.d_model,
           "command": "python bench/speculative_engine.py " + " ".join(sys.argv[1:]),
           "timing": "median wall clock per call after a device sync, batch 1, float32",
           **res}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1))
    print(f"{'tokens':>6} {'eager ms':>9} {'engine ms':>9} {'x 1-token':>9} {'padded ms':>9}")
    for t, r in res["steps"].items():
        print(f"{t:>6} {r['eager_ms']:9.3f} {r['engine_ms']:9.3f} "
              f"{r['engine_over_1_token']:9.2f} {r['engine_padded_ms']:9.3f}")
    print(f"padding chosen: {res['calibration']['pad_to'] or 'none'}")
    pd = res["plain_decode"]
    print(f"target-only decoding: eager {pd['eager_tok_s']:.0f} tok/s, engine "
          f"{pd['engine_tok_s']:.0f} tok/s, greedy identical: {pd['greedy_identical']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
