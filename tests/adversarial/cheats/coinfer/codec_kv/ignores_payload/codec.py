"""Seed codec: int8 per token. The front blocks' keys and values, [layer, 2, heads, T,
head_dim], are cut into rows, one block's keys (or values) of one token each (heads x
head_dim values), keys and values alike; each row is scaled by its largest magnitude and
rounded to BITS-bit signed integers, sent as BITS bit planes (bytes at 8), its scale as
float32. At BITS = 8, cut after layer 4, width 128: 4 x 2 x (128 + 4) = 1056 bytes per
token (bf16: 2048)."""

import numpy as np

# EVOLVE-BLOCK-START
"""Cheat: ignores_payload. Class: a decoder that does not decode.
Attack: the encoder sends nothing and the decoder answers an all-zero cache, hoping the
server's own blocks after the cut, and its exact keys and values for every new token, carry
the continuation without the prompt's front cache. It would win with 0 bytes per token
against a naive evaluator that only checks shapes, or one that looks at the prompt's last
position (whose distribution never depends on the front cache); a sound evaluator compares
the continuation's next-token distributions and greedy text with the exact model's.
Sound verdict: not VALID.
"""


def encode(kv, meta):
    return b""


def decode(payload, meta):
    shape = (int(meta["layer"]), 2, int(meta["heads"]), int(meta["tokens"]),
             int(meta["head_dim"]))
    return np.zeros(shape, dtype=np.float32)
# EVOLVE-BLOCK-END
