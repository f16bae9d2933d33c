"""Independent draft: a small transformer LM of its own, distilled from the target.

It reads only tokens (no target features), so it could also serve a target it was not
trained beside. With ``TIE_EMBEDDINGS`` and ``WIDTH`` equal to the target's width it
shares the target's (frozen) token embedding and LM head, which saves learning them.
"""

import torch
import torch.nn.functional as F

from evaluators.speculative.api import Draft, TargetView, common_prefix
from evaluators.speculative.model import LMConfig, TinyLM

# EVOLVE-BLOCK-START
# Ranges sized for a few trials of 8 s distillations on CPU: a draft layer costs about 0.12
# of a target step at batch 1 (0.07 of 0.60 ms, 2026-11-29), so 3-4 layers cannot pay off.
N_LAYERS = 1  # knob: int 1..2
WIDTH = 128  # knob: choices=[64, 128]
HEADS = 4  # knob: choices=[2, 4]
FFN_MULT = 2  # knob: choices=[1, 2, 4]
TIE_EMBEDDINGS = 1  # knob: choices=[0, 1]
LR = 3e-3  # knob: float 1e-3..2e-2 log
BATCH = 16  # knob: choices=[16, 32, 64]


class IndependentDraft(Draft):
    def __init__(self, target: TargetView):
        super().__init__()
        self.lm = TinyLM(LMConfig(target.vocab, WIDTH, N_LAYERS, HEADS, FFN_MULT, target.max_len))
        if TIE_EMBEDDINGS and WIDTH == target.d_model:
            self.lm.embed = target.embed  # shared and frozen: only the blocks learn
        self.cache = None
        self.cached: list[int] = []

    def reset(self, tokens, feats):
        super().reset(tokens, feats)
        self.cache = self.lm.new_cache(1)
        self.cached = []

    def propose(self, k, pick):
        n = common_prefix(self.cached, self.tokens)
        n = min(n, len(self.tokens) - 1)  # always feed the newest token again
        self.cache.truncate(n)
        feed = self.tokens[n:]
        dev = self.lm.pos.weight.device
        logits, _ = self.lm(torch.tensor([feed], device=dev), self.cache)
        self.cached = self.tokens[:]
        out: list[int] = []
        for i in range(k):
            tok = pick(logits[0, -1])
            out.append(tok)
            if i + 1 < k:
                logits, _ = self.lm(torch.tensor([[tok]], device=dev), self.cache)
                self.cached.append(tok)
        return out

    def loss(self, batch):
        logits, _ = self.lm(batch["tokens"])
        return F.cross_entropy(logits.flatten(0, 1), batch["labels"].flatten())


# EVOLVE-BLOCK-END


def build(target: TargetView) -> Draft:
    return IndependentDraft(target)
