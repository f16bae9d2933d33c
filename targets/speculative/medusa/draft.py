"""Medusa-style draft: parallel heads on the target's last hidden state.

Head ``i`` maps the target's top-layer feature at position ``t`` through a residual
block to the target's LM head and predicts the token at ``t + 2 + i`` (the target itself
predicts ``t + 1``). All heads run in one pass; none sees the tokens it drafts before.
"""

import torch.nn.functional as F
from torch import nn

from evaluators.speculative.api import Draft, TargetView

# EVOLVE-BLOCK-START
N_HEADS = 4  # knob: int 1..6
HIDDEN_MULT = 1  # knob: choices=[1, 2]
LR = 3e-3  # knob: float 1e-4..1e-2 log
BATCH = 16  # knob: choices=[8, 16, 32]


class ResHead(nn.Module):
    def __init__(self, d: int):
        super().__init__()
        self.up = nn.Linear(d, HIDDEN_MULT * d)
        self.down = nn.Linear(HIDDEN_MULT * d, d)
        nn.init.zeros_(self.down.weight)  # starts as the identity: the target's own head

    def forward(self, x):
        return x + self.down(F.silu(self.up(x)))


class MedusaDraft(Draft):
    feature_layers = (-1,)

    def __init__(self, target: TargetView):
        super().__init__()
        self.heads = nn.ModuleList(ResHead(target.d_model) for _ in range(N_HEADS))
        self.head = target.head

    def propose(self, k, pick):
        f = self.feats[-1]
        out = []
        for head in self.heads[:k]:
            out.append(pick(self.head(head(f))))
        return out

    def loss(self, batch):
        feats, labels = batch["feats"], batch["labels"]
        total = 0.0
        for i, head in enumerate(self.heads):
            shift = i + 1  # head i at position t predicts labels[t + i + 1]
            logits = self.head(head(feats[:, :-shift]))
            total = total + F.cross_entropy(logits.flatten(0, 1), labels[:, shift:].flatten())
        return total / len(self.heads)


# EVOLVE-BLOCK-END


def build(target: TargetView) -> Draft:
    return MedusaDraft(target)
