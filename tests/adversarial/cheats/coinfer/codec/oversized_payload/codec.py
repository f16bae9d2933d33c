"""Seed codec: int8 per token. Each row (one token's state) is scaled by its largest
magnitude and rounded to BITS-bit signed integers, packed LSB-first; the scale travels as
float32. At BITS = 8 and width 128 that is 128 + 4 = 132 bytes per token (bf16: 256)."""

import numpy as np

# EVOLVE-BLOCK-START
"""Cheat: oversized_payload. Class: a payload that breaks the size bound.
Attack: the encoder sends the state as float64 (twice the float32 state) and claims a
lossless codec; the decoder reads it back exactly. Its quality is perfect, so a naive
evaluator that only gates on quality would call it VALID and, with an objective read from
the program, a win; a sound evaluator measures the payload itself and refuses one over the
cap of the float32 state's own size.
Sound verdict: not VALID.
"""
BYTES_PER_TOKEN = 1  # what it would claim, if anybody asked


def encode(hidden, meta):
    return np.asarray(hidden, dtype=np.float64).tobytes()


def decode(payload, meta):
    x = np.frombuffer(payload, dtype=np.float64)
    return x.reshape(int(meta["tokens"]), int(meta["d_model"])).astype(np.float32)
# EVOLVE-BLOCK-END
