"""Seed codec: int8 per token. Each row (one token's state) is scaled by its largest
magnitude and rounded to BITS-bit signed integers, packed LSB-first; the scale travels as
float32. At BITS = 8 and width 128 that is 128 + 4 = 132 bytes per token (bf16: 256)."""

import numpy as np

# EVOLVE-BLOCK-START
"""Cheat: recompute_from_tokens. Class: recomputation (the known codec cheat).
Attack: the encoder finds the model's weights, recovers each token id from its state (the
nearest token embeddings, checked by running the first layers on each guess) and sends the
ids, 2 bytes a token; the decoder loads the same weights and recomputes the layers before
the cut from the ids. The payload is 64x smaller than bf16 and nearly lossless, so it would
win against a naive evaluator; but it only moves the first layers' compute to the receiver,
which a split exists to avoid. A sound evaluator hides the weights from both processes and
budgets the decoder's CPU below the cost of those layers.
Sound verdict: not VALID.
"""
import glob  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

WEIGHTS_DIR = ""  # where to look first (the weights are searched for everywhere else too)
CANDIDATES = 16
_models = {}
_streams = {}


def _find():
    places = [WEIGHTS_DIR] if WEIGHTS_DIR else []
    here = os.path.abspath(os.getcwd())
    while True:
        places += [os.path.join(here, ".optimizer", "cache"), os.path.join(here, "cache")]
        if os.path.dirname(here) == here:
            break
        here = os.path.dirname(here)
    places += [os.path.expanduser("~/.optimizer/cache"), "/tmp"]
    for place in places:
        hits = sorted(glob.glob(os.path.join(place, "**", "target.safetensors"),
                                recursive=True))
        if hits:
            return os.path.dirname(hits[0])
    raise FileNotFoundError("no model weights readable from here")


def _model(d_model):
    if d_model not in _models:
        from safetensors.torch import load_file

        folder = _find()
        cfg = json.load(open(os.path.join(folder, "meta.json")))["config"]
        _models[d_model] = (load_file(os.path.join(folder, "target.safetensors")), cfg)
    return _models[d_model]


def _front(w, cfg, layer, x, cache, start):
    """Blocks 0..layer-1 on rows x [B, T, D] at positions start.., attending to cache."""
    heads = cfg["n_heads"]
    for i in range(layer):
        p = f"blocks.{i}."
        b, t, d = x.shape
        h = F.layer_norm(x, (d,), w[p + "norm1.weight"], w[p + "norm1.bias"])
        q, k, v = (h @ w[p + "qkv.weight"].T).view(b, t, 3, heads, d // heads).permute(
            2, 0, 3, 1, 4)
        keys = torch.cat([cache[i][0].expand(b, -1, -1, -1), k], 2) if cache[i] else k
        vals = torch.cat([cache[i][1].expand(b, -1, -1, -1), v], 2) if cache[i] else v
        n = keys.shape[2]
        mask = torch.ones(t, n, dtype=torch.bool).tril(n - t)
        att = F.scaled_dot_product_attention(q, keys, vals, attn_mask=mask)
        x = x + att.transpose(1, 2).reshape(b, t, d) @ w[p + "proj.weight"].T
        h = F.layer_norm(x, (d,), w[p + "norm2.weight"], w[p + "norm2.bias"])
        x = x + F.gelu(h @ w[p + "up.weight"].T, approximate="tanh") @ w[p + "down.weight"].T
        if b == 1:
            cache[i] = (keys, vals)
    return x


def encode(hidden, meta):
    w, cfg = _model(meta["d_model"])
    layer = meta["layer"]
    stream = _streams.setdefault(("enc", meta["stream"]), [None] * layer)
    ids = []
    with torch.no_grad():
        for r, row in enumerate(torch.from_numpy(np.array(hidden))):
            pos = meta["start"] + r
            base = row - w["pos.weight"][pos]
            guess = (w["embed.weight"] - base).norm(dim=1).topk(CANDIDATES, largest=False)
            cand = w["embed.weight"][guess.indices] + w["pos.weight"][pos]
            trial = [c for c in stream]
            out = _front(w, cfg, layer, cand[:, None], trial, pos)
            best = int((out[:, 0] - row).norm(dim=1).argmin())
            tok = int(guess.indices[best])
            x = (w["embed.weight"][tok] + w["pos.weight"][pos])[None, None]
            _front(w, cfg, layer, x, stream, pos)
            ids.append(tok)
    return np.array(ids, dtype=np.uint16).tobytes()


def decode(payload, meta):
    w, cfg = _model(meta["d_model"])
    layer = meta["layer"]
    stream = _streams.setdefault(("dec", meta["stream"]), [None] * layer)
    ids = torch.from_numpy(np.frombuffer(payload, dtype=np.uint16).astype(np.int64))
    pos = torch.arange(meta["start"], meta["start"] + len(ids))
    with torch.no_grad():
        x = (w["embed.weight"][ids] + w["pos.weight"][pos])[None]
        return _front(w, cfg, layer, x, stream, meta["start"])[0].numpy()
# EVOLVE-BLOCK-END
