"""The decode engine of the trusted side: a static KV cache, and CUDA graphs on a GPU.

Serving engines (vLLM, SGLang, TensorRT-LLM) decode a batch-1 request on a preallocated KV
cache with every step replayed as a CUDA graph: eager PyTorch pays a kernel launch and
Python dispatch per operation, 11-14 ms per step on an H200 whatever the model's size,
against 1.4-5.7 ms replayed (0.37-8 B shapes, measured 2026-12-01). Measured eagerly, a
speedup from speculative decoding would be a speedup over a baseline no engine runs.

:class:`StaticDecoder` wraps a :class:`~evaluators.speculative.model.TinyLM` and answers
the same calls the decoding loop makes of a model (``new_cache``, ``model(ids, cache,
feature_layers)``, ``cfg``, ``embed``), so :func:`~evaluators.speculative.decoding.
plain_decode` (target-only decoding, the speedup's denominator) and :func:`~evaluators.
speculative.decoding.speculative_decode` run on one engine. A cached forward of ``T``
tokens on its cache is a static-shape step (:meth:`~evaluators.speculative.model.Block.
step`): the positions come from a device tensor, keys and values are written into the
whole cache and attention masks the slots past each query. On CUDA each ``(T, with
features)`` is captured once as a graph (:meth:`capture`) and replayed; on CPU the same
step runs eagerly. Any other call (a full forward, a batch) goes to the model unchanged.
"""

from __future__ import annotations

import torch

from evaluators.speculative.graphs import StepGraphs
from evaluators.speculative.model import Block, KVCache, TinyLM


class StaticDecoder:
    """Batch-1 decoding of ``model`` on one static cache of ``max_len`` positions."""

    def __init__(self, model: TinyLM, max_len: int | None = None):
        self.model = model
        self.cfg = model.cfg
        self.embed = model.embed
        self.max_len = int(max_len or model.cfg.max_len)
        if not 0 < self.max_len <= model.cfg.max_len:
            raise ValueError(f"max_len {self.max_len} is outside 1..{model.cfg.max_len}, the "
                             "model's positions")
        self.device = model.embed.weight.device
        self.cache = model.new_cache(1, self.max_len)
        self._start = torch.zeros((), dtype=torch.int64, device=self.device)
        self._slots = torch.arange(self.max_len, device=self.device)
        # a step without and one with every layer's hidden state (what drafts read)
        self._graphs = {want: StepGraphs(lambda ids, want=want: self._step(ids, want))
                        for want in (False, True)}
        self.uses_graphs = self.device.type == "cuda"

    # -- what the decoding loop calls --------------------------------------------------
    def new_cache(self, batch: int = 1, max_len: int | None = None) -> KVCache:
        """The static cache, emptied (batch 1 and at most ``max_len`` positions), or a
        fresh cache of the model for anything else."""
        if batch != 1 or (max_len or self.max_len) > self.max_len:
            return self.model.new_cache(batch, max_len)
        self.cache.length = 0
        return self.cache

    def __call__(self, ids: torch.Tensor, cache: KVCache | None = None,
                 feature_layers: tuple[int, ...] = ()) -> tuple[torch.Tensor,
                                                                torch.Tensor | None]:
        if cache is not self.cache or ids.shape[0] != 1:
            return self.model(ids, cache, feature_layers)
        t = int(ids.shape[1])
        start = cache.length
        if start + t > self.max_len:
            raise ValueError(f"sequence of {start + t} tokens exceeds the engine's cache of "
                             f"{self.max_len}")
        self._start.fill_(start)
        want = bool(feature_layers)
        logits, every = self._graphs[want](ids)  # eager where nothing was captured
        if self.uses_graphs:  # a replay's outputs are the graph's own buffers, overwritten
            logits = logits.clone()
            every = every.clone() if every is not None else None
        cache.length = start + t
        return logits, self._features(every, feature_layers)

    def _features(self, every: torch.Tensor | None,
                  layers: tuple[int, ...]) -> torch.Tensor | None:
        if every is None or not layers:
            return None
        n = self.cfg.n_layers
        return torch.cat([every[i % n] for i in layers], -1)[None]

    # -- the static step ---------------------------------------------------------------
    def _step(self, ids: torch.Tensor, want: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
        m = self.model
        pos = self._start + self._slots[: ids.shape[1]]
        mask = self._slots[None, :] <= pos[:, None]  # [T, L]: slots up to each query's
        x = m.embed(ids) + m.pos(pos)
        hidden = []
        for i, blk in enumerate(m.blocks):
            assert isinstance(blk, Block)
            x = blk.step(x, self.cache.k[i], self.cache.v[i], pos, mask)
            if want:
                hidden.append(x[0])
        every = torch.stack(hidden) if want else None
        return m.head(x), every

    @torch.no_grad()
    def capture(self, sizes: list[int] | tuple[int, ...], features: bool = True) -> None:
        """Capture the steps of ``sizes`` tokens (1 for target-only decoding, k + 1 for a
        verification of k drafts, the prompt's length for the prefill), without and (with
        ``features``) with the hidden states drafts read, as CUDA graphs; nothing on CPU.
        Capturing writes into the cache, so it is done before a decode, never during one."""
        if not self.uses_graphs:
            return
        for t in sorted({int(s) for s in sizes}):
            if not 0 < t <= self.max_len:
                raise ValueError(f"cannot capture a step of {t} tokens in a cache of "
                                 f"{self.max_len}")
            for want in (False, True) if features else (False,):
                self._start.fill_(0)
                self._graphs[want].capture(
                    torch.zeros(1, t, dtype=torch.int64, device=self.device))
        torch.cuda.synchronize(self.device)
        self.cache.length = 0

    @property
    def captured(self) -> list[tuple[int, bool]]:
        """(tokens, with features) of every captured step."""
        return sorted((shape[0][0][1], want) for want, g in self._graphs.items()
                      for shape in g.shapes)
