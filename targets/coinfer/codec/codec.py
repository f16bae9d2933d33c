"""Seed codec: int8 per token. Each row (one token's state) is scaled by its largest
magnitude and rounded to BITS-bit signed integers, packed LSB-first; the scale travels as
float32. At BITS = 8 and width 128 that is 128 + 4 = 132 bytes per token (bf16: 256)."""

import numpy as np

# EVOLVE-BLOCK-START
BITS = 8  # knob: int 2..8


def _pack(q: np.ndarray, bits: int) -> bytes:
    """Unsigned integers below 2**bits, ``bits`` bits each, LSB-first."""
    if bits == 8:
        return q.astype(np.uint8).tobytes()
    planes = ((q[..., None] >> np.arange(bits, dtype=np.uint32)) & 1).astype(np.uint8)
    return np.packbits(planes.reshape(-1), bitorder="little").tobytes()


def _unpack(data: bytes, bits: int, count: int) -> np.ndarray:
    if bits == 8:
        return np.frombuffer(data, dtype=np.uint8, count=count).astype(np.int64)
    flat = np.unpackbits(np.frombuffer(data, dtype=np.uint8), bitorder="little")
    planes = flat[: count * bits].reshape(count, bits).astype(np.int64)
    return (planes << np.arange(bits, dtype=np.int64)).sum(-1)


def encode(hidden, meta):
    x = np.asarray(hidden, dtype=np.float32)
    levels = 2 ** (BITS - 1) - 1
    scale = np.abs(x).max(axis=1, keepdims=True) / levels
    scale[scale == 0] = 1.0
    q = np.clip(np.rint(x / scale), -levels, levels).astype(np.int64) + levels
    return scale.astype(np.float32).tobytes() + _pack(q.astype(np.uint32), BITS)


def decode(payload, meta):
    rows, width = int(meta["tokens"]), int(meta["d_model"])
    levels = 2 ** (BITS - 1) - 1
    scale = np.frombuffer(payload, dtype=np.float32, count=rows).reshape(rows, 1)
    q = _unpack(payload[4 * rows :], BITS, rows * width).reshape(rows, width)
    return (q - levels).astype(np.float32) * scale
# EVOLVE-BLOCK-END
