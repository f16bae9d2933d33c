"""The EAGLE seed drafts on a static cache: the same tokens as its former dynamic-cache
drafting on the CPU, and the same tokens from CUDA graph replays on a GPU."""

import copy

import pytest
import torch

from evaluators.speculative.api import TargetView
from evaluators.speculative.decoding import plain_decode, speculative_decode
from evaluators.speculative.model import KVCache
from tests.targets.speculative.draft_files import draft_module


def _module(**knobs):
    return draft_module("eagle", **knobs)


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
