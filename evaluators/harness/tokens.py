"""Token counts of rendered prompts: a real BPE tokenizer whose vocabulary ships in a package.

``o200k_base`` (the gpt-4o vocabulary) from the ``bpe-openai`` package, which carries the
merge table inside its wheel: nothing is downloaded at run time (tiktoken fetches its
vocabulary files on first use and fails on a machine without internet).

A prompt is a list of chat messages. Each renders as ``<start>role<sep>content<end>``: three
special tokens around the role's and the content's BPE tokens, so a prompt's token count is
the sum of its messages' counts, plus the three tokens that prime the reply. The special
tokens are negative ids here: they never collide with the vocabulary, and two prompts
share a token prefix exactly when their rendered messages do.
"""

from __future__ import annotations

import threading
from functools import lru_cache
from typing import Any

ENCODING = "o200k_base"
START, SEP, END, PRIME = -1, -2, -3, -4
REPLY_PRIMING = 3  # tokens that open the assistant's reply after the last message


class TokenizerMissing(RuntimeError):
    pass


_lock = threading.Lock()


@lru_cache(maxsize=1)
def encoding() -> Any:
    with _lock:
        try:
            import bpe_openai
        except ImportError as exc:  # pragma: no cover - an install without the dependency
            raise TokenizerMissing(
                "the harness kind counts tokens with the 'bpe-openai' package (its wheel "
                "ships the o200k_base vocabulary); install it: pip install bpe-openai") from exc
        return bpe_openai.get_encoding(ENCODING)


def encode(text: str) -> list[int]:
    """BPE tokens of ``text`` (the gpt-4o vocabulary, no special tokens)."""
    if not text:
        return []
    enc = encoding()
    out: list[int] = []
    step = 200_000  # the package refuses very long single inputs; split at a newline
    while len(text) > step:
        cut = text.rfind("\n", 0, step)
        cut = cut if cut > 0 else step
        out.extend(enc.encode_ordinary(text[:cut]))
        text = text[cut:]
    out.extend(enc.encode_ordinary(text))
    return out


def decode(tokens: list[int]) -> str:
    return str(encoding().decode([t for t in tokens if t >= 0]))


def message_tokens(role: str, content_tokens: list[int]) -> tuple[int, ...]:
    """One rendered chat message as tokens: start, role, separator, content, end."""
    return (START, *encode(role), SEP, *content_tokens, END)
