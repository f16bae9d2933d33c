"""Seed codec: int8 per token. The front blocks' keys and values, [layer, 2, heads, T,
head_dim], are cut into rows, one block's keys (or values) of one token each (heads x
head_dim values), keys and values alike; each row is scaled by its largest magnitude and
rounded to BITS-bit signed integers, sent as BITS bit planes (bytes at 8), its scale as
float32. At BITS = 8, cut after layer 4, width 128: 4 x 2 x (128 + 4) = 1056 bytes per
token (bf16: 2048)."""

import numpy as np

# EVOLVE-BLOCK-START
"""Cheat: recompute_from_tokens. Class: recomputation (the known codec cheat).
Attack: the encoder finds the model's weights, recovers each prompt token from the first
block's keys (the vocabulary's keys at that position, nearest wins) and sends the ids, 2
bytes a token; the decoder loads the same weights and recomputes the first blocks' keys and
values from the ids. The payload is 1,000x smaller than bf16 and nearly lossless, so it would
win against a naive evaluator; but it only moves the first blocks' prefill to the server,
which sending the cache exists to avoid. A sound evaluator hides the weights from both
processes and budgets the decoder's CPU below the cost of that prefill.
Sound verdict: not VALID.
"""
import glob  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

WEIGHTS_DIR = ""  # where to look first (the weights are searched for everywhere else too)
_model = {}


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


def _weights():
    if not _model:
        from safetensors.torch import load_file

        folder = _find()
        _model["cfg"] = json.load(open(os.path.join(folder, "meta.json")))["config"]
        _model["w"] = load_file(os.path.join(folder, "target.safetensors"))
    return _model["w"], _model["cfg"]


def _keys(w, x):
    """The first block's keys of the rows x [..., D]."""
    d = x.shape[-1]
    h = F.layer_norm(x, (d,), w["blocks.0.norm1.weight"], w["blocks.0.norm1.bias"])
    return h @ w["blocks.0.qkv.weight"][d : 2 * d].T


def encode(kv, meta):
    w, _ = _weights()
    tokens = int(meta["tokens"])
    keys = torch.from_numpy(np.array(kv[0, 0])).transpose(0, 1).reshape(tokens, -1)
    ids = []
    with torch.no_grad():
        for pos in range(tokens):
            every = _keys(w, w["embed.weight"] + w["pos.weight"][meta["start"] + pos])
            ids.append(int((every - keys[pos]).norm(dim=1).argmin()))
    return np.array(ids, dtype=np.uint16).tobytes()


def decode(payload, meta):
    w, cfg = _weights()
    heads, layer = cfg["n_heads"], int(meta["layer"])
    ids = torch.from_numpy(np.frombuffer(payload, dtype=np.uint16).astype(np.int64))
    t = len(ids)
    out = []
    with torch.no_grad():
        x = (w["embed.weight"][ids] + w["pos.weight"][meta["start"] : meta["start"] + t])[None]
        d = x.shape[-1]
        for i in range(layer):
            p = f"blocks.{i}."
            h = F.layer_norm(x, (d,), w[p + "norm1.weight"], w[p + "norm1.bias"])
            q, k, v = (h @ w[p + "qkv.weight"].T).view(1, t, 3, heads, d // heads).permute(
                2, 0, 3, 1, 4)
            out.append(torch.stack([k[0], v[0]]))
            att = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + att.transpose(1, 2).reshape(1, t, d) @ w[p + "proj.weight"].T
            h = F.layer_norm(x, (d,), w[p + "norm2.weight"], w[p + "norm2.bias"])
            x = x + F.gelu(h @ w[p + "up.weight"].T, approximate="tanh") @ w[p + "down.weight"].T
    return torch.stack(out).numpy()
# EVOLVE-BLOCK-END
