"""Distilled n-gram table: the target's own greedy choices, counted by their context.

``fit`` reads the distillation set (target-generated sequences and, at every position, the
token the target's greedy decoding picks next) and counts, for each context of the last
``n`` tokens (``n`` = 1 .. ``MAX_ORDER``), which next token the target chose. ``propose``
drafts by chaining lookups: the longest context seen at least ``MIN_COUNT`` times gives
the next token, which extends the context for the following one. Drafting stops early when
no context is known or the best next token's share of its context falls below
``MIN_SHARE``. With ``ONLINE`` the sequence being decoded also counts its own pairs as it
grows (prompt and verified tokens), and those counts take precedence.

A draft step costs a few dictionary lookups, so k can be large: the verification pass is
the price. The draft distribution is a point mass, so sampled decoding stays exact.
"""

import torch

from evaluators.speculative.api import Draft, TargetView

# EVOLVE-BLOCK-START
MAX_ORDER = 3  # knob: int 1..8
MIN_COUNT = 1  # knob: int 1..4
MIN_SHARE = 0.0  # knob: float 0.0..0.9
ONLINE = 0  # knob: choices=[0, 1]


def _count(tables, seq, targets, start, max_order):
    """Count ``targets[t]`` after each context ``seq[t-n+1 .. t]`` for ``t >= start``."""
    for t in range(start, len(targets)):
        nxt = targets[t]
        for n in range(1, min(max_order, t + 1) + 1):
            counts = tables[n].setdefault(tuple(seq[t - n + 1 : t + 1]), {})
            counts[nxt] = counts.get(nxt, 0) + 1


def _best(counts):
    """(token, its count, total count) of a context's next-token counts."""
    tok = max(counts, key=counts.__getitem__)
    return tok, counts[tok], sum(counts.values())


class TableDraft(Draft):
    trainable = False

    def __init__(self, target: TargetView):
        super().__init__()
        self.vocab = target.vocab
        self.best = [{} for _ in range(MAX_ORDER + 1)]  # order -> context -> (tok, n, total)
        self.local = [{} for _ in range(MAX_ORDER + 1)]  # this sequence's own counts
        # the table as a tensor, saved with the weights: order, context (padded with -1),
        # next token, its count, the context's total count
        self.register_buffer("table", torch.zeros(0, MAX_ORDER + 4, dtype=torch.int64))

    def fit(self, data):
        tables = [{} for _ in range(MAX_ORDER + 1)]
        for seq, labels in zip(data["tokens"].tolist(), data["labels"].tolist(), strict=True):
            _count(tables, seq, labels, 0, MAX_ORDER)
        rows = []
        for n in range(1, MAX_ORDER + 1):
            for ctx, counts in tables[n].items():
                tok, hits, total = _best(counts)
                self.best[n][ctx] = (tok, hits, total)
                rows.append([n, *ctx, *[-1] * (MAX_ORDER - n), tok, hits, total])
        if rows:
            self.table = torch.tensor(rows, dtype=torch.int64)

    def reset(self, tokens, feats):
        super().reset(tokens, feats)
        self.local = [{} for _ in range(MAX_ORDER + 1)]
        if ONLINE:
            # pairs (context, next token) of the sequence itself: target t predicts t + 1
            _count(self.local, self.tokens, self.tokens[1:], 0, MAX_ORDER)

    def accept(self, tokens, feats):
        before = len(self.tokens)
        super().accept(tokens, feats)
        if ONLINE:
            _count(self.local, self.tokens, self.tokens[1:], before - 1, MAX_ORDER)

    def _next(self, ctx):
        for n in range(min(MAX_ORDER, len(ctx)), 0, -1):
            key = tuple(ctx[-n:])
            counts = self.local[n].get(key) if ONLINE else None
            entry = _best(counts) if counts else self.best[n].get(key)
            if entry is not None and entry[1] >= MIN_COUNT:
                tok, hits, total = entry
                return tok if hits >= MIN_SHARE * total else None
        return None

    def propose(self, k, pick):
        ctx = self.tokens[-MAX_ORDER:]
        out = []
        for _ in range(k):
            tok = self._next(ctx)
            if tok is None:
                break
            logits = torch.full((self.vocab,), float("-inf"))
            logits[tok] = 0.0
            out.append(pick(logits))
            ctx = ctx[1:] + [tok] if len(ctx) >= MAX_ORDER else ctx + [tok]
        return out


# EVOLVE-BLOCK-END


def build(target: TargetView) -> Draft:
    return TableDraft(target)
