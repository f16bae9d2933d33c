"""Baseline: bfloat16, the state's own format on the wire when nothing is done (2 bytes per
value, rounded to nearest even)."""

import numpy as np

# EVOLVE-BLOCK-START


def encode(hidden, meta):
    bits = np.asarray(hidden, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    return rounded.astype(np.uint16).tobytes()


def decode(payload, meta):
    half = np.frombuffer(payload, dtype=np.uint16).astype(np.uint32) << 16
    return half.view(np.float32).reshape(int(meta["tokens"]), int(meta["d_model"]))
# EVOLVE-BLOCK-END
