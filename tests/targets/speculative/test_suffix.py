"""The suffix-decoding draft: the longest matched tail votes, the sequence itself first."""

import torch

from evaluators.speculative.api import TargetView
from evaluators.speculative.decoding import plain_decode, speculative_decode
from evaluators.speculative.distill import make_data
from tests.targets.speculative.draft_files import draft_module


def _module(**knobs):
    return draft_module("suffix", **knobs)


def _draft(corpus=None, **knobs):
    draft = _module(**knobs).build(TargetView(vocab=20, d_model=4, n_layers=1, n_heads=1,
                                              max_len=64, embed=None, head=None))
    if corpus is not None:
        draft.fit({"tokens": torch.tensor(corpus), "labels": torch.tensor(corpus),
                   "feats": None})
    return draft


def _pick(chosen):
    def pick(logits):
        chosen.append(int(logits.argmax()))
        return chosen[-1]
    return pick


def test_the_longest_matching_tail_decides_and_votes_pick_the_continuation():
    # after (1, 2): 3 4 5 twice, 7 8 once; after (9, 1, 2) only 7 8 follows
    corpus = [[1, 2, 3, 4, 5, 0], [1, 2, 3, 4, 5, 0], [9, 1, 2, 7, 8, 0]]
    draft = _draft(corpus, MIN_MATCH=2, MIN_SHARE=0.0)
    draft.reset(torch.tensor([6, 1, 2]), None)
    chosen: list[int] = []
    assert draft.propose(3, _pick(chosen)) == [3, 4, 5] == chosen
    draft.reset(torch.tensor([9, 1, 2]), None)  # a longer match: the rarer continuation
    assert draft.propose(3, _pick([])) == [7, 8, 0]
    assert "corpus" in draft.state_dict()  # saved with the weights, indexed on load
    fresh = _draft(None, MIN_MATCH=2, MIN_SHARE=0.0)
    fresh.corpus = torch.empty_like(draft.corpus)  # what the draft's server resizes first
    fresh.load_state_dict(draft.state_dict())
    fresh.reset(torch.tensor([6, 1, 2]), None)
    assert fresh.propose(2, _pick([])) == [3, 4]


def test_min_share_stops_where_the_votes_split():
    corpus = [[1, 2, 3, 0], [1, 2, 4, 0], [1, 2, 5, 0]]
    sure = _draft(corpus, MIN_MATCH=2, MIN_SHARE=0.0)
    unsure = _draft(corpus, MIN_MATCH=2, MIN_SHARE=0.5)
    for draft, want in ((sure, [3, 0]), (unsure, [])):  # a separator ends a continuation
        draft.reset(torch.tensor([1, 2]), None)
        assert draft.propose(3, _pick([])) == want


def test_the_sequence_itself_is_searched_online_and_preferred_on_a_tie():
    draft = _draft([[5, 6, 7, 0]], MIN_MATCH=2, MIN_SHARE=0.0)
    draft.reset(torch.tensor([5, 6, 9, 9, 5, 6]), None)  # this sequence continued 5 6 with 9
    assert draft.propose(2, _pick([])) == [9, 9]
    draft.accept([11, 12, 5, 6, 11], None)  # now 5 6 was followed by 9 once, by 11 twice
    draft.accept([5, 6], None)
    assert draft.propose(1, _pick([])) == [11]
    alone = _draft([[5, 6, 7, 0]], MIN_MATCH=2, MIN_SHARE=0.0, GLOBAL=0)
    alone.reset(torch.tensor([1, 5, 6]), None)
    assert alone.propose(2, _pick([])) == []  # without the global store: nothing matched


def test_on_the_tiny_target_it_is_lossless_and_drafts_accepted_tokens(tiny):
    model = tiny.model
    draft = _module().build(TargetView.of(model))
    data = make_data(model, tiny.train_tokens, n_seqs=64, prompt_len=16, gen_len=24,
                     feature_layers=(), seed=0)
    draft.fit(data)
    prompt = tiny.heldout_tokens[200:232]
    ref = plain_decode(model, prompt, 48)
    out, stats = speculative_decode(model, draft, prompt, 48, 8)
    assert out == ref
    assert stats.drafted > 0 and stats.acceptance_rate > 0
