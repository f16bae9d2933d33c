"""A scripted OpenAI-compatible chat-completions server on 127.0.0.1 (real HTTP).

Each POST to ``/v1/chat/completions`` takes the next :class:`Reply` from the script. A
200 reply gets a real response body whose usage the server computes itself: prompt tokens
are the characters of all message contents / 4, and cached tokens are the longest common
prefix with any earlier request's message text / 4 (a prompt cache that hits on identical
prefixes, as providers' do). Every request body is kept in ``requests``.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

CHARS_PER_TOKEN = 4


@dataclass
class Reply:
    content: str = ""
    status: int = 200
    finish_reason: str = "stop"
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0
    raw: bytes | None = None  # sent as-is (garbled JSON)
    usage: bool = True  # False: no usage object in the body


def prompt_text(body: dict[str, Any]) -> str:
    return "".join(str(m.get("content", "")) for m in body.get("messages", []))


def _common_prefix(a: str, b: str) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


class FakeOpenAIServer:
    def __init__(self, script: Iterable[Reply] = ()) -> None:
        self.script: list[Reply] = list(script)
        self.requests: list[dict[str, Any]] = []
        self.usages: list[dict[str, int]] = []  # what the server reported, per 200 answer
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                length = int(self.headers.get("Content-Length", 0))
                body = json.loads(self.rfile.read(length))
                with server._lock:
                    earlier = [prompt_text(r) for r in server.requests]
                    server.requests.append(body)
                    reply = server.script.pop(0) if server.script else Reply(status=500)
                if reply.delay_s:
                    time.sleep(reply.delay_s)
                if reply.raw is not None:
                    payload = reply.raw
                elif reply.status != 200:
                    payload = json.dumps(
                        {"error": {"message": f"scripted {reply.status}", "type": "scripted"}}
                    ).encode()
                else:
                    text = prompt_text(body)
                    cached = max((_common_prefix(text, e) for e in earlier), default=0)
                    usage = {
                        "prompt_tokens": len(text) // CHARS_PER_TOKEN,
                        "completion_tokens": max(1, len(reply.content) // CHARS_PER_TOKEN),
                        "prompt_tokens_details": {"cached_tokens": cached // CHARS_PER_TOKEN},
                    }
                    usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
                    data: dict[str, Any] = {
                        "id": f"chatcmpl-{len(server.requests)}",
                        "object": "chat.completion",
                        "created": 0,
                        "model": body.get("model", ""),
                        "choices": [
                            {
                                "index": 0,
                                "message": {"role": "assistant", "content": reply.content},
                                "finish_reason": reply.finish_reason,
                            }
                        ],
                    }
                    if reply.usage:
                        data["usage"] = usage
                        with server._lock:
                            server.usages.append(usage)
                    payload = json.dumps(data).encode()
                try:
                    self.send_response(reply.status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(payload)))
                    for key, value in reply.headers.items():
                        self.send_header(key, value)
                    self.end_headers()
                    self.wfile.write(payload)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client timed out and went away

            def log_message(self, *args: Any) -> None:
                pass

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    def __enter__(self) -> FakeOpenAIServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
