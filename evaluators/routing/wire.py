"""The bytes one decision's arguments cross in: int64 and float64 columns plus a JSON tail.

Both sides import this module (the candidate's process imports no simulator). A message is

    b"B" + 7 pad bytes + u32 ints + u32 floats + int64[ints] + float64[floats] + JSON tail

where the tail (possibly empty) carries what is sent once: the fleet's fixed lists, a
region's name and round trips, a replica's accelerator. Values that do not fit the
columns (an int beyond int64, a float where an int belongs) make the whole message
``b"J" + JSON [ints, floats, tail]`` instead: slower, never wrong. The columns are exact
(float64 is what the simulator computes in) and about 3x cheaper than JSON on both
sides: for the Mooncake hour's requests 5.9 us to pack and 4.9 us to unpack against
17.4 us and 13.5 us (2-core development machine, 2026-12-01).
"""

from __future__ import annotations

import json
import struct
from array import array
from typing import Any

_HEAD = struct.Struct("<c7xII")  # 16 bytes: the columns start 8-byte aligned
_dumps = json.JSONEncoder(separators=(",", ":"), check_circular=False).encode


def pack(ints: list[int], floats: list[float], tail: Any = None) -> bytes:
    """One message; ``tail`` is any JSON value (None: no tail)."""
    try:
        i, f = array("q", ints), array("d", floats)
    except (OverflowError, TypeError):
        return b"J" + _dumps([ints, floats, tail]).encode()
    end = b"" if tail is None else _dumps(tail).encode()
    return b"".join((_HEAD.pack(b"B", len(i), len(f)), i.tobytes(), f.tobytes(), end))


def unpack(data: bytes) -> tuple[list[int], list[float], Any]:
    """``(ints, floats, tail)`` of a message from :func:`pack` (tail None when empty)."""
    if data[:1] == b"J":
        ints, floats, tail = json.loads(data[1:])
        return list(ints), list(floats), tail
    _, ni, nf = _HEAD.unpack_from(data)
    a = _HEAD.size
    b = a + 8 * ni
    c = b + 8 * nf
    if len(data) < c:
        raise ValueError(f"message of {len(data)} bytes is shorter than its columns ({c})")
    view: Any = memoryview(data)  # typeshed types tolist() as list[int], also for "d"
    return (view[a:b].cast("q").tolist(), view[b:c].cast("d").tolist(),
            json.loads(data[c:]) if len(data) > c else None)
