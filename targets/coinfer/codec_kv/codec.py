"""Seed codec: int8 per token. The front blocks' keys and values, [layer, 2, heads, T,
head_dim], are cut into rows, one block's keys (or values) of one token each (heads x
head_dim values), keys and values alike; each row is scaled by its largest magnitude and
rounded to BITS-bit signed integers, sent as BITS bit planes (bytes at 8), its scale as
float32. At BITS = 8, cut after layer 4, width 128: 4 x 2 x (128 + 4) = 1056 bytes per
token (bf16: 2048)."""

import numpy as np

# EVOLVE-BLOCK-START
BITS = 8  # knob: int 2..8


def _rows(kv):
    """[layer, 2, heads, T, head_dim] -> [layer * 2 * T, heads * head_dim]."""
    layer, two, heads, tokens, head_dim = kv.shape
    return kv.transpose(0, 1, 3, 2, 4).reshape(layer * two * tokens, heads * head_dim)


def _pack(q, bits):
    """uint8 values below 2**bits, ``bits`` bits each: one bit plane after another."""
    if bits == 8:
        return q.tobytes()
    return b"".join(np.packbits((q >> j) & 1).tobytes() for j in range(bits))


def _unpack(data, bits, count):
    if bits == 8:
        return np.frombuffer(data, dtype=np.uint8, count=count)
    size = -(-count // 8)
    out = np.zeros(count, dtype=np.uint8)
    for j in range(bits):
        plane = np.frombuffer(data, dtype=np.uint8, count=size, offset=j * size)
        out |= np.unpackbits(plane, count=count) << j
    return out


def encode(kv, meta):
    x = _rows(np.asarray(kv, dtype=np.float32))
    levels = 2 ** (BITS - 1) - 1
    scale = np.abs(x).max(axis=1, keepdims=True) / levels
    scale[scale == 0] = 1.0
    q = (np.clip(np.rint(x / scale), -levels, levels) + levels).astype(np.uint8)
    return scale.astype(np.float32).tobytes() + _pack(q, BITS)


def decode(payload, meta):
    layer, heads, head_dim, tokens = (int(meta[k]) for k in ("layer", "heads", "head_dim",
                                                              "tokens"))
    rows, width = layer * 2 * tokens, heads * head_dim
    levels = 2 ** (BITS - 1) - 1
    scale = np.frombuffer(payload, dtype=np.float32, count=rows).reshape(rows, 1)
    q = _unpack(payload[4 * rows :], BITS, rows * width).reshape(rows, width)
    x = (q.astype(np.float32) - levels) * scale
    return x.reshape(layer, 2, tokens, heads, head_dim).transpose(0, 1, 3, 2, 4)
# EVOLVE-BLOCK-END
