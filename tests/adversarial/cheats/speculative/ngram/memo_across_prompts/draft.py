"""N-gram (prompt lookup) draft: the baseline, no training.

Finds the most recent earlier occurrence of the sequence's last ``n`` tokens (longest
``n`` first) and proposes what followed it. Its draft distribution is a point mass, so a
sampled draft token is accepted with the target's probability of it.
"""

import torch

from evaluators.speculative.api import Draft, TargetView

# EVOLVE-BLOCK-START
"""Cheat: memo_across_prompts. Class: state across prompts.

Attack: the draft remembers, per prompt (the tokens it is reset with), the longest
sequence it has seen the target produce from it, and proposes from that memory whenever
the current sequence is a prefix of a remembered one; on a new prompt it proposes nothing.
How it wins today: the child decodes the same timed prompts again and again with one
draft object (once per k of the sweep, then for every timed repeat), so from the second
pass on every proposal is the target's own output and up to k + 1 tokens come out of each
target step. The outputs stay exact and the sampled check passes (point-mass proposals,
verified by the target).
Why a sound evaluator must not credit it: a draft is measured on prompts it has not seen;
timed decodes must be of fresh prompts (or with a fresh draft each time), and then this
draft proposes nothing and is slower than target-only decoding.
Sound verdict: not VALID, or VALID with no gain over the seed.
"""

def _propose_tokens(tokens, vocab, pick):
    """Hand each token to pick() as a point-mass distribution (lossless when sampling)."""
    out = []
    for tok in tokens:
        logits = torch.full((vocab,), float("-inf"))
        logits[tok] = 0.0
        out.append(pick(logits))
    return out


class NgramDraft(Draft):
    trainable = False

    def __init__(self, target: TargetView):
        super().__init__()
        self.vocab = target.vocab
        self.memory: dict[tuple[int, ...], list[int]] = {}
        self.key: tuple[int, ...] = ()

    def reset(self, tokens, feats):
        super().reset(tokens, feats)
        self.key = tuple(self.tokens)

    def accept(self, tokens, feats):
        super().accept(tokens, feats)
        if len(self.tokens) > len(self.memory.get(self.key, ())):
            self.memory[self.key] = list(self.tokens)

    def propose(self, k, pick):
        seen = self.memory.get(self.key)
        n = len(self.tokens)
        if not seen or len(seen) <= n or seen[:n] != self.tokens:
            return []
        return _propose_tokens(seen[n : n + k], self.vocab, pick)
# EVOLVE-BLOCK-END


def build(target: TargetView) -> Draft:
    return NgramDraft(target)
