"""Seed codec: int8 per token. Each row (one token's state) is scaled by its largest
magnitude and rounded to BITS-bit signed integers, packed LSB-first; the scale travels as
float32. At BITS = 8 and width 128 that is 128 + 4 = 132 bytes per token (bf16: 256)."""

import numpy as np

# EVOLVE-BLOCK-START
"""Cheat: ignores_payload. Class: a decoder that does not decode.
Attack: the encoder sends nothing and the decoder answers a constant state (a typical
residual-stream row: zeros with the scale of a state), hoping the layers after the cut wash
the difference out. It would win with 0 bytes per token against a naive evaluator that only
checks shapes; a sound evaluator compares the model's next-token distribution and greedy
text with the exact model's and gates on them.
Sound verdict: not VALID.
"""


def encode(hidden, meta):
    return b""


def decode(payload, meta):
    return np.zeros((int(meta["tokens"]), int(meta["d_model"])), dtype=np.float32)
# EVOLVE-BLOCK-END
