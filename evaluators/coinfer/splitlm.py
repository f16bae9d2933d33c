"""The project's trained language model cut after layer L: the front half on the trusted side
of the sender, the back half finished from whatever tensor crosses the cut.

The model is the speculative family's target (:mod:`evaluators.speculative.target`), loaded
from the same cache under the same key, so a night that has the speculative targets trains
no model of its own. A hidden state at the cut is the residual stream after ``layer``
blocks, ``[T, d_model]`` float32. The back half keeps its own KV cache of the layers it
runs, filled from the decoded states only: nothing of the exact states reaches it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from evaluators.speculative.model import KVCache, TinyLM


@dataclass
class Split:
    """``model`` cut after ``layer`` blocks (0 < layer < n_layers)."""

    model: TinyLM
    layer: int

    def __post_init__(self) -> None:
        n = len(self.model.blocks)
        if not 0 < self.layer < n:
            raise ValueError(f"the cut must lie between the blocks: 0 < layer < {n}, "
                             f"not {self.layer}")

    @property
    def d_model(self) -> int:
        return self.model.cfg.d_model

    def new_cache(self) -> KVCache:
        return self.model.new_cache(1)

    @torch.no_grad()
    def front(self, ids: torch.Tensor, cache: KVCache | None = None) -> torch.Tensor:
        """The hidden state after ``layer`` blocks for ``ids`` ``[T]`` continuing ``cache``
        (its length grows by T): ``[T, D]``."""
        m = self.model
        start = cache.length if cache is not None else 0
        t = ids.shape[0]
        pos = torch.arange(start, start + t)
        x = m.embed(ids[None]) + m.pos(pos)
        for i in range(self.layer):
            x = m.blocks[i](x, cache, i, start)
        if cache is not None:
            cache.length = start + t
        return x[0]

    @torch.no_grad()
    def back(self, hidden: torch.Tensor, cache: KVCache | None = None) -> torch.Tensor:
        """Logits ``[T, V]`` finished from the states ``hidden`` ``[T, D]`` at the cut,
        continuing ``cache`` (the back half's own)."""
        m = self.model
        start = cache.length if cache is not None else 0
        t = hidden.shape[0]
        x = hidden[None].to(torch.float32)
        for i in range(self.layer, len(m.blocks)):
            x = m.blocks[i](x, cache, i, start)
        if cache is not None:
            cache.length = start + t
        return m.head(x)[0]

    def front_cpu_s(self, prompts: list[torch.Tensor], steps: int) -> float:
        """This thread's CPU time for the front half of the work a decoder is budgeted
        against: each prompt's prefill, then ``steps`` one-token steps with a KV cache (what
        recomputing the layers before the cut from token ids costs)."""
        t0 = time.thread_time()
        for ids in prompts:
            cache = self.new_cache()
            self.front(ids, cache)
            for j in range(steps):
                self.front(ids[j : j + 1], cache)
        return time.thread_time() - t0


def greedy_reference(split: Split, ids: torch.Tensor, n_new: int) -> list[int]:
    """The model's own greedy continuation of ``ids`` (no cut), ``n_new`` tokens."""
    with torch.no_grad():
        cache = split.model.new_cache(1)
        logits, _ = split.model(ids[None], cache)
        out: list[int] = []
        nxt = int(logits[0, -1].argmax())
        for _ in range(n_new):
            out.append(nxt)
            logits, _ = split.model(torch.tensor([[nxt]]), cache)
            nxt = int(logits[0, -1].argmax())
        return out
