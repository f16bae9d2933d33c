"""The ``coinfer`` kind, ``kv`` mode: a codec for the KV cache of the blocks before a cut.

The setting: the client ran blocks ``0..layer-1`` on the prompt; decoding continues on the
server, which holds the whole model but needs those blocks' keys and values for the prompt's
positions. What crosses, in one call per prompt, is that cache: a float32 array
``[layer, 2, heads, T, head_dim]`` (index 0 the keys, 1 the values), with ``meta`` =
``{"layer", "heads", "head_dim", "tokens", "start", "stream", "what": "kv"}``; token ids
never cross. The state at the cut is not this mode's question: the server's back blocks get
their prompt KV from the exact hidden state, so the prompt's own next-token distributions are
exact and only the tokens that follow can show what the codec lost.

Quality, on the server's side (:func:`server_quality`): its cache holds the decoded KV in the
front blocks at the prompt's positions, and its own exact computation everywhere else (the
back blocks, and every block for each new token). With ``ref`` the exact model's greedy
continuation (``n_new + 1`` tokens, the first given by the exact last prompt position):

- teacher-forced: ``ref[:n_new]`` is fed in one pass and the next-token distribution at each
  of those positions is compared with the exact model's (KL mean and p99, top-1 agreement);
- free-running: from ``ref[0]``, ``n_new`` greedy tokens, one per step, compared with
  ``ref[1:]`` up to the first difference (greedy agreement).

The evaluator around it (:mod:`evaluators.coinfer.codec`) is the states mode's: the same
sessions, checks on the payload and the decoded array, CPU clocks, gates and verdict. The
decoder's CPU budget is a share of the prefill of the front blocks on the same prompts (a
decoder that recovers the token ids and recomputes those blocks' KV pays at least that).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from evaluators.coinfer.quality import Tally
from evaluators.coinfer.splitlm import Split

Through = Callable[[np.ndarray, dict[str, Any]], np.ndarray]


def values_per_token(layer: int, d_model: int) -> int:
    """Values a prompt token adds to the cache of ``layer`` blocks: a key and a value of
    width ``d_model`` (heads x head_dim) in each."""
    return 2 * layer * d_model


@torch.no_grad()
def client_kv(split: Split, ids: torch.Tensor) -> np.ndarray:
    """The client's KV cache of the blocks before the cut for the prompt ``ids`` ``[T]``:
    float32 ``[layer, 2, heads, T, head_dim]``."""
    cache = split.new_cache()
    split.front(ids, cache)
    t = len(ids)
    per_block = [torch.stack([cache.k[i][0, :, :t], cache.v[i][0, :, :t]])
                 for i in range(split.layer)]
    return torch.stack(per_block).numpy().astype(np.float32, copy=True)


@torch.no_grad()
def server_quality(split: Split, ids: torch.Tensor, decoded: np.ndarray, ref: list[int],
                   tally: Tally) -> None:
    """The server continues the prompt ``ids`` with the ``decoded`` KV in its front blocks:
    the teacher-forced distributions and the free-running greedy text, into ``tally``."""
    model, t, n = split.model, len(ids), len(ref) - 1
    forced_ids = torch.tensor(ref[:n])
    exact, _ = model(torch.cat([ids, forced_ids])[None])
    cache = model.new_cache(1)
    model(ids[None], cache)  # the exact prompt KV of every block ...
    kv = torch.from_numpy(decoded)
    for i in range(split.layer):  # ... the front blocks' replaced by what crossed
        cache.k[i][0, :, :t] = kv[i, 0]
        cache.v[i][0, :, :t] = kv[i, 1]
    forced, _ = model(forced_ids[None], cache)
    tally.add_logits(exact[0, t:], forced[0])
    cache.truncate(t)
    got: list[int] = []
    nxt = ref[0]
    for _ in range(n):
        logits, _ = model(torch.tensor([[nxt]]), cache)
        nxt = int(logits[0, -1].argmax())
        got.append(nxt)
    tally.add_greedy(ref[1:], got)


def passes(split: Split, prompts: list[torch.Tensor], refs: list[list[int]],
           through: Through, tally: Tally) -> int:
    """Each prompt's front KV through the codec (one call), then the server's continuation;
    returns the tokens whose KV crossed."""
    tokens = 0
    for stream, (ids, ref) in enumerate(zip(prompts, refs, strict=True)):
        kv = client_kv(split, ids)
        meta = {"layer": split.layer, "heads": kv.shape[2], "head_dim": kv.shape[4],
                "tokens": len(ids), "start": 0, "stream": stream, "what": "kv"}
        server_quality(split, ids, through(kv, meta), ref, tally)
        tokens += len(ids)
    return tokens
