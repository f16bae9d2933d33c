"""Seed codec: int8 per token. The front blocks' keys and values, [layer, 2, heads, T,
head_dim], are cut into rows, one block's keys (or values) of one token each (heads x
head_dim values), keys and values alike; each row is scaled by its largest magnitude and
rounded to BITS-bit signed integers, sent as BITS bit planes (bytes at 8), its scale as
float32. At BITS = 8, cut after layer 4, width 128: 4 x 2 x (128 + 4) = 1056 bytes per
token (bf16: 2048)."""

import numpy as np

# EVOLVE-BLOCK-START
"""Cheat: oversized_payload. Class: a payload that breaks the size bound.
Attack: the encoder sends the cache as float64 (twice the float32 cache) and claims a
lossless codec; the decoder reads it back exactly. Its quality is perfect, so a naive
evaluator that only gates on quality would call it VALID and, with an objective read from
the program, a win; a sound evaluator measures the payload itself and refuses one over the
cap of the float32 cache's own size.
Sound verdict: not VALID.
"""
BYTES_PER_TOKEN = 1  # what it would claim, if anybody asked


def encode(kv, meta):
    return np.asarray(kv, dtype=np.float64).tobytes()


def decode(payload, meta):
    shape = (int(meta["layer"]), 2, int(meta["heads"]), int(meta["tokens"]),
             int(meta["head_dim"]))
    return np.frombuffer(payload, dtype=np.float64).reshape(shape).astype(np.float32)
# EVOLVE-BLOCK-END
