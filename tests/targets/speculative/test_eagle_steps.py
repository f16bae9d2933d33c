"""The EAGLE seed drafts on a static cache: the same tokens as its former dynamic-cache
drafting on the CPU, and the same tokens from CUDA graph replays on a GPU; with SUFFIX, a
long match drafts instead, and the network catches up afterwards."""

import copy

import pytest
import torch

from evaluators.speculative.api import TargetView
from evaluators.speculative.decoding import plain_decode, speculative_decode
from evaluators.speculative.model import KVCache
from tests.targets.speculative.draft_files import draft_module


def _module(**knobs):
    return draft_module("eagle", **{"SUFFIX": 0, **knobs})  # the network's own drafting


def _dynamic_propose(draft, k, pick):
    """Drafting as the seed did before its static cache: Block.forward on a KVCache that
    grows and is truncated (the reference the static steps must agree with)."""
    if getattr(draft, "_ref_cache", None) is None or draft._ref_len > len(draft.tokens):
        draft._ref_cache = KVCache(1, 1, draft.block.n_heads, draft.max_len,
                                   draft.d // draft.block.n_heads)
        draft._ref_real = 0
    draft._ref_len = len(draft.tokens)
    cache = draft._ref_cache
    cache.truncate(draft._ref_real)
    n_feats = draft.feats.shape[0]
    g = draft._fuse(draft.feats[draft._ref_real:])[None]
    toks = torch.tensor([draft.tokens[draft._ref_real + 1 : n_feats + 1]])
    h = draft._step(g, toks, cache)
    cache.length += h.shape[1]
    draft._ref_real = n_feats
    out = []
    for i in range(k):
        last = h[:, -1:]
        out.append(pick(draft.head(last)[0, -1]))
        if i + 1 < k:
            h = draft._step(draft._refeed(last), torch.tensor([[out[-1]]]), cache)
            cache.length += 1
    return out


def _greedy(logits):
    return int(logits.argmax())


def test_static_steps_draft_what_the_dynamic_cache_drafted(tiny):
    model = tiny.model
    torch.manual_seed(3)
    draft = _module().build(TargetView.of(model)).eval()
    for p in draft.parameters():  # an untrained draft's logits are near ties: spread them
        if p.requires_grad:
            torch.nn.init.normal_(p, std=0.3)
    prompt = tiny.heldout_tokens[10:40]
    with torch.no_grad():
        logits, feats = model(prompt[None], None, draft.feature_layers)
        # as the decoding loop does: the features lag the tokens by one position
        draft.reset(torch.cat([prompt, logits[0, -1:].argmax(-1)]), feats[0])
        drafted: set[int] = set()
        for step in range(6):
            want = _dynamic_propose(draft, 4, _greedy)
            got = draft.propose(4, _greedy)
            assert got == want, step
            drafted.update(got)
            n = 1 + step % 3  # accept some, as verification does
            old = len(draft.tokens)
            _, f = model(torch.tensor(draft.tokens + got[:n])[None], None,
                         draft.feature_layers)
            draft.accept(got[:n], f[0, old - 1 : old - 1 + n])
    assert len(drafted) > 3  # not one token over and over: the comparison means something


def test_a_greedy_pick_chains_the_steps_and_drafts_the_same_tokens(tiny):
    model = tiny.model
    torch.manual_seed(4)
    mod = _module()
    draft = mod.build(TargetView.of(model)).eval()
    for p in draft.parameters():
        if p.requires_grad:
            torch.nn.init.normal_(p, std=0.3)
    twin = mod.build(TargetView.of(model)).eval()
    twin.load_state_dict(draft.state_dict())
    prompt = tiny.heldout_tokens[50:80]
    calls = []
    original = twin._chain
    twin.chain.fn = lambda *a: calls.append(1) or original(*a)
    with torch.no_grad():
        logits, feats = model(prompt[None], None, draft.feature_layers)
        start = torch.cat([prompt, logits[0, -1:].argmax(-1)])
        draft.reset(start, feats[0])
        twin.reset(start, feats[0])
        for k in (1, 3, 6):
            chosen: list[int] = []

            def pick(lg, chosen=chosen):
                chosen.append(int(lg.argmax()))
                return chosen[-1]

            pick.greedy = True
            want = draft.propose(k, _greedy)
            assert twin.propose(k, pick) == want == chosen  # pick saw every token
            old = len(draft.tokens)
            _, f = model(torch.tensor(draft.tokens + want[:1])[None], None,
                         draft.feature_layers)
            for d in (draft, twin):
                d.accept(want[:1], f[0, old - 1 : old])
    assert len(calls) == 2  # k = 3 and 6 chained; k = 1 is the first step alone


def test_a_long_match_drafts_and_the_network_catches_up_afterwards(tiny):
    model = tiny.model
    torch.manual_seed(5)
    hybrid = _module(SUFFIX=0, SUFFIX_TRUST=4, SUFFIX_SHARE=0.5)
    draft = hybrid.build(TargetView.of(model)).eval()
    for p in draft.parameters():
        if p.requires_grad:
            torch.nn.init.normal_(p, std=0.3)
    plain = _module().build(TargetView.of(model)).eval()  # the network alone
    plain.load_state_dict(draft.state_dict())
    prompt = tiny.heldout_tokens[300:330]

    def grow(new):  # what verification hands both drafts: tokens and the target's features
        seq = list(draft.tokens)
        _, f = model(torch.tensor(seq + new)[None], None, draft.feature_layers)
        rows = f[0, len(seq) - 1 : len(seq) - 1 + len(new)]
        for d in (draft, plain):
            d.accept(new, rows)

    with torch.no_grad():
        logits, feats = model(prompt[None], None, draft.feature_layers)
        start = torch.cat([prompt, logits[0, -1:].argmax(-1)])
        for d in (draft, plain):
            d.reset(start, feats[0])
        first = draft.propose(3, _greedy)  # the network drafts (SUFFIX off for now)
        assert first == plain.propose(3, _greedy)
        grow(first[:1])
        # the target's earlier outputs continue the sequence's last 7 tokens with 7 more
        known = [int(t) for t in tiny.heldout_tokens[600:607]]
        corpus = [1, 2, *draft.tokens[-7:], *known, 3]
        hybrid.SUFFIX = 1
        draft.fit({"tokens": torch.tensor([corpus]), "labels": None, "feats": None})
        assert draft.corpus.tolist() == [*corpus, -1]  # saved with the weights
        real = draft.n_real
        got = draft.propose(4, _greedy)
        assert got == known[:4]  # the match's continuation, by vote
        assert draft.n_real == real  # the network did nothing for it
        odd = (known[3] + 1) % model.cfg.vocab  # nothing matches the sequence's tail now
        grow([*got, odd])
        want = plain.propose(3, _greedy)
        assert draft.propose(3, _greedy) == want  # caught up on all six new positions
        assert draft.n_real == plain.n_real == len(draft.tokens) - 1


def test_loading_weights_captures_nothing_on_the_cpu(tiny):
    draft = _module().build(TargetView.of(tiny.model))
    draft.load_state_dict(draft.state_dict())
    assert len(draft.first) == 0 and len(draft.next) == 0
    assert "keys" not in draft.state_dict()  # the static cache is not saved


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU")
def test_graph_replays_draft_what_eager_steps_draft(tiny):
    model = copy.deepcopy(tiny.model).cuda().eval()
    view = TargetView.of(model)
    eager = _module(GRAPHS=0).build(view).cuda().eval()
    graphed = _module(GRAPHS=1).build(view).cuda().eval()
    graphed.load_state_dict(eager.state_dict())  # the load hook captures the graphs
    assert len(graphed.first) == 17 and len(graphed.next) == 1 and len(graphed.chain) == 15
    prompt = tiny.heldout_tokens[10:40].cuda()
    ref = plain_decode(model, prompt, 48)
    outs = [speculative_decode(model, d, prompt, 48, 4) for d in (eager, graphed)]
    assert outs[0][0] == outs[1][0] == ref
    assert outs[0][1].accepted == outs[1][1].accepted  # the same drafts, step by step


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU")
def test_the_hybrid_with_graphs_is_lossless_and_catches_up_in_captured_steps(tiny):
    from evaluators.speculative.distill import make_data

    model = copy.deepcopy(tiny.model).cuda().eval()
    view = TargetView.of(model)
    mod = _module(SUFFIX=1, SUFFIX_TRUST=3, GRAPHS=1)
    draft = mod.build(view).cuda().eval()
    data = make_data(model, tiny.train_tokens, n_seqs=64, prompt_len=16, gen_len=24,
                     feature_layers=tuple(draft.feature_layers), seed=0)
    draft.fit(data)
    draft.load_state_dict(draft.state_dict())  # as a timed process loads it: index, capture
    assert len(draft.first) == 17 and len(draft.shared.seq) == 64 * 41
    calls = []
    original = draft._suffix
    draft._suffix = lambda k: calls.append(1) or original(k)
    prompt = tiny.heldout_tokens[10:40].cuda()
    ref = plain_decode(model, prompt, 64)
    out, stats = speculative_decode(model, draft, prompt, 64, 6)
    assert out == ref and stats.drafted > 0 and calls
