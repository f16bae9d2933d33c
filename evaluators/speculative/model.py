"""A small decoder-only transformer LM in pure torch, with a preallocated KV cache.

Used for the built-in target model and as a building block of draft models. The cache
is preallocated to ``max_len`` and carries a length, so that rolling back rejected draft
tokens is ``cache.truncate(n)`` (no copy). ``forward`` returns the logits and, on
request, the hidden states of chosen layers (the features EAGLE- and Medusa-style drafts
read).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class LMConfig:
    vocab: int
    d_model: int = 256
    n_layers: int = 6
    n_heads: int = 4
    ffn_mult: int = 4
    max_len: int = 512

    def to_json(self) -> dict[str, int]:
        return asdict(self)


class KVCache:
    """Keys and values of every layer for one batch, valid up to ``length``."""

    def __init__(self, n_layers: int, batch: int, n_heads: int, max_len: int, head_dim: int,
                 device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32):
        shape = (batch, n_heads, max_len, head_dim)
        self.k = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(n_layers)]
        self.v = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(n_layers)]
        self.length = 0
        self.max_len = max_len

    def truncate(self, length: int) -> None:
        if not 0 <= length <= self.length:
            raise ValueError(f"cannot truncate a cache of length {self.length} to {length}")
        self.length = length


def causal_mask(t: int, start: int, device: torch.device) -> torch.Tensor:
    """Query i (absolute position start+i) sees keys 0..start+i."""
    return torch.ones(t, start + t, dtype=torch.bool, device=device).tril(start)


class Block(nn.Module):
    def __init__(self, d: int, n_heads: int, ffn_mult: int):
        super().__init__()
        self.n_heads = n_heads
        self.norm1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d, bias=False)
        self.proj = nn.Linear(d, d, bias=False)
        self.norm2 = nn.LayerNorm(d)
        self.up = nn.Linear(d, ffn_mult * d, bias=False)
        self.down = nn.Linear(ffn_mult * d, d, bias=False)

    def forward(self, x: torch.Tensor, cache: KVCache | None = None, layer: int = 0,
                start: int = 0, mask: torch.Tensor | None = None) -> torch.Tensor:
        q, k, v = self._qkv(x)
        t = x.shape[1]
        if cache is None:
            att = F.scaled_dot_product_attention(q, k, v, is_causal=t > 1)
        else:
            end = start + t
            if end > cache.max_len:
                raise ValueError(f"sequence of {end} tokens exceeds the cache's {cache.max_len}")
            cache.k[layer][:, :, start:end] = k
            cache.v[layer][:, :, start:end] = v
            keys, values = cache.k[layer][:, :, :end], cache.v[layer][:, :, :end]
            if t > 1 and mask is None:
                mask = causal_mask(t, start, x.device)
            att = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask)
        return self._rest(x, att)

    def _qkv(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        h = self.n_heads
        return self.qkv(self.norm1(x)).view(b, t, 3, h, d // h).permute(2, 0, 3, 1, 4)

    def _rest(self, x: torch.Tensor, att: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        x = x + self.proj(att.transpose(1, 2).reshape(b, t, d))
        return x + self.down(F.gelu(self.up(self.norm2(x)), approximate="tanh"))

    def step(self, x: torch.Tensor, keys: torch.Tensor, values: torch.Tensor,
             pos: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """The cached forward with static shapes (what a CUDA graph can replay): ``x``
        ``[1, T, D]`` at absolute positions ``pos`` ``[T]`` (a tensor, so a replay reads
        the cache's length from memory); its keys and values are written into the whole
        preallocated cache ``keys``/``values`` ``[1, H, L, D/H]``, and attention runs over
        all ``L`` slots with ``mask`` ``[T, L]`` hiding those after each query's position."""
        q, k, v = self._qkv(x)
        keys.index_copy_(2, pos, k)
        values.index_copy_(2, pos, v)
        return self._rest(x, F.scaled_dot_product_attention(q, keys, values, attn_mask=mask))


class TinyLM(nn.Module):
    """Token + learned position embeddings, pre-norm blocks, tied LM head."""

    def __init__(self, cfg: LMConfig):
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab, cfg.d_model)
        self.pos = nn.Embedding(cfg.max_len, cfg.d_model)
        self.blocks = nn.ModuleList(
            Block(cfg.d_model, cfg.n_heads, cfg.ffn_mult) for _ in range(cfg.n_layers)
        )
        self.norm = nn.LayerNorm(cfg.d_model)
        self.apply(self._init)
        for blk in self.blocks:  # residual branches scaled down with depth (GPT-2 style)
            assert isinstance(blk, Block)
            nn.init.normal_(blk.proj.weight, std=0.02 / math.sqrt(2 * cfg.n_layers))
            nn.init.normal_(blk.down.weight, std=0.02 / math.sqrt(2 * cfg.n_layers))

    @staticmethod
    def _init(mod: nn.Module) -> None:
        if isinstance(mod, nn.Linear | nn.Embedding):
            nn.init.normal_(mod.weight, std=0.02)

    def new_cache(self, batch: int = 1, max_len: int | None = None) -> KVCache:
        c = self.cfg
        p = self.embed.weight
        return KVCache(c.n_layers, batch, c.n_heads, max_len or c.max_len, c.d_model // c.n_heads,
                       device=p.device, dtype=p.dtype)

    def head(self, hidden: torch.Tensor) -> torch.Tensor:
        """Logits from a top-layer hidden state (final norm + tied embedding)."""
        return F.linear(self.norm(hidden), self.embed.weight)

    def forward(self, ids: torch.Tensor, cache: KVCache | None = None,
                feature_layers: tuple[int, ...] = ()) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Logits ``[B, T, V]`` and the hidden states of ``feature_layers`` concatenated
        (``[B, T, len * D]``, layer -1 = the top block's output) or None.

        With a cache, ``ids`` continue the cached sequence and the cache grows by T.
        """
        start = cache.length if cache is not None else 0
        t = ids.shape[1]
        pos = torch.arange(start, start + t, device=ids.device)
        x = self.embed(ids) + self.pos(pos)
        n = len(self.blocks)
        wanted = {i % n for i in feature_layers}
        feats: dict[int, torch.Tensor] = {}
        # one mask shared by all layers of a verification pass
        mask = causal_mask(t, start, ids.device) if cache is not None and t > 1 else None
        for i, blk in enumerate(self.blocks):
            x = blk(x, cache, i, start, mask)
            if i in wanted:
                feats[i] = x
        if cache is not None:
            cache.length = start + t
        out = torch.cat([feats[i % n] for i in feature_layers], -1) if feature_layers else None
        return self.head(x), out


class TargetHead(nn.Module):
    """The parts of a :class:`TinyLM` a draft may share (:class:`~evaluators.speculative.api.
    TargetView`): its token embedding and LM head (final norm + tied embedding), without the
    blocks. A draft's own process gets this, not the target: it cannot run the target, so it
    cannot decode ahead of the trusted side or learn what the target will say."""

    KEYS = ("embed.weight", "norm.weight", "norm.bias")

    def __init__(self, cfg: LMConfig):
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab, cfg.d_model)
        self.norm = nn.LayerNorm(cfg.d_model)

    def head(self, hidden: torch.Tensor) -> torch.Tensor:
        return F.linear(self.norm(hidden), self.embed.weight)
