"""The speculative family on CPU, measured exactly as the nightly measures it.

    python bench/speculative_cpu.py --out bench/results/speculative-cpu.json [--train-s 8]

Trains (or loads) the default target under ``--cache`` (default: $OPTIMIZER_CACHE_DIR or
.optimizer/cache) and runs every seed draft of targets/speculative/ through the evaluator's
own measurement in a real, warm sandbox: a training session distils the draft for
``--train-s`` seconds; target-only and speculative decoding are timed in this process, the
draft answering from a fresh sandboxed process per timed prompt. The prompts are chosen
here (``--seed``, not the night's secret): the k sweep decodes the 16 held-out windows the
former bench drew with the same seed, and each repeat a further 16, so the sweep's figures
compare with the former in-process harness on the same prompts. The load average is
recorded: on a shared machine it moves timings.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from evaluators._base import EvalContext  # noqa: E402
from evaluators.speculative.evaluator import (  # noqa: E402
    DEFAULTS,
    SpeculativeEvaluator,
    _Stop,
    summarize,
)
from evaluators.speculative.target import load_or_build  # noqa: E402
from optimizer.sandbox import Sandbox, SandboxSettings  # noqa: E402
from optimizer.targets import load_target  # noqa: E402


def prompt_sets(held: torch.Tensor, n: int, plen: int, n_sets: int, seed: int) -> list:
    """``n_sets`` lists of ``n`` held-out windows; the first is what the former bench drew
    with the same seed (one generator, windows in the order drawn)."""
    gen = torch.Generator().manual_seed(seed)
    starts = torch.randint(0, len(held) - plen, (n * n_sets,), generator=gen).tolist()
    windows = [held[s : s + plen].tolist() for s in starts]
    return [windows[i * n : (i + 1) * n] for i in range(n_sets)]


def inproc(evaluator: SpeculativeEvaluator, cand: Path, resp: dict, sets: list) -> dict:
    """The same weights and prompts with the draft built in this process and decoded by the
    same loop: what the boundary costs, apart from training noise."""
    from safetensors.torch import load_file

    from evaluators.speculative.decoding import SpecStats, speculative_decode
    from evaluators.speculative.harness import threads, timed_plain
    from evaluators.speculative.serve_draft import _build, _load_module, _load_weights

    model = evaluator._model("cpu")
    mod = _load_module(cand / "draft.py", f"inproc_{cand.name}")
    draft = _build(mod, model, int(evaluator.s["timing_seed"]))
    if resp["train"]["weights"]:
        _load_weights(draft, load_file(resp["train"]["weights"]), model)
    draft.eval()
    out: dict[str, Any] = {"sweep": {}, "repeats": []}

    def run(prompts: list, k: int) -> tuple[float, float, SpecStats]:
        plain = spec = 0.0
        total = SpecStats(k)
        for p in prompts:
            t = torch.tensor(p)
            _, ps = timed_plain(model, t, evaluator.s["n_new"])
            t0 = time.perf_counter()
            _, st = speculative_decode(model, draft, t, evaluator.s["n_new"], k)
            spec += time.perf_counter() - t0
            plain += ps
            total.add(st)
        return plain, spec, total

    with threads(1), torch.no_grad():
        for k in sorted(resp["sweep"]):
            plain, spec, st = run(sets[0], k)
            out["sweep"][k] = {"speedup": plain / spec, "mean_accepted_len": st.mean_accepted_len,
                               "cost_ratio": (st.draft_s / max(1, st.drafted))
                               / (plain / (len(sets[0]) * evaluator.s["n_new"]))}
        for prompts in sets[1:]:
            plain, spec, _ = run(prompts, int(resp["best_k"]))
            out["repeats"].append(plain / spec)
    out["speedup"] = statistics.median(out["repeats"])
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--cache", type=Path, default=None)
    ap.add_argument("--train-s", type=float, default=DEFAULTS["train_s"])
    ap.add_argument("--drafts", default="ngram,table,medusa,independent,eagle")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--inproc-too", action="store_true",
                    help="also time the same trained weights with the draft in this process "
                         "(the former harness's way), on the same prompts, right after")
    args = ap.parse_args()
    torch.set_num_threads(1)
    t0 = time.perf_counter()
    cache = args.cache or Path(os.environ.get("OPTIMIZER_CACHE_DIR", ".optimizer/cache"))
    cache = cache.resolve()
    bundle = load_or_build("default", cache)
    s = {**DEFAULTS, "train_s": args.train_s}
    sets = prompt_sets(bundle.heldout_tokens, s["prompts"], s["prompt_len"], 1 + s["repeats"],
                       args.seed)
    result: dict[str, Any] = {
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
                   f"torch {torch.__version__}, 1 decoding thread",
        "command": "python bench/speculative_cpu.py " + " ".join(sys.argv[1:]),
        "harness": "trusted decoding loop and clock in this process; the draft in a fresh "
                   "sandboxed process per timed prompt, one round trip per step",
        "target": {"folder": str(bundle.folder), "train_s": bundle.train_s,
                   "final_loss": bundle.final_loss,
                   "params": sum(p.numel() for p in bundle.model.parameters())},
        "settings": {k: s[k] for k in ("prompts", "prompt_len", "n_new", "train_s", "repeats")},
        "drafts": {}}
    root = Path(tempfile.mkdtemp(prefix="spec-bench-"))
    sandbox = Sandbox(SandboxSettings(rw_root=root, timeout_s=300,
                                      preload=SpeculativeEvaluator.preload))
    try:
        for name in args.drafts.split(","):
            # each draft's own k sweep, as its target.toml gives the nightly
            spec = load_target(ROOT / "targets" / "speculative" / name, ROOT,
                               {"evaluator": {"train_s": args.train_s,
                                              "cache_dir": str(cache)}})
            evaluator = SpeculativeEvaluator(spec)
            cand = root / name
            shutil.copytree(spec.path, cand)
            io = root / f"io-{name}"
            io.mkdir()
            ctx = EvalContext(sandbox, seed=args.seed, scratch=root / f"scratch-{name}",
                              io_dir=io, timeout_s=300)
            evaluator._use(ctx)
            started = time.perf_counter()
            try:
                resp = evaluator._measure(cand, ctx, sets)
            except _Stop as stop:
                res = stop.result
                raise SystemExit(f"{name}: {res.state.value}: {res.reason}") from None
            passes = [*resp["sweep"].values(), *resp["repeats"]]
            bad = evaluator._check_greedy(evaluator._model("cpu"), passes, name)
            if bad:
                raise SystemExit(bad)
            ks = sorted(resp["sweep"])
            summary = summarize(resp, {**evaluator.s, "ks": ks})
            m = summary["metrics"]
            result["drafts"][name] = {
                "lossless": True, "ks": ks, **m,
                "speedup_repeats": list(summary["samples"]["speedup"]),
                "session_start_s_p90": statistics.quantiles(resp["start_s"], n=10)[-1],
                "evaluation_s": time.perf_counter() - started,
                "load_average": os.getloadavg()[0]}
            if args.inproc_too:
                result["drafts"][name]["inproc"] = inproc(evaluator, cand, resp, sets)
            print(f"{name}: speedup {m['speedup']:.2f} at k={m['best_k']:.0f}, accepted "
                  f"{m['mean_accepted_len']:.2f}, c {m['cost_ratio']:.3f}, sweep "
                  + ", ".join(f"k{k} {m[f'speedup_sweep_k{k}']:.2f}" for k in ks)
                  + f", session start {m['session_start_s'] * 1e3:.0f} ms", flush=True)
    finally:
        sandbox.close()
        shutil.rmtree(root, ignore_errors=True)
    result["total_s"] = time.perf_counter() - t0
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
