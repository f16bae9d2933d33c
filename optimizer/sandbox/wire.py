"""The wire format of the sandbox's control socket, defined once for both sides.

Each message, in both directions: a 4-byte big-endian length, then that many bytes of
JSON. File descriptors (SCM_RIGHTS) ride on the length header. Only the standard library:
the inside half of the sandbox imports this before any candidate code.
"""

from __future__ import annotations

import json
import socket
import struct
from typing import Any


def send_msg(sock: socket.socket, obj: Any, fds: list[int] | None = None) -> None:
    body = json.dumps(obj).encode()
    header = struct.pack(">I", len(body))
    if fds:
        socket.send_fds(sock, [header], fds)
    else:
        sock.sendall(header)
    sock.sendall(body)


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise EOFError("control socket closed")
        buf += chunk
    return bytes(buf)


def recv_msg(sock: socket.socket, maxfds: int = 0) -> tuple[Any, list[int]]:
    fds: list[int] = []
    if maxfds:
        header, fds, _, _ = socket.recv_fds(sock, 4, maxfds)
        if not header:
            raise EOFError("control socket closed")
        if len(header) < 4:
            header += _recv_exact(sock, 4 - len(header))
    else:
        header = _recv_exact(sock, 4)
    (size,) = struct.unpack(">I", header)
    return json.loads(_recv_exact(sock, size)), fds
