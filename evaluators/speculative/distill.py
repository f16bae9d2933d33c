"""Distillation data from the target and the draft's training loop (time- and step-capped).

The data are target-generated: windows of the training split as prompts, continued by the
target's greedy decoding (what the draft must predict at evaluation), then one teacher-
forced target pass gives the labels (the target's argmax at every position) and the hidden
states of the layers the draft reads.

Generating the sequences is the expensive part (4.4 s of an 18 s candidate on 2 CPU cores,
2026-11-29) and does not depend on the draft, so the trusted side generates them once per
target and settings (:func:`shared_data`) and every candidate's training session only
recomputes the features its draft reads (:func:`load_data`, one teacher-forced pass, a
fraction of a second).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import torch

from evaluators.speculative.api import Draft


@torch.no_grad()
def greedy_batch(model, prompts: torch.Tensor, n_new: int) -> torch.Tensor:
    """Greedy continuation of a batch of equal-length prompts ``[B, P] -> [B, P + n_new]``."""
    cache = model.new_cache(prompts.shape[0], prompts.shape[1] + n_new)
    logits, _ = model(prompts, cache)
    out = [prompts]
    for i in range(n_new):
        nxt = logits[:, -1:].argmax(-1)
        out.append(nxt)
        if i + 1 < n_new:
            logits, _ = model(nxt, cache)
    return torch.cat(out, 1)


@torch.no_grad()
def make_data(model, tokens: torch.Tensor, *, n_seqs: int, prompt_len: int, gen_len: int,
              feature_layers: tuple[int, ...], seed: int, chunk: int = 64) -> dict:
    gen = torch.Generator().manual_seed(seed)
    starts = torch.randint(0, len(tokens) - prompt_len, (n_seqs,), generator=gen).tolist()
    device = model.embed.weight.device
    prompts = torch.stack([tokens[s : s + prompt_len] for s in starts]).to(device)
    seqs = torch.cat([greedy_batch(model, prompts[i : i + chunk], gen_len)
                      for i in range(0, n_seqs, chunk)])
    labels, feats = [], []
    for i in range(0, n_seqs, chunk):
        logits, f = model(seqs[i : i + chunk], None, feature_layers)
        labels.append(logits.argmax(-1))
        if f is not None:
            feats.append(f)
    return {"tokens": seqs, "labels": torch.cat(labels),
            "feats": torch.cat(feats) if feats else None}


@torch.no_grad()
def target_features(model, tokens: torch.Tensor, feature_layers: tuple[int, ...],
                    chunk: int = 64) -> torch.Tensor | None:
    """Hidden states of ``feature_layers`` at every position of ``tokens`` ``[N, T]``."""
    if not feature_layers:
        return None
    return torch.cat([model(tokens[i : i + chunk], None, feature_layers)[1]
                      for i in range(0, tokens.shape[0], chunk)])


def shared_data(model, tokens: torch.Tensor, folder: Path, *, n_seqs: int, prompt_len: int,
                gen_len: int, seed: int = 0) -> Path:
    """The file of target-generated sequences and labels for these settings in ``folder``,
    generated on first use (trusted side; written atomically, so two workers may race)."""
    from safetensors.torch import save_file

    path = folder / f"distill-{n_seqs}x{prompt_len}+{gen_len}-s{seed}.safetensors"
    if not path.is_file():
        data = make_data(model, tokens, n_seqs=n_seqs, prompt_len=prompt_len, gen_len=gen_len,
                         feature_layers=(), seed=seed)
        tmp = path.with_suffix(f".partial-{os.getpid()}")
        save_file({"tokens": data["tokens"].cpu().contiguous(),
                   "labels": data["labels"].cpu().contiguous()}, str(tmp))
        os.replace(tmp, path)
    return path


def load_data(path: Path, model, feature_layers: tuple[int, ...]) -> dict:
    """A :func:`shared_data` file with the features ``feature_layers`` recomputed."""
    from safetensors.torch import load_file

    data = load_file(str(path))
    tokens = data["tokens"].to(model.embed.weight.device)
    return {"tokens": tokens, "labels": data["labels"].to(tokens.device),
            "feats": target_features(model, tokens, feature_layers)}


def train_draft(draft: Draft, data: dict, *, lr: float, batch: int, max_s: float,
                max_steps: int, seed: int, weight_decay: float = 0.0,
                log_every: int = 10) -> list[dict[str, float]]:
    """AdamW on ``draft.loss`` with a short warm-up; stops at ``max_s`` or ``max_steps``.

    Returns the training curve: ``{"step", "seconds", "loss"}`` every ``log_every`` steps
    (the loss averaged over those steps) and at the last step.
    """
    params = [p for p in draft.parameters() if p.requires_grad]
    if not params:
        return []
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay)
    gen = torch.Generator().manual_seed(seed)
    n = data["tokens"].shape[0]
    curve: list[dict[str, float]] = []
    window: list[float] = []
    start = time.perf_counter()
    draft.train()
    step = 0
    while step < max_steps:
        idx = torch.randint(0, n, (batch,), generator=gen)
        sub = {k: (v[idx] if v is not None else None) for k, v in data.items()}
        for group in opt.param_groups:
            group["lr"] = lr * min(1.0, (step + 1) / 20)
        loss = draft.loss(sub)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        step += 1
        window.append(float(loss.detach()))
        elapsed = time.perf_counter() - start
        done = elapsed >= max_s or step >= max_steps
        if step % log_every == 0 or done:
            curve.append({"step": step, "seconds": elapsed, "loss": sum(window) / len(window)})
            window = []
        if done:
            break
    draft.eval()
    return curve
