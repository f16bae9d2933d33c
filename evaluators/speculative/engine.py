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

A replayed step's cost does not grow with its tokens: on an H200 (2026-12-02, the ``h200``
target) a 3-token step took 3.24 ms and a 5-token step 2.54 ms, as the matrix kernels chosen
for each row count differ. :meth:`calibrate` times every captured step and pads a step of
``t`` tokens up to the cheapest captured size at or above it (:func:`choose_padding`), as
serving engines pad a batch up to a captured graph's size. The pads are copies of the last
token written after the real ones: attention masks every slot past a query, so the real
positions' outputs do not see them, the cache's length counts only the real tokens, and the
next step overwrites the pads' slots.
"""

from __future__ import annotations

import statistics

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
        # (tokens, with features) -> the captured size such a step is padded to, and what
        # calibrate() measured of each captured step (ms, replayed)
        self.pad_to: dict[tuple[int, bool], int] = {}
        self.step_ms: dict[tuple[int, bool], float] = {}

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
        size = self.pad_to.get((t, want), t)
        if size > t and start + size <= self.max_len:
            ids = torch.cat([ids, ids[:, -1:].expand(1, size - t)], 1)
        logits, every = self._graphs[want](ids)  # eager where nothing was captured
        if ids.shape[1] > t:  # the pads' outputs are dropped
            logits = logits[:, :t]
            every = every[:, :t] if every is not None else None
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

    @torch.no_grad()
    def calibrate(self, sizes: list[int] | tuple[int, ...] | range, reps: int = 20,
                  margin: float = 0.05) -> dict[tuple[int, bool], int]:
        """Time every captured step of ``sizes`` tokens (replays on the GPU, the median of
        ``reps``) and pad each size to the cheapest captured one at or above it, when that
        saves more than ``margin`` (:func:`choose_padding`). Nothing on the CPU, where a step's
        cost grows with its tokens. Like capturing, it writes into the cache: call it before a
        decode. Returns the padding chosen (also in ``pad_to``; costs in ``step_ms``)."""
        if not self.uses_graphs:
            return {}
        wanted = {int(s) for s in sizes}
        for t, want in self.captured:
            if t not in wanted:
                continue
            ids = torch.zeros(1, t, dtype=torch.int64, device=self.device)
            self._start.fill_(0)
            graphs = self._graphs[want]
            for _ in range(3):
                graphs(ids)
            times = []
            for _ in range(reps):
                begin = torch.cuda.Event(enable_timing=True)
                end = torch.cuda.Event(enable_timing=True)
                begin.record()
                graphs(ids)
                end.record()
                end.synchronize()
                times.append(begin.elapsed_time(end))
            self.step_ms[(t, want)] = statistics.median(times)
        self.cache.length = 0
        self.pad_to = {}
        for want in (False, True):
            costs = {t: ms for (t, w), ms in self.step_ms.items() if w == want}
            self.pad_to.update({(t, want): m for t, m in choose_padding(costs, margin).items()})
        return dict(self.pad_to)

    def describe(self) -> dict[str, object]:
        """What the engine measured and chose (for an evaluation's artifacts)."""
        return {"graphs": self.uses_graphs, "captured": len(self.captured),
                "step_ms": {f"{t}{'+features' if w else ''}": round(ms, 4)
                            for (t, w), ms in sorted(self.step_ms.items())},
                "pad_to": {f"{t}{'+features' if w else ''}": m
                           for (t, w), m in sorted(self.pad_to.items())}}

    @property
    def captured(self) -> list[tuple[int, bool]]:
        """(tokens, with features) of every captured step."""
        return sorted((shape[0][0][1], want) for want, g in self._graphs.items()
                      for shape in g.shapes)


def choose_padding(costs: dict[int, float], margin: float = 0.05) -> dict[int, int]:
    """For each size in ``costs`` (step time by tokens), the cheapest size at or above it,
    where that is more than ``margin`` (a share) cheaper than the size itself; sizes that
    stay as they are are left out."""
    out = {}
    for t in sorted(costs):
        best = min((m for m in costs if m >= t), key=lambda m: (costs[m], m))
        if best != t and costs[best] < costs[t] * (1.0 - margin):
            out[t] = best
    return out
