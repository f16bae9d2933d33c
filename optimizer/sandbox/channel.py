"""The channel between a trusted harness and a candidate's process: frames and values.

Both sides use this module (the inside half imports it before any candidate code). A frame
is ``[u32 header length][u64 blob length][header JSON][blob]``; values cross as plain data
only, never objects with behaviour:

- ``None``, ``bool``, ``int``, ``float`` (NaN and infinities included), ``str``;
- lists, tuples and dicts with string keys of those (tuples and dicts are tagged so they
  come back as what they were);
- ``bytes``; numpy arrays of bool, integer, float or complex dtype (any ndarray subclass
  is converted to a plain array on the sending side, so a lazy result is materialised
  there, inside the timed call) and numpy scalars of those dtypes.

Large arrays go through the session's shared region when it has one (see
:class:`SharedRegion`): inputs are read in place, results copied once.

Anything else is refused with a :class:`BoundaryError` that names its type. Arrays travel
in the blob (``{"__nd__": [dtype, shape, offset, nbytes]}``), or, from the harness to the
candidate, in a shared memory region when the session has one and the array is large
(``{"__shm__": [dtype, shape, offset, nbytes]}``): the candidate then reads its inputs in
place instead of through two socket copies. numpy is imported only when an array is seen.
"""

from __future__ import annotations

import json
import math
import select
import socket
import struct
import time
from typing import Any

FRAME = struct.Struct("<IQ")
MAX_HEADER = 64 << 20
MAX_BLOB = 4 << 30
MAX_DEPTH = 64
SHM_MIN_BYTES = 1 << 16  # smaller arrays ride in the frame: a copy is cheaper than a lookup
_KINDS = set("biufc")  # numpy dtype kinds that may cross: bool, int, uint, float, complex


class BoundaryError(TypeError):
    """A value that cannot cross the boundary (the message names its type and where)."""


class ChannelClosed(EOFError):
    """The other side closed the channel (or died)."""


# -- values ---------------------------------------------------------------------------------


_PLAIN = (int, str, bool, type(None))


def _plain_list(value: list[Any] | tuple[Any, ...]) -> bool:
    """A flat list of plain scalars (the common case, encoded without recursion)."""
    for v in value:
        t = type(v)
        if t is float:
            if v - v != 0.0:  # NaN or an infinity
                return False
        elif t not in _PLAIN:
            return False
    return True


def _plain_dict(value: dict[Any, Any]) -> bool:
    """A dict of string keys and plain values (scalars or flat lists of them): a record such
    as a policy's view of one message, encoded without recursion."""
    for k, v in value.items():
        if type(k) is not str:
            return False
        t = type(v)
        if t in _PLAIN:
            continue
        if t is float:
            if v - v != 0.0:
                return False
        elif t is not list or not _plain_list(v):
            return False
    return True


class Encoder:
    """Turns a value into a JSON-able tree plus binary buffers (or shared-memory slots)."""

    def __init__(self, shm: Any = None):
        self.buffers: list[memoryview] = []
        self.size = 0
        self.shm = shm  # a SharedRegion the receiver maps too, or None

    def encode(self, value: Any, where: str = "value", depth: int = 0) -> Any:
        t = type(value)
        if t is str or t is int or t is bool or value is None:  # the common case, first
            return value
        if depth > MAX_DEPTH:
            raise BoundaryError(f"{where}: nested deeper than {MAX_DEPTH} levels")
        if isinstance(value, bool | str):
            return value
        if isinstance(value, int):
            return int(value)
        if isinstance(value, float):
            return float(value) if math.isfinite(value) else {"__f__": repr(float(value))}
        if isinstance(value, list):
            if type(value) is list:
                if _plain_list(value):
                    return value
                # rows of scalars (a plan's items) and lists of records (a view's messages),
                # the common nested cases, checked without a call per element
                if all(type(v) is list and _plain_list(v) for v in value):
                    return value
                if all(type(v) is dict and _plain_dict(v) for v in value):
                    return [{"__dict__": dict(v)} for v in value]
            return [self.encode(v, f"{where}[{i}]", depth + 1) for i, v in enumerate(value)]
        if isinstance(value, tuple):
            if type(value) is tuple and _plain_list(value):
                return {"__tuple__": list(value)}
            return {"__tuple__": [self.encode(v, f"{where}[{i}]", depth + 1)
                                  for i, v in enumerate(value)]}
        if isinstance(value, dict):
            if type(value) is dict and _plain_dict(value):
                return {"__dict__": dict(value)}
            out = {}
            for k, v in value.items():
                if not isinstance(k, str):
                    raise BoundaryError(f"{where}: dict keys must be strings, not "
                                        f"{type(k).__name__}")
                out[k] = self.encode(v, f"{where}[{k!r}]", depth + 1)
            return {"__dict__": out}
        if isinstance(value, bytes | bytearray | memoryview):
            data = memoryview(bytes(value))
            return {"__bytes__": [self._add(data), data.nbytes]}
        mod = type(value).__module__.split(".")[0]
        if mod == "numpy":
            return self._numpy(value, where)
        if hasattr(value, "__array__") and mod != "torch":
            return self._numpy(_as_array(value, where), where)
        raise BoundaryError(
            f"{where}: a value of type {type(value).__module__}.{type(value).__qualname__} "
            "cannot cross the boundary; give numbers, strings, lists, tuples, dicts, bytes "
            "or numpy arrays"
        )

    def _numpy(self, value: Any, where: str) -> Any:
        import numpy as np

        if isinstance(value, np.generic):
            dt = value.dtype
            if dt.kind not in _KINDS:
                raise BoundaryError(f"{where}: numpy scalar of dtype {dt} cannot cross")
            item = value.item()
            if isinstance(item, complex):
                item = [item.real, item.imag]
            elif isinstance(item, float) and not math.isfinite(item):
                item = {"__f__": repr(item)}
            return {"__np__": [dt.str, item]}
        arr = _as_array(value, where)
        if arr.dtype.kind not in _KINDS or arr.dtype.fields is not None:
            raise BoundaryError(f"{where}: an array of dtype {arr.dtype} cannot cross (bool, "
                                "integer, float and complex arrays can)")
        arr = np.ascontiguousarray(arr)
        if self.shm is not None and arr.nbytes >= SHM_MIN_BYTES:
            offset = self.shm.put(arr)
            if offset is not None:
                return {"__shm__": [arr.dtype.str, list(arr.shape), offset, arr.nbytes]}
        offset = self._add(memoryview(arr).cast("B"))  # type: ignore[arg-type]
        return {"__nd__": [arr.dtype.str, list(arr.shape), offset, arr.nbytes]}

    def _add(self, view: memoryview) -> int:
        offset = self.size
        self.buffers.append(view)
        self.size += view.nbytes
        return offset


def _as_array(value: Any, where: str) -> Any:
    import numpy as np

    try:
        return np.asarray(value)  # an ndarray subclass or array-like becomes a plain array
    except Exception as exc:  # noqa: BLE001 - whatever a hostile __array__ raises
        raise BoundaryError(f"{where}: could not be turned into an array: "
                            f"{type(exc).__name__}: {exc}") from None


def decode(tree: Any, blob: Any, shm: Any = None, copy_shm: bool = False) -> Any:
    """The value :class:`Encoder` encoded. Arrays are views of ``blob`` (a fresh buffer per
    frame) or of the shared region; ``copy_shm`` copies the latter out (the harness does:
    the region is reused by the next request)."""
    if isinstance(tree, list):
        if all(type(v) is not list and type(v) is not dict for v in tree):
            return tree
        # rows of scalars (a plan's items), as the encoder sends them: no call per row
        if all(type(v) is list and all(type(x) is not list and type(x) is not dict for x in v)
               for v in tree):
            return tree
        return [decode(v, blob, shm, copy_shm) for v in tree]
    if not isinstance(tree, dict):
        return tree
    if "__dict__" in tree:
        d = tree["__dict__"]
        if type(d) is dict and all(type(v) is not dict and (type(v) is not list or all(
                type(x) is not list and type(x) is not dict for x in v)) for v in d.values()):
            return d  # plain values only (as the encoder's record fast path sends them)
        return {k: decode(v, blob, shm, copy_shm) for k, v in d.items()}
    if "__tuple__" in tree:
        return tuple(decode(tree["__tuple__"], blob, shm, copy_shm))
    if "__f__" in tree:
        return float(tree["__f__"])
    if "__bytes__" in tree:
        offset, nbytes = tree["__bytes__"]
        if offset < 0 or offset + nbytes > len(blob):
            raise BoundaryError("bytes out of the frame's range")
        return bytes(blob[offset : offset + nbytes])
    if "__nd__" in tree or "__shm__" in tree:
        import numpy as np

        in_shm = "__shm__" in tree
        dtype_s, shape, offset, nbytes = tree["__shm__" if in_shm else "__nd__"]
        dtype = np.dtype(dtype_s)
        if dtype.kind not in _KINDS or dtype.fields is not None:
            raise BoundaryError(f"array of dtype {dtype} refused")
        count = math.prod(shape)
        if count * dtype.itemsize != nbytes:
            raise BoundaryError("array header does not match its size")
        if in_shm and shm is None:
            raise BoundaryError("array in shared memory, but the session has none")
        if not in_shm and (offset < 0 or offset + nbytes > len(blob)):
            raise BoundaryError("array out of the frame's range")
        source = shm.view(offset, nbytes) if in_shm else blob
        arr = np.frombuffer(source, dtype=dtype, count=count,
                            offset=0 if in_shm else offset).reshape(shape)
        return arr.copy() if in_shm and copy_shm else arr
    if "__np__" in tree:
        import numpy as np

        dtype_s, item = tree["__np__"]
        dtype = np.dtype(dtype_s)
        if dtype.kind not in _KINDS:
            raise BoundaryError(f"numpy scalar of dtype {dtype} refused")
        if isinstance(item, list):
            item = complex(*item)
        elif isinstance(item, dict):
            item = float(item["__f__"])
        return dtype.type(item)
    raise BoundaryError(f"unknown tagged value {sorted(tree)[:3]}")


# -- frames ---------------------------------------------------------------------------------


_DUMPS = json.JSONEncoder(allow_nan=False, separators=(",", ":")).encode
_LOADS = json.JSONDecoder().decode


def pack(message: dict[str, Any], shm: Any = None) -> list[memoryview]:
    """``message`` (its values encoded as above) as the parts of one frame."""
    if shm is not None:
        shm.reset()
    enc = Encoder(shm)
    tree = {k: enc.encode(v, k) for k, v in message.items()}
    header = _DUMPS(tree).encode()
    return [memoryview(FRAME.pack(len(header), enc.size)), memoryview(header), *enc.buffers]


def transmit(sock: socket.socket, parts: list[memoryview]) -> None:
    total = sum(p.nbytes for p in parts)
    sent = sock.sendmsg(parts)
    while sent < total:  # a large frame: the kernel took part of it
        for i, part in enumerate(parts):
            if sent < part.nbytes:
                parts = [part[sent:], *parts[i + 1 :]]
                break
            sent -= part.nbytes
        total = sum(p.nbytes for p in parts)
        sent = sock.sendmsg(parts)


def send(sock: socket.socket, message: dict[str, Any], shm: Any = None) -> None:
    """Send ``message`` as one frame."""
    transmit(sock, pack(message, shm))


def spin(poller: select.poll, seconds: float) -> bool:
    """Whether ``poller`` reports input (or EOF) within ``seconds``, asked without blocking
    all the while: a busy wait, which spares the sleep and wake-up (a context switch) that a
    blocking wait costs, at the price of a core while it lasts. The clock is read after each
    poll, so the wait overruns ``seconds`` by one poll at most."""
    check, clock = poller.poll, time.perf_counter
    end = clock() + seconds
    while not check(0):
        if clock() >= end:
            return False
    return True


def _recv_into(sock: socket.socket, view: memoryview) -> None:
    got = 0
    while got < view.nbytes:
        n = sock.recv_into(view[got:])
        if n == 0:
            raise ChannelClosed("the other side closed the channel")
        got += n


_FIRST = 1 << 16  # one read takes a whole small frame: a system call per message, not three


def recv(sock: socket.socket, shm: Any = None, copy_shm: bool = False) -> dict[str, Any]:
    """One frame, decoded. ChannelClosed on EOF; BoundaryError on a malformed frame."""
    return unpack(*recv_raw(sock), shm, copy_shm)


def recv_raw(sock: socket.socket) -> tuple[bytes | bytearray, bytearray]:
    """One frame's header and blob, not yet decoded. Frames alternate (a request, then its
    answer), so a read never takes the start of the next frame."""
    first = bytearray(_FIRST)
    n = sock.recv_into(first)
    if n == 0:
        raise ChannelClosed("the other side closed the channel")
    while n < FRAME.size:
        k = sock.recv_into(memoryview(first)[n:])
        if k == 0:
            raise ChannelClosed("the other side closed the channel")
        n += k
    hlen, blen = FRAME.unpack_from(first)
    if hlen > MAX_HEADER or blen > MAX_BLOB:
        raise BoundaryError(f"frame of {hlen} + {blen} bytes exceeds the limits")
    total = FRAME.size + hlen + blen
    if total <= _FIRST:
        if n < total:
            _recv_into(sock, memoryview(first)[n:total])
        header = bytes(first[FRAME.size : FRAME.size + hlen])
        blob = first[FRAME.size + hlen : total] if blen else bytearray()
        return header, blob
    header_buf = bytearray(hlen)
    blob = bytearray(blen)
    have = first[FRAME.size:n]
    take = min(len(have), hlen)
    header_buf[:take] = have[:take]
    if take < hlen:
        _recv_into(sock, memoryview(header_buf)[take:])
    rest = have[take:]
    blob[: len(rest)] = rest
    if len(rest) < blen:
        _recv_into(sock, memoryview(blob)[len(rest):])
    return header_buf, blob


def unpack(
    header: bytes | bytearray, blob: bytearray, shm: Any = None, copy_shm: bool = False
) -> dict[str, Any]:
    try:
        tree = _LOADS(header.decode())
    except (ValueError, UnicodeDecodeError) as exc:
        raise BoundaryError(f"frame header is not JSON: {exc}") from None
    if not isinstance(tree, dict):
        raise BoundaryError("frame header is not an object")
    return {k: decode(v, blob, shm, copy_shm) for k, v in tree.items()}


class SharedRegion:
    """A memory region both sides map (a memfd the harness creates and passes over the
    channel), in two halves: the harness puts large inputs in the first before a request
    and the candidate reads them in place; the candidate's side puts large results in the
    second, and the harness copies them out once the whole answer has arrived (after its
    clock stopped). Each side writes only its own half (``base``..``limit``) and allocates
    from its start at every message (``reset``); offsets are absolute."""

    def __init__(self, fd: int, size: int, half: int = 0, owns: bool = True):
        import mmap

        self.fd = fd
        self.size = size
        self.map = mmap.mmap(fd, size)
        self.base = 0 if half == 0 else size // 2
        self.limit = size // 2 if half == 0 else size
        self.used = self.base
        self.owns = owns
        self.slots: list[tuple[int, Any]] = []  # (offset, array) put since the last reset

    @classmethod
    def create(cls, size: int) -> SharedRegion:
        import os

        fd = os.memfd_create("optimizer-channel", os.MFD_CLOEXEC)
        os.ftruncate(fd, size)
        return cls(fd, size)

    def reset(self) -> None:
        self.used = self.base
        self.slots = []

    def changed_slots(self) -> list[int]:
        """Indices of the arrays put since the last reset whose bytes in the region are no
        longer what was put (the other side wrote into its inputs)."""
        import numpy as np

        out = []
        for i, (offset, arr) in enumerate(self.slots):
            now = np.frombuffer(self.view(offset, arr.nbytes), dtype=np.uint8)
            if not np.array_equal(now, arr.reshape(-1).view(np.uint8)):
                out.append(i)
        return out

    def put(self, arr: Any) -> int | None:
        offset = (self.used + 63) // 64 * 64
        if offset + arr.nbytes > self.limit:
            return None
        self.map[offset : offset + arr.nbytes] = memoryview(arr).cast("B")
        self.used = offset + arr.nbytes
        self.slots.append((offset, arr))
        return offset

    def view(self, offset: int, nbytes: int) -> memoryview:
        if offset < 0 or offset + nbytes > self.size:
            raise BoundaryError("shared-memory slot out of range")
        return memoryview(self.map)[offset : offset + nbytes]

    def close(self) -> None:
        import os

        try:
            self.map.close()
        except BufferError:
            pass  # a view is still alive; the mapping goes with the process
        if self.owns:
            os.close(self.fd)
