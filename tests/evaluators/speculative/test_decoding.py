import pytest
import torch

from evaluators.speculative.api import Draft, TargetView
from evaluators.speculative.checks import chi_square_check, target_marginals
from evaluators.speculative.decoding import (
    DraftContractError,
    plain_decode,
    speculative_decode,
)
from evaluators.speculative.model import LMConfig, TinyLM


class RandomLMDraft(Draft):
    """An unrelated random LM as draft: proposes mostly wrong tokens, no cache."""

    def __init__(self, vocab: int, seed: int = 0):
        super().__init__()
        torch.manual_seed(seed)
        self.lm = TinyLM(LMConfig(vocab, 32, 1, 2, max_len=512)).eval()

    def propose(self, k, pick):
        toks = list(self.tokens)
        out = []
        for _ in range(k):
            logits, _ = self.lm(torch.tensor([toks]))
            out.append(pick(logits[0, -1] * 3))
            toks.append(out[-1])
        return out


class OracleDraft(Draft):
    """Proposes the target's own greedy tokens: every draft must be accepted."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def propose(self, k, pick):
        toks = list(self.tokens)
        for _ in range(k):
            logits, _ = self.model(torch.tensor([toks]))
            toks.append(pick(logits[0, -1]))
        return toks[len(self.tokens):]


def test_kv_cache_matches_full_forward(tiny):
    model = tiny.model
    seq = tiny.heldout_tokens[:30][None]
    full, _ = model(seq)
    cache = model.new_cache()
    a, _ = model(seq[:, :11], cache)
    b, _ = model(seq[:, 11:14], cache)
    cache.truncate(12)  # drop two positions, then recompute them
    c, _ = model(seq[:, 12:], cache)
    got = torch.cat([a, b[:, :1], c], 1)
    torch.testing.assert_close(got, full, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("k", [1, 2, 4, 7])
def test_greedy_is_token_identical_with_a_bad_and_a_perfect_draft(tiny, k):
    model = tiny.model
    for start in (0, 500):
        prompt = tiny.heldout_tokens[start : start + 20]
        ref = plain_decode(model, prompt, 50)
        out, stats = speculative_decode(model, RandomLMDraft(model.cfg.vocab), prompt, 50, k)
        assert out == ref
        out, stats = speculative_decode(model, OracleDraft(model), prompt, 50, k)
        assert out == ref
        assert stats.acceptance_rate == 1.0 and stats.mean_accepted_len > k  # k + bonus
        assert stats.target_steps <= -(-49 // (k + 1)) + 1


def test_a_draft_that_bypasses_pick_is_refused(tiny):
    class Cheat(Draft):
        def propose(self, k, pick):
            pick(torch.zeros(tiny.model.cfg.vocab))
            return [3] * k

    with pytest.raises(DraftContractError, match="pick chose"):
        speculative_decode(tiny.model, Cheat(), tiny.heldout_tokens[:10], 20, 3)


def test_sampling_keeps_the_target_distribution_on_a_small_vocabulary():
    # Vocabulary of 6: the first two sampled tokens' laws are known exactly and 4000
    # samples give the chi-square test power against the draft's own (different) law.
    torch.manual_seed(1)
    model = TinyLM(LMConfig(6, 32, 2, 2, max_len=64)).eval()
    for p in model.parameters():
        p.data *= 4  # p1 puts 0.72 on one token, p2 is spread: far from the draft's law
    draft = RandomLMDraft(6, seed=5)
    prompt = torch.tensor([1, 2, 3, 0])
    gen = torch.Generator().manual_seed(0)
    samples = torch.tensor([speculative_decode(model, draft, prompt, 2, 2, temperature=1.0,
                                               generator=gen)[0] for _ in range(4000)])
    p1, p2 = target_marginals(model, prompt, 1.0)
    for pos, probs in ((0, p1), (1, p2)):
        counts = torch.bincount(samples[:, pos], minlength=6)
        assert chi_square_check(counts, probs, alpha=1e-3)[0], pos
    # the same test rejects the draft's own distribution: it has power here
    q_logits, _ = draft.lm(prompt[None])
    q = torch.softmax(q_logits[0, -1].double() * 3, -1)
    counts = torch.bincount(torch.multinomial(q, 4000, True, generator=gen), minlength=6)
    assert not chi_square_check(counts, p1, alpha=1e-3)[0]


def test_sampling_on_the_tiny_target_passes_the_evaluator_check(tiny):
    model = tiny.model
    prompt = tiny.heldout_tokens[100:116]
    gen = torch.Generator().manual_seed(3)
    samples = torch.tensor([speculative_decode(model, RandomLMDraft(model.cfg.vocab), prompt, 2,
                                               2, temperature=1.0, generator=gen)[0]
                            for _ in range(300)])
    p1, p2 = target_marginals(model, prompt, 1.0)
    for pos, probs in ((0, p1), (1, p2)):
        counts = torch.bincount(samples[:, pos], minlength=len(probs))
        assert chi_square_check(counts, probs, alpha=1e-3)[0]
    # a draft equal to the target at temperature 1 is accepted at every position
    out, stats = speculative_decode(model, OracleDraft(model), prompt, 30, 3, temperature=1.0,
                                    generator=gen)
    assert len(out) == 30 and stats.acceptance_rate > 0.9


def test_target_view_shares_frozen_modules(tiny):
    view = TargetView.of(tiny.model)
    assert view.embed is tiny.model.embed and view.vocab == tiny.model.cfg.vocab
    h = torch.randn(3, view.d_model)
    torch.testing.assert_close(view.head(h), tiny.model.head(h))
