"""The distilled n-gram table draft: what fitting counts, how drafting chains lookups."""

import torch

from evaluators.speculative.api import TargetView
from evaluators.speculative.decoding import plain_decode, speculative_decode
from evaluators.speculative.distill import make_data
from tests.targets.speculative.draft_files import draft_module


def _module(**knobs):
    return draft_module("table", **knobs)


def _pick(chosen):
    def pick(logits):
        chosen.append(int(logits.argmax()))
        return chosen[-1]
    return pick


def _fitted(tokens, labels, **knobs):
    draft = _module(**knobs).build(TargetView(vocab=20, d_model=4, n_layers=1, n_heads=1,
                                              max_len=64, embed=None, head=None))
    draft.fit({"tokens": torch.tensor(tokens), "labels": torch.tensor(labels), "feats": None})
    return draft


def test_fit_counts_the_targets_choices_and_drafting_chains_them():
    # target-generated: after (1, 2) the target chose 5 (twice), after (3, 2) 6, so after
    # (2,) 5 twice and 6 once; then 7 after (2, 5) and 9 after (5, 7)
    tokens = [[1, 2, 5, 7], [1, 2, 5, 7], [3, 2, 6, 8]]
    labels = [[2, 5, 7, 9], [2, 5, 7, 9], [2, 6, 8, 9]]
    draft = _fitted(tokens, labels, MAX_ORDER=2)
    draft.reset(torch.tensor([4, 1, 2]), None)
    chosen: list[int] = []
    assert draft.propose(3, _pick(chosen)) == [5, 7, 9] == chosen
    # the table (order, context, next, count, total) is a buffer, saved with the weights
    rows = {tuple(r) for r in draft.table.tolist()}
    assert (2, 1, 2, 5, 2, 2) in rows and (1, 2, -1, 5, 2, 3) in rows
    assert "table" in draft.state_dict()


def test_min_share_stops_a_draft_at_an_uncertain_context():
    tokens = [[1, 2, 5], [1, 2, 5], [3, 2, 6]]
    labels = [[2, 5, 7], [2, 5, 7], [2, 6, 8]]
    sure = _fitted(tokens, labels, MAX_ORDER=1, MIN_SHARE=0.0)
    unsure = _fitted(tokens, labels, MAX_ORDER=1, MIN_SHARE=0.9)
    for draft, want in ((sure, [5, 7]), (unsure, [])):  # after 2: 5 twice, 6 once
        draft.reset(torch.tensor([9, 2]), None)
        assert draft.propose(2, _pick([])) == want


def test_online_counts_of_the_sequence_take_precedence():
    tokens, labels = [[1, 2, 3]], [[2, 3, 4]]
    draft = _fitted(tokens, labels, MAX_ORDER=1, ONLINE=1)
    draft.reset(torch.tensor([2, 7, 2]), None)  # this sequence continued 2 with 7
    assert draft.propose(1, _pick([])) == [7]
    offline = _fitted(tokens, labels, MAX_ORDER=1, ONLINE=0)
    offline.reset(torch.tensor([2, 7, 2]), None)
    assert offline.propose(1, _pick([])) == [3]
    draft.accept([9, 2], None)  # now 7 -> 2 and 2 -> 9 have been seen once more each
    assert draft.local[1][(2,)] == {7: 1, 9: 1}


def test_fitted_on_the_tiny_target_it_drafts_the_targets_continuation(tiny):
    model = tiny.model
    draft = _module().build(TargetView.of(model))
    data = make_data(model, tiny.train_tokens, n_seqs=64, prompt_len=16, gen_len=24,
                     feature_layers=(), seed=0)
    prompt = tiny.heldout_tokens[40:72]
    ref = plain_decode(model, prompt, 40)
    draft.reset(prompt, None)
    assert draft.propose(4, _pick([])) == []  # unfitted: nothing known, nothing drafted
    draft.fit(data)
    out, stats = speculative_decode(model, draft, prompt, 40, 4)
    assert out == ref
    assert stats.mean_accepted_len > 1.5  # it drafts, and the target accepts most of it
