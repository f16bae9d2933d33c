"""Trusted reference: per-row cross-entropy of logits over a 128k vocabulary (float32 out)."""

import torch
import torch.nn as nn
import torch.nn.functional as F

VOCAB = 128256  # Llama-3 vocabulary


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        x = logits.to(torch.promote_types(logits.dtype, torch.float32))
        return F.cross_entropy(x, targets, reduction="none")


def get_inputs(rows: int = 4096, vocab: int = VOCAB, dtype: str = "bfloat16"):
    logits = torch.randn(rows, vocab, dtype=getattr(torch, dtype))
    targets = torch.randint(0, vocab, (rows,), dtype=torch.int64)
    return [logits, targets]


def get_init_inputs():
    return []
