"""Baseline: KIVI-style (Liu et al., ICML 2024) at BITS bits. Keys are quantised per
channel: for each block, head and channel, the tokens in groups of GROUP share one
asymmetric scale and minimum (fp16). Values are quantised per token: each token's channels
of a head in groups of GROUP. As KIVI does, the most recent tokens stay in full precision
(fp16): the values of the last RESIDUAL tokens, and the keys of the last T mod RESIDUAL
tokens (those that fill no whole group; RESIDUAL is a multiple of GROUP). KIVI's figures use
GROUP 32 and RESIDUAL 128 on contexts of thousands of tokens; these prompts have 96, so
RESIDUAL is the smallest KIVI allows, one group. Cut after layer 4 (4 blocks, 4 heads of 32
channels), 96 tokens, 2 bits: keys 6,144 bytes of scales and minimums + 12,288 of codes;
values 4,096 + 8,192 + 32,768 of fp16 residual: 63,488 bytes, 661.3 per token."""

import numpy as np

# EVOLVE-BLOCK-START
BITS = 2
GROUP = 32
RESIDUAL = 32


def _pack(q):
    per = 8 // BITS
    flat = np.concatenate([q.reshape(-1), np.zeros((-q.size) % per, dtype=np.uint8)])
    flat = flat.reshape(-1, per)
    out = np.zeros(len(flat), dtype=np.uint8)
    for i in range(per):
        out |= flat[:, i] << (BITS * i)
    return out.tobytes()


def _unpack(data, count):
    per = 8 // BITS
    raw = np.frombuffer(data, dtype=np.uint8, count=-(-count // per))
    mask = (1 << BITS) - 1
    return np.stack([(raw >> (BITS * i)) & mask for i in range(per)], 1).reshape(-1)[:count]


def _quantise(x, axis):
    """BITS-bit codes of x with one fp16 (scale, minimum) per slice along ``axis``."""
    lo = x.min(axis=axis, keepdims=True).astype(np.float16)
    hi = x.max(axis=axis, keepdims=True)
    scale = ((hi - lo.astype(np.float32)) / (2**BITS - 1)).astype(np.float16)
    safe = np.where(scale == 0, 1.0, scale.astype(np.float32))
    q = np.clip(np.rint((x - lo.astype(np.float32)) / safe), 0, 2**BITS - 1)
    return [scale.tobytes(), lo.tobytes(), _pack(q.astype(np.uint8))]


def _split(meta):
    """(key tokens quantised, value tokens quantised, value channel group)."""
    tokens, dim = int(meta["tokens"]), int(meta["head_dim"])
    return tokens - tokens % RESIDUAL, max(tokens - RESIDUAL, 0), min(GROUP, dim)


def encode(kv, meta):
    x = np.asarray(kv, dtype=np.float32)
    layer, _, heads, tokens, dim = x.shape
    nk, nv, vg = _split(meta)
    keys = x[:, 0, :, :nk].reshape(layer, heads, nk // GROUP, GROUP, dim)
    values = x[:, 1, :, :nv].reshape(layer, heads, nv, dim // vg, vg)
    parts = _quantise(keys, 3) + [x[:, 0, :, nk:].astype(np.float16).tobytes()]
    parts += _quantise(values, 4) + [x[:, 1, :, nv:].astype(np.float16).tobytes()]
    return b"".join(parts)


class _Reader:
    def __init__(self, payload):
        self.payload, self.at = payload, 0

    def take(self, dtype, shape):
        count = int(np.prod(shape))
        out = np.frombuffer(self.payload, dtype=dtype, count=count, offset=self.at)
        self.at += count * np.dtype(dtype).itemsize
        return out.reshape(shape).astype(np.float32)

    def codes(self, shape):
        count = int(np.prod(shape))
        nbytes = -(-count // (8 // BITS))
        out = _unpack(self.payload[self.at : self.at + nbytes], count)
        self.at += nbytes
        return out.reshape(shape).astype(np.float32)


def decode(payload, meta):
    layer, heads, tokens, dim = (int(meta[k]) for k in ("layer", "heads", "tokens", "head_dim"))
    nk, nv, vg = _split(meta)
    out = np.empty((layer, 2, heads, tokens, dim), dtype=np.float32)
    r = _Reader(payload)
    kshape = (layer, heads, nk // GROUP, 1, dim)
    scale, lo = r.take(np.float16, kshape), r.take(np.float16, kshape)
    codes = r.codes((layer, heads, nk // GROUP, GROUP, dim))
    out[:, 0, :, :nk] = (codes * scale + lo).reshape(layer, heads, nk, dim)
    out[:, 0, :, nk:] = r.take(np.float16, (layer, heads, tokens - nk, dim))
    vshape = (layer, heads, nv, dim // vg, 1)
    scale, lo = r.take(np.float16, vshape), r.take(np.float16, vshape)
    codes = r.codes((layer, heads, nv, dim // vg, vg))
    out[:, 1, :, :nv] = (codes * scale + lo).reshape(layer, heads, nv, dim)
    out[:, 1, :, nv:] = r.take(np.float16, (layer, heads, tokens - nv, dim))
    return out
# EVOLVE-BLOCK-END
