"""A coinfer codec target's reference figures: every baseline codec and the seed at each
bit width, evaluated through the sandbox like any candidate (the default target model cut
after layer 4, the target's own prompts and gates), on the search prompts and on the
held-out ones. The states mode (targets/coinfer/codec) or the kv mode
(targets/coinfer/codec_kv, which also records the cache's outlier statistics):

    python bench/coinfer_codecs.py --out bench/results/coinfer-codecs-2026-12-05.json
    python bench/coinfer_codecs.py --target targets/coinfer/codec_kv --bits 8 7 6 5 4 3 2 \
        --cheats --machine "2-core CPU development machine" \
        --out bench/results/coinfer-kv-codecs-2026-12-06.json

``--cheats`` adds two of tests/adversarial/cheats/coinfer/<target>/: the decoder that
ignores its payload, and the recompute cheat with the weights leaked to it (a copy inside
the repository, removed afterwards): what the decoder's CPU budget alone does to it. The
model is the speculative family's default target, trained into .optimizer/cache on first use
(about 65 s on 2 quiet cores) or loaded from there.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from evaluators.coinfer.kv import client_kv
from evaluators.coinfer.splitlm import Split
from evaluators.speculative.target import load_or_build
from optimizer.records import CandidateState
from optimizer.targets import load_target
from optimizer.workbench import Workbench

ROOT = Path(__file__).resolve().parents[1]
CACHE = ROOT / ".optimizer" / "cache"
KEYS = ("bytes_per_token", "vs_bf16", "kl_mean", "kl_p99", "top1_agreement",
        "greedy_agreement", "encode_cpu_us_per_token", "decode_cpu_us_per_token",
        "decode_cpu_s", "decode_budget_s", "front_cpu_s")


def programs(target: Path, bits: list[int]) -> dict[str, str]:
    out = {p.stem: p.read_text() for p in sorted((target / "baselines").glob("*.py"))}
    seed = (target / "codec.py").read_text()
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


def leaked(bench: Workbench, cheat: Path, preset: str) -> dict[str, Any]:
    """The recompute cheat with a copy of the model's weights where it looks first."""
    folder = load_or_build(preset, CACHE).folder
    assert folder is not None, "the model has no folder to copy"
    leak = Path(tempfile.mkdtemp(prefix=".coinfer-leak-", dir=ROOT))
    try:
        for name in ("meta.json", "target.safetensors"):
            shutil.copyfile(folder / name, leak / name)
        text = cheat.read_text().replace('WEIGHTS_DIR = ""', f'WEIGHTS_DIR = "{leak}"', 1)
        return figures(bench, text, held_out=False)
    finally:
        shutil.rmtree(leak, ignore_errors=True)


def outliers(x: torch.Tensor) -> dict[str, float]:
    """``x`` [tokens, channels]: the largest channel's mean magnitude over the median
    channel's, and a token's largest magnitude over its RMS (the mean over tokens)."""
    per_channel = x.abs().mean(0)
    row_rms = x.pow(2).mean(1).sqrt()
    return {"channel_max_over_median": round(float(per_channel.max() / per_channel.median()), 2),
            "row_max_over_rms": round(float((x.abs().max(1).values / row_rms).mean()), 2)}


def kv_statistics(preset: str, layer: int, tokens: int = 512) -> dict[str, Any]:
    """Outlier statistics of the front blocks' keys and values (per block, heads' channels
    side by side) on the first ``tokens`` held-out tokens, 4 windows."""
    bundle = load_or_build(preset, CACHE)
    split, window = Split(bundle.model, layer), tokens // 4
    kvs = torch.cat([torch.from_numpy(client_kv(split, bundle.heldout_tokens[i:i + window]))
                     for i in range(0, tokens, window)], 3)  # [layer, 2, heads, T, dim]
    rows = kvs.permute(0, 1, 3, 2, 4).flatten(3)  # [layer, 2, T, heads * dim]
    return {f"block {i}": {"keys": outliers(rows[i, 0]), "values": outliers(rows[i, 1])}
            for i in range(layer)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--target", type=Path, default=ROOT / "targets" / "coinfer" / "codec")
    ap.add_argument("--bits", type=int, nargs="*", default=[8, 7, 6, 5, 4, 3])
    ap.add_argument("--cheats", action="store_true",
                    help="also the decoder of zeros and the recompute cheat, weights leaked")
    ap.add_argument("--machine", default=f"{platform.machine()}, "
                    f"{len(os.sched_getaffinity(0))} cores, Python {platform.python_version()}")
    args = ap.parse_args()
    target_dir = args.target.resolve()
    target = load_target(target_dir, ROOT)
    settings = dict(target.evaluator)
    mode, preset = settings.get("mode", "states"), settings.get("preset", "default")
    rows: dict[str, Any] = {}
    with Workbench(target, cache_dir=CACHE) as bench:
        for name, text in programs(target_dir, args.bits).items():
            search = figures(bench, text, held_out=False)
            held = (figures(bench, text, held_out=True)
                    if search["state"] == CandidateState.VALID.value else None)
            rows[name] = {"search": search, "held_out": held}
            print(name, search["state"], search.get("bytes_per_token"),
                  search.get("top1_agreement"), search["reason"][:80], flush=True)
        if args.cheats:
            cheats = ROOT / "tests" / "adversarial" / "cheats" / "coinfer" / target_dir.name
            zeros = (cheats / "ignores_payload" / "codec.py").read_text()
            rows["ignores_payload"] = {"search": figures(bench, zeros, held_out=False),
                                       "held_out": None}
            rows["recompute_from_tokens, weights leaked"] = {
                "search": leaked(bench, cheats / "recompute_from_tokens" / "codec.py", preset),
                "held_out": None}
    what = ("the front blocks' KV cache, 32 prompts of 96 tokens and 16 continuation tokens "
            "each" if mode == "kv" else "32 prompts of 96 tokens and 16 greedy tokens each")
    doc: dict[str, Any] = {
        "about": f"The coinfer {mode} codec target's baselines and its seed at each bit width "
                 f"(bench/coinfer_codecs.py): the default speculative target cut after layer 4, "
                 f"{what}, the target's gates.",
        "machine": args.machine,
        "date": time.strftime("%Y-%m-%d"),
        "settings": settings,
        "codecs": rows,
    }
    if mode == "kv":
        doc["kv_statistics"] = kv_statistics(preset, int(settings.get("layer", 4)))
    args.out.write_text(json.dumps(doc, indent=1) + "\n")


if __name__ == "__main__":
    main()
