"""The speculative family on CPU, as the nightly evaluates it (same code, no sandbox).

    python bench/speculative_cpu.py --out bench/results/speculative-cpu.json [--train-s 15]

Trains (or loads) the default target under ``--cache`` (default: $OPTIMIZER_CACHE_DIR or
.optimizer/cache), distils every seed draft in targets/speculative/ for ``--train-s``
seconds, checks greedy losslessness against target-only decoding and records the metrics
the evaluator reports. The load average is recorded: on a shared machine it moves timings.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from evaluators.speculative import child  # noqa: E402
from evaluators.speculative.checks import first_divergence  # noqa: E402
from evaluators.speculative.decoding import plain_decode  # noqa: E402
from evaluators.speculative.distill import shared_data  # noqa: E402
from evaluators.speculative.evaluator import DEFAULTS, summarize  # noqa: E402
from evaluators.speculative.target import load_or_build  # noqa: E402
from optimizer.targets import load_target  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--cache", type=Path, default=None)
    ap.add_argument("--train-s", type=float, default=DEFAULTS["train_s"])
    ap.add_argument("--drafts", default="ngram,table,medusa,independent,eagle")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(1)
    t0 = time.perf_counter()
    bundle = load_or_build("default", args.cache)
    for p in bundle.model.parameters():
        p.requires_grad_(False)
    s = {**DEFAULTS, "train_s": args.train_s}
    gen = torch.Generator().manual_seed(args.seed)
    held = bundle.heldout_tokens
    starts = torch.randint(0, len(held) - s["prompt_len"], (s["prompts"],), generator=gen)
    prompts = [held[i : i + s["prompt_len"]].tolist() for i in starts.tolist()]
    refs = [plain_decode(bundle.model, torch.tensor(p), s["n_new"]) for p in prompts]
    result: dict[str, Any] = {"machine": f"{platform.processor() or platform.machine()}, "
                         f"{os.cpu_count()} cores, torch {torch.__version__}, 1 thread",
              "command": "python bench/speculative_cpu.py " + " ".join(sys.argv[1:]),
              "target": {"folder": str(bundle.folder), "train_s": bundle.train_s,
                         "final_loss": bundle.final_loss,
                         "params": sum(p.numel() for p in bundle.model.parameters())},
              "settings": {k: s[k] for k in ("prompts", "prompt_len", "n_new", "ks", "train_s",
                                             "repeats")},
              "drafts": {}}
    assert bundle.folder is not None  # load_or_build always caches
    distill = shared_data(bundle.model, bundle.train_tokens, bundle.folder,
                          n_seqs=s["distill_seqs"], prompt_len=s["distill_prompt_len"],
                          gen_len=s["distill_gen_len"])  # as the nightly: made once, shared
    for name in args.drafts.split(","):
        # each draft's own k sweep, as its target.toml gives the nightly
        spec = load_target(ROOT / "targets" / "speculative" / name, ROOT)
        ks = list(spec.evaluator.get("ks", s["ks"]))
        payload = {"target_dir": str(bundle.folder), "distill_path": str(distill),
                   "prompts": prompts, "n_new": s["n_new"],
                   "ks": ks, "repeats": s["repeats"], "seed": args.seed,
                   "train_s": s["train_s"], "max_steps": s["max_steps"],
                   "distill_seqs": s["distill_seqs"],
                   "distill_prompt_len": s["distill_prompt_len"],
                   "distill_gen_len": s["distill_gen_len"], "sampling": None}
        cwd = os.getcwd()
        os.chdir(ROOT / "targets" / "speculative" / name)
        try:
            with tempfile.TemporaryDirectory() as io:
                resp = child.run_draft(payload, Path(io))
        finally:
            os.chdir(cwd)
        for k, outs in resp["outputs"].items():
            for i, (got, ref) in enumerate(zip(outs, refs, strict=True)):
                div = first_divergence(bundle.model, torch.tensor(prompts[i]), got, ref, 1e-4)
                if div is not None:
                    raise SystemExit(f"{name} k={k} prompt {i}: not lossless at {div}")
        summary = summarize({**resp, "_prompts": prompts}, {**s, "ks": ks})
        m = summary["metrics"]
        result["drafts"][name] = {"lossless": True, "ks": ks, **m,
                                  "speedup_repeats": list(summary["samples"]["speedup"]),
                                  "load_average": os.getloadavg()[0]}
        print(f"{name}: speedup {m['speedup']:.2f} at k={m['best_k']:.0f}, accepted "
              f"{m['mean_accepted_len']:.2f}, c {m['cost_ratio']:.3f}, expected "
              f"{m['expected_speedup']:.2f}", flush=True)
    result["total_s"] = time.perf_counter() - t0
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
