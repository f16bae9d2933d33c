"""Suffix decoding: continue the longest match of the sequence's tail, as often seen.

The method of SuffixDecoding (Oliaro et al., 2024) and Arctic Inference: two stores of
token sequences are searched for the tail of the sequence being decoded, the sequence
itself (prompt and verified tokens, growing online) and, with ``GLOBAL``, earlier outputs
of the target (here the distillation set: the target's own greedy continuations, fitted
once without gradients). The occurrences that match the longest tail (``MIN_MATCH`` up
to ``MAX_MATCH`` tokens) vote on the next token; the winning token keeps only the
occurrences that continue with it, and drafting follows them while the winner holds at
least ``MIN_SHARE`` of the votes. A long shared history (a repeated code block, a
boilerplate line) drafts long, a weak one drafts nothing, so no target step is wasted on
a guess. A draft step is a few list comparisons (nothing on the GPU); the draft
distribution is a point mass, so sampled decoding stays exact. The search itself is
:class:`evaluators.speculative.suffix.SuffixStore`.
"""

import torch

from evaluators.speculative.api import Draft, TargetView, point_mass
from evaluators.speculative.suffix import SuffixStore, joined, longest

# EVOLVE-BLOCK-START
MAX_MATCH = 12  # knob: int 2..32
MIN_MATCH = 2  # knob: int 1..4
MIN_SHARE = 0.3  # knob: float 0.0..0.9
MAX_OCC = 64  # knob: int 4..512
GLOBAL = 1  # knob: choices=[0, 1]


class SuffixDraft(Draft):
    trainable = False

    def __init__(self, target: TargetView):
        super().__init__()
        self.vocab = target.vocab
        # the distillation set's sequences, one after another with -1 between them: saved
        # with the weights, indexed again for every timed prompt's process (untimed)
        self.register_buffer("corpus", torch.zeros(0, dtype=torch.int64))
        self.register_load_state_dict_post_hook(lambda module, keys: module._index())
        self.shared = self._store()
        self.local = self._store()

    def _store(self):
        return SuffixStore(self.vocab, MIN_MATCH, MAX_MATCH, MAX_OCC)

    def _index(self):
        self.shared = self._store()
        if GLOBAL:
            self.shared.extend(self.corpus.tolist())

    def fit(self, data):
        if not GLOBAL:
            return
        self.corpus = torch.tensor(joined(data["tokens"].tolist()), dtype=torch.int64)
        self._index()

    def reset(self, tokens, feats):
        super().reset(tokens, feats)
        self.local = self._store()
        self.local.extend(self.tokens)

    def accept(self, tokens, feats):
        super().accept(tokens, feats)
        self.local.extend(tokens)

    def propose(self, k, pick):
        tail = self.tokens[-MAX_MATCH - 1 :]
        stores = (self.local, self.shared) if GLOBAL else (self.local,)
        n, store, where = longest(stores, tail)  # the sequence itself wins a tie
        if store is None or n < MIN_MATCH:
            return []
        return [pick(point_mass(tok, self.vocab)) for tok in store.follow(where, k, MIN_SHARE)]


# EVOLVE-BLOCK-END


def build(target: TargetView) -> Draft:
    return SuffixDraft(target)
