"""Cassettes: every LLM exchange of a night, one JSON object per line.

A record holds what is needed to audit a call and to replay it exactly::

    {"target": "softmax", "index": 3, "model": "gpt-5-mini", "parent_id": "c0002",
     "messages": [{"role": "system", "content": "..."}, ...],
     "response": "...", "finish_reason": "stop", "error": null,
     "usage": {"prompt_tokens": ..., "cached_tokens": ..., "completion_tokens": ...,
               "usd": ...},
     "attempts": 1, "elapsed_s": 4.2, "time": "2026-11-29T23:10:04+00:00"}

``index`` counts the calls for one target from 0. A failed call (retries exhausted) is
recorded with ``error`` set so that a replay rejects the same proposal.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from optimizer.errors import ConfigError


class CassetteWriter:
    """Appends records to a JSONL file, one flushed line per call (a crash loses none)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()

    def append(self, record: Mapping[str, Any]) -> None:
        line = json.dumps(record, ensure_ascii=False, sort_keys=True)
        with self._lock, self.path.open("a", encoding="utf-8") as fh:
            fh.write(line + "\n")
            fh.flush()


def read_cassette(path: Path) -> list[dict[str, Any]]:
    """All records of a cassette, in file order; a broken line is a ConfigError."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(
            "cassette file does not exist; record one with a night run", file=str(path)
        )
    records = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"line {number} is not JSON ({exc})", file=str(path)) from None
        if not isinstance(record, dict) or "target" not in record or "index" not in record:
            raise ConfigError(
                f"line {number} is not a cassette record (needs 'target' and 'index')",
                file=str(path),
            )
        records.append(record)
    return records
