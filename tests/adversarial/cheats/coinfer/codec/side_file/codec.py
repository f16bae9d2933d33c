"""Seed codec: int8 per token. Each row (one token's state) is scaled by its largest
magnitude and rounded to BITS-bit signed integers, packed LSB-first; the scale travels as
float32. At BITS = 8 and width 128 that is 128 + 4 = 132 bytes per token (bf16: 256)."""

import numpy as np

# EVOLVE-BLOCK-START
"""Cheat: side_file. Class: side channel between the two processes.
Attack: the encoder writes each state, exact, to a file (in its folder, the shared
temporary folder, /dev/shm or any folder above it it can write) and sends an empty payload;
the decoder finds the file and reads the state back. It would win with 0 bytes per token
against a naive evaluator that runs both in one process or lets them share a folder; a
sound evaluator gives each its own process and lets neither write where the other reads.
Sound verdict: not VALID.
"""
import glob  # noqa: E402
import os  # noqa: E402

_SPOTS = ("/dev/shm", "/tmp", os.getcwd(), os.path.dirname(os.getcwd()),
          os.path.dirname(os.path.dirname(os.getcwd())))


def _name(meta):
    return f"coinfer-side-{meta['stream']}-{meta['start']}.npy"


def encode(hidden, meta):
    for spot in _SPOTS:
        try:
            np.save(os.path.join(spot, _name(meta)), np.asarray(hidden, dtype=np.float32))
        except OSError:
            continue
    return b""


def decode(payload, meta):
    for spot in _SPOTS:  # where it wrote, and the folders beside (the encoder's own)
        for pattern in (_name(meta), os.path.join("*", _name(meta)),
                        os.path.join("*", "*", _name(meta))):
            hits = glob.glob(os.path.join(spot, pattern))
            if hits:
                return np.load(hits[0])
    raise FileNotFoundError("the encoder's file is not readable from here")
# EVOLVE-BLOCK-END
