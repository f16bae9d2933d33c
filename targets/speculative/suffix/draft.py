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
distribution is a point mass, so sampled decoding stays exact.
"""

import torch

from evaluators.speculative.api import Draft, TargetView

# EVOLVE-BLOCK-START
MAX_MATCH = 12  # knob: int 2..32
MIN_MATCH = 2  # knob: int 1..4
MIN_SHARE = 0.3  # knob: float 0.0..0.9
MAX_OCC = 64  # knob: int 4..512
GLOBAL = 1  # knob: choices=[0, 1]


class _Store:
    """A token sequence with every position indexed by the ``MIN_MATCH`` tokens before it."""

    def __init__(self):
        self.seq = []
        self.index = {}

    def extend(self, tokens):
        start = len(self.seq)
        self.seq.extend(tokens)
        for p in range(max(start, MIN_MATCH), len(self.seq)):
            key = tuple(self.seq[p - MIN_MATCH : p])
            self.index.setdefault(key, []).append(p)

    def matches(self, tail):
        """(match length, positions that follow it) of the longest matched tail."""
        seq = self.seq
        found = self.index.get(tuple(tail[-MIN_MATCH:]))
        best, where = 0, []
        for p in (found or [])[-MAX_OCC:]:
            n = MIN_MATCH
            while n < min(MAX_MATCH, len(tail)) and p - n - 1 >= 0 and \
                    seq[p - n - 1] == tail[-n - 1]:
                n += 1
            if n > best:
                best, where = n, [p]
            elif n == best:
                where.append(p)
        return best, where

    def follow(self, where, k):
        """Up to ``k`` tokens that the occurrences at ``where`` continue with, by vote."""
        seq, out = self.seq, []
        for depth in range(k):
            votes = {}
            for p in where:
                tok = seq[p + depth] if p + depth < len(seq) else -1
                if tok >= 0:
                    votes[tok] = votes.get(tok, 0) + 1
            if not votes:
                break
            tok = max(votes, key=votes.__getitem__)
            if votes[tok] < MIN_SHARE * len(where):
                break
            where = [p for p in where if p + depth < len(seq) and seq[p + depth] == tok]
            out.append(tok)
        return out


class SuffixDraft(Draft):
    trainable = False

    def __init__(self, target: TargetView):
        super().__init__()
        self.vocab = target.vocab
        # the distillation set's sequences, one after another with -1 between them: saved
        # with the weights, indexed again for every timed prompt's process (untimed)
        self.register_buffer("corpus", torch.zeros(0, dtype=torch.int64))
        self.register_load_state_dict_post_hook(lambda module, keys: module._index())
        self.shared = _Store()
        self.local = _Store()

    def _index(self):
        self.shared = _Store()
        if GLOBAL:
            self.shared.extend(self.corpus.tolist())

    def fit(self, data):
        if not GLOBAL:
            return
        rows = data["tokens"].tolist()
        flat = []
        for row in rows:
            flat.extend(row)
            flat.append(-1)
        self.corpus = torch.tensor(flat, dtype=torch.int64)
        self._index()

    def reset(self, tokens, feats):
        super().reset(tokens, feats)
        self.local = _Store()
        self.local.extend(self.tokens)

    def accept(self, tokens, feats):
        super().accept(tokens, feats)
        self.local.extend(tokens)

    def propose(self, k, pick):
        tail = self.tokens[-MAX_MATCH - 1 :]
        n_local, at_local = self.local.matches(tail)
        n_shared, at_shared = self.shared.matches(tail) if GLOBAL else (0, [])
        if max(n_local, n_shared) < MIN_MATCH:
            return []
        store, where = ((self.local, at_local) if n_local >= n_shared
                        else (self.shared, at_shared))
        out = []
        for tok in store.follow(where, k):
            logits = torch.full((self.vocab,), float("-inf"))
            logits[tok] = 0.0
            out.append(pick(logits))
        return out


# EVOLVE-BLOCK-END


def build(target: TargetView) -> Draft:
    return SuffixDraft(target)
