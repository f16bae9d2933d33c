"""Trusted entry functions that run inside the sandbox, next to a candidate's ``draft.py``.

``run_draft``: load the cached target, build the candidate's draft, distil it within the
budget, save its weights (safetensors) in the io dir, generate greedy and sampled outputs
on the prompts the trusted side chose (returned for the trusted re-check), and time plain
against speculative decoding at every k. ``compare_drafts``: the same for two drafts, then
their speedups measured interleaved (train once, measure ``repeats`` times).
Everything comes back as JSON; the trusted side believes none of it without checking.
"""

from __future__ import annotations

import importlib.util
import sys
import time
from pathlib import Path
from typing import Any

import torch

from evaluators.speculative.api import Draft, TargetView
from evaluators.speculative.decoding import SpecStats, plain_decode, speculative_decode
from evaluators.speculative.distill import load_data, make_data, train_draft
from evaluators.speculative.target import load_folder


def _load_module(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path}")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def _prepare(model, bundle, folder: Path, name: str, p: dict[str, Any], io_dir: Path) -> dict:
    """Build and distil the draft in ``folder``; returns the draft and its training record."""
    mod = _load_module(folder / "draft.py", name)
    seed = int(p.get("train_seed", p["seed"]))  # initialisation and batch order
    torch.manual_seed(seed)
    draft: Draft = mod.build(TargetView.of(model))
    if not isinstance(draft, Draft):
        raise TypeError("build() must return an evaluators.speculative.api.Draft")
    _probe(model, draft, bundle.train_tokens)
    record: dict[str, Any] = {"curve": [], "train_s": 0.0, "data_s": 0.0, "fit_s": 0.0,
                              "weights": ""}
    if draft.wants_data:
        t0 = time.perf_counter()
        layers = tuple(draft.feature_layers)
        if p.get("distill_path"):  # generated once by the trusted side, shared by candidates
            data = load_data(Path(p["distill_path"]), model, layers)
        else:
            data = make_data(model, bundle.train_tokens, n_seqs=p["distill_seqs"],
                             prompt_len=p["distill_prompt_len"], gen_len=p["distill_gen_len"],
                             feature_layers=layers, seed=p["seed"])
        record["data_s"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        with torch.no_grad():
            draft.fit(data)
        record["fit_s"] = time.perf_counter() - t0
        if draft.trainable:
            record["curve"] = train_draft(
                draft, data, lr=float(getattr(mod, "LR", 3e-3)),
                batch=int(getattr(mod, "BATCH", 16)), max_s=p["train_s"],
                max_steps=p["max_steps"], seed=seed,
                weight_decay=float(getattr(mod, "WEIGHT_DECAY", 0.0)))
        record["train_s"] = time.perf_counter() - t0  # fitting and training
        own, seen = {}, set()
        shared = _shared_prefixes(draft, model)
        for k, v in draft.state_dict().items():
            # shared with the target, or an alias of a tensor already kept (tied modules)
            if k.startswith(shared) or v.data_ptr() in seen:
                continue
            if v.numel():
                seen.add(v.data_ptr())
            own[k] = v.detach().contiguous()
        if own:
            from safetensors.torch import save_file

            path = io_dir / f"{name}.safetensors"
            save_file(own, str(path))
            record["weights"] = str(path)
    draft.eval()
    record["draft"] = draft
    return record


@torch.no_grad()
def _probe(model, draft: Draft, tokens: torch.Tensor) -> None:
    """Decode a few tokens with the untrained draft before distilling it. A draft whose
    decoding breaks (shapes, cache bookkeeping) fails here in milliseconds instead of after
    its whole training budget; the values it proposes do not matter yet."""
    was_training = draft.training
    draft.eval()
    speculative_decode(model, draft, tokens[:16].to(model.embed.weight.device), 8, 3)
    draft.train(was_training)


def _shared_prefixes(draft: Draft, model) -> tuple[str, ...]:
    """State-dict keys of modules the draft shares with the target (not the draft's own)."""
    target_ids = {id(t) for t in model.parameters()}
    shared = tuple(k for k, v in draft.state_dict(keep_vars=True).items() if id(v) in target_ids)
    return shared or ("\0",)


def _stats_json(s: SpecStats) -> dict[str, Any]:
    return {"k": s.k, "target_steps": s.target_steps, "tokens": s.tokens, "drafted": s.drafted,
            "reached": s.reached, "accepted": s.accepted, "draft_s": s.draft_s,
            "verify_s": s.verify_s, "total_s": s.total_s}


def _time_plain(model, prompts, n_new) -> float:
    t0 = time.perf_counter()
    for pr in prompts:
        plain_decode(model, pr, n_new)
    return time.perf_counter() - t0


def _sweep(model, draft, prompts, n_new, ks) -> tuple[dict[int, list], dict[int, SpecStats]]:
    outputs: dict[int, list[list[int]]] = {}
    stats: dict[int, SpecStats] = {}
    for k in ks:
        total = SpecStats(k)
        outs = []
        for pr in prompts:
            out, st = speculative_decode(model, draft, pr, n_new, k)
            outs.append(out)
            total.add(st)
        outputs[k], stats[k] = outs, total
    return outputs, stats


def _setup(p: dict[str, Any]):
    torch.set_num_threads(int(p.get("threads", 1)))
    bundle = load_folder(Path(p["target_dir"]))
    model = bundle.model
    for param in model.parameters():
        param.requires_grad_(False)
    prompts = [torch.tensor(x, dtype=torch.int64) for x in p["prompts"]]
    return bundle, model, prompts


def _sample(model, draft, p: dict[str, Any]) -> list[list[int]]:
    s = p["sampling"]
    gen = torch.Generator().manual_seed(p["seed"] + 1)
    prompt = torch.tensor(s["prompt"], dtype=torch.int64)
    return [speculative_decode(model, draft, prompt, s["n_new"], s["k"],
                               temperature=s["temperature"], generator=gen)[0]
            for _ in range(s["n"])]


def run_draft(payload: dict[str, Any], io_dir: Path) -> dict[str, Any]:
    p = payload
    start = time.perf_counter()
    bundle, model, prompts = _setup(p)
    rec = _prepare(model, bundle, Path.cwd(), "draft", p, io_dir)
    draft = rec.pop("draft")
    n_new, ks = p["n_new"], p["ks"]
    # Batch-1 decoding on one thread: with two, a busy neighbour process stalled the
    # threads' hand-offs and single runs took 10-30x longer (measured on 2 shared cores).
    torch.set_num_threads(int(p.get("decode_threads", 1)))
    with torch.no_grad():
        _time_plain(model, prompts[:1], 8)  # warm-up: first calls allocate
        plain_s = _time_plain(model, prompts, n_new)
        outputs, stats = _sweep(model, draft, prompts, n_new, ks)
        best = max(ks, key=lambda k: plain_s / max(stats[k].total_s, 1e-9))
        # Best k chosen on the sweep, then re-measured interleaved: the sweep's maximum
        # alone would be biased upward by the choice.
        plain_r, spec_r = [], []
        for _ in range(p["repeats"]):
            plain_r.append(_time_plain(model, prompts, n_new))
            _, st = _sweep(model, draft, prompts, n_new, [best])
            spec_r.append(st[best].total_s)
        samples = _sample(model, draft, p) if p.get("sampling") else []
    return {**rec, "plain_s": plain_s, "outputs": {str(k): v for k, v in outputs.items()},
            "stats": {str(k): _stats_json(v) for k, v in stats.items()}, "best_k": best,
            "plain_repeats": plain_r, "spec_repeats": spec_r, "samples": samples,
            "child_s": time.perf_counter() - start}


def compare_drafts(payload: dict[str, Any], io_dir: Path) -> dict[str, Any]:
    p = payload
    start = time.perf_counter()
    bundle, model, prompts = _setup(p)
    n_new, ks = p["n_new"], p["ks"]
    runs = {}
    for name, folder in (("candidate", Path.cwd()), ("baseline", Path(p["base_dir"]))):
        rec = _prepare(model, bundle, folder, f"draft_{name}", p, io_dir)
        runs[name] = rec
    torch.set_num_threads(int(p.get("decode_threads", 1)))
    result: dict[str, Any] = {"outputs": {}, "best_k": {}, "speedups": {"candidate": [],
                                                                       "baseline": []}}
    with torch.no_grad():
        _time_plain(model, prompts[:1], 8)
        plain_s = _time_plain(model, prompts, n_new)
        for name, rec in runs.items():
            outputs, stats = _sweep(model, rec["draft"], prompts, n_new, ks)
            best = max(ks, key=lambda k: plain_s / max(stats[k].total_s, 1e-9))
            result["best_k"][name] = best
            result["outputs"][name] = outputs[best]
        for _ in range(p["repeats"]):
            for name in ("baseline", "candidate"):
                plain = _time_plain(model, prompts, n_new)
                k = result["best_k"][name]
                _, st = _sweep(model, runs[name]["draft"], prompts, n_new, [k])
                result["speedups"][name].append(plain / st[k].total_s)
    result["child_s"] = time.perf_counter() - start
    return result
