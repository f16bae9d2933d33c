"""N-gram (prompt lookup) draft: the baseline, no training.

Finds the most recent earlier occurrence of the sequence's last ``n`` tokens (longest
``n`` first) and proposes what followed it. Its draft distribution is a point mass, so a
sampled draft token is accepted with the target's probability of it.
"""

import torch

from evaluators.speculative.api import Draft, TargetView

# EVOLVE-BLOCK-START
MAX_NGRAM = 3  # knob: int 1..6
MIN_NGRAM = 1  # knob: int 1..3


class NgramDraft(Draft):
    trainable = False

    def __init__(self, target: TargetView):
        super().__init__()
        self.vocab = target.vocab

    def _lookup(self, k: int) -> list[int]:
        toks = self.tokens
        for n in range(min(MAX_NGRAM, len(toks) - 1), MIN_NGRAM - 1, -1):
            suffix = toks[-n:]
            for start in range(len(toks) - n - 1, -1, -1):
                if toks[start : start + n] == suffix:
                    return toks[start + n : start + n + k]
        return []

    def propose(self, k, pick):
        out = []
        for tok in self._lookup(k):
            logits = torch.full((self.vocab,), float("-inf"))
            logits[tok] = 0.0
            out.append(pick(logits))
        return out


# EVOLVE-BLOCK-END


def build(target: TargetView) -> Draft:
    return NgramDraft(target)
