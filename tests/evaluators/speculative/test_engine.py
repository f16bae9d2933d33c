"""The static decode engine: the same tokens and logits as the model's own cached decoding,
on CPU (eager static steps) and on a GPU (CUDA graphs)."""

import copy

import pytest
import torch

from evaluators.speculative.api import Draft
from evaluators.speculative.decoding import plain_decode, speculative_decode
from evaluators.speculative.engine import StaticDecoder


class _Replay(Draft):
    """Proposes a fixed continuation (some right, some wrong), so verification accepts and
    rejects, and the cache is truncated and rewritten."""

    feature_layers = (0, -1)

    def __init__(self, script: list[int]):
        super().__init__()
        self.script = script
        self.seen_feats: list[tuple[int, ...]] = []

    def accept(self, tokens, feats):
        super().accept(tokens, feats)
        assert feats is not None
        self.seen_feats.append(tuple(feats.shape))

    def propose(self, k, pick):
        done = len(self.tokens) - self.start
        out = []
        for i, tok in enumerate(self.script[done : done + k]):
            wrong = (tok + 1) % self.vocab if (done + i) % 5 == 3 else tok
            logits = torch.full((self.vocab,), float("-inf"))
            logits[wrong] = 0.0
            out.append(pick(logits))
        return out

    def reset(self, tokens, feats):
        super().reset(tokens, feats)
        self.start = len(self.tokens)


def _draft(model, ref):
    d = _Replay(ref[1:])
    d.vocab = model.cfg.vocab
    return d


def test_static_steps_give_the_models_cached_logits(tiny):
    model = tiny.model
    engine = StaticDecoder(model, 96)
    seq = tiny.heldout_tokens[:40][None]
    ref_cache, cache = model.new_cache(1, 96), engine.new_cache(1, 96)
    for lo, hi in ((0, 11), (11, 14), (14, 15)):
        want, wf = model(seq[:, lo:hi], ref_cache, (0, -1))
        got, gf = engine(seq[:, lo:hi], cache, (0, -1))
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(gf, wf, atol=1e-5, rtol=1e-5)
    ref_cache.truncate(12)
    cache.truncate(12)  # rolled back, then rewritten: stale slots are masked, not read
    want, _ = model(seq[:, 12:20], ref_cache)
    got, feats = engine(seq[:, 12:20], cache)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    assert feats is None and cache.length == 20


@pytest.mark.parametrize("k", [1, 3, 6])
def test_greedy_decoding_on_the_engine_is_the_models(tiny, k):
    model = tiny.model
    engine = StaticDecoder(model, 128)
    prompt = tiny.heldout_tokens[100:120]
    ref = plain_decode(model, prompt, 60)
    assert plain_decode(engine, prompt, 60) == ref
    draft = _draft(model, ref)
    out, stats = speculative_decode(engine, draft, prompt, 60, k)
    assert out == ref
    assert 0 < stats.acceptance_rate < 1  # some drafts were rejected and rolled back
    assert draft.seen_feats and all(s[-1] == 2 * model.cfg.d_model for s in draft.seen_feats)


def test_calls_it_cannot_serve_statically_go_to_the_model(tiny):
    model = tiny.model
    engine = StaticDecoder(model, 64)
    seqs = tiny.heldout_tokens[:60].view(3, 20)
    torch.testing.assert_close(engine(seqs)[0], model(seqs)[0])  # full forward, batch 3
    big = engine.new_cache(1, 200)  # longer than the engine's cache: the model's own
    assert big is not engine.cache
    cache = engine.new_cache(1, 64)
    engine(seqs[:1], cache)
    with pytest.raises(ValueError, match="exceeds the engine's cache of 64"):
        engine(tiny.heldout_tokens[:50][None], cache)
    with pytest.raises(ValueError, match="outside 1..256"):
        StaticDecoder(model, 1000)


def test_capture_is_nothing_on_cpu(tiny):
    engine = StaticDecoder(tiny.model, 64)
    engine.capture([1, 2, 3])
    assert not engine.uses_graphs and engine.captured == []


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU")
@pytest.mark.parametrize("k", [2, 5])
def test_graph_replays_decode_what_eager_steps_decode(tiny, k):
    model = copy.deepcopy(tiny.model).cuda().eval()
    prompt = tiny.heldout_tokens[100:120].cuda()
    eager = StaticDecoder(model, 128)
    eager.uses_graphs = False
    ref = plain_decode(eager, prompt, 60)
    engine = StaticDecoder(model, 128)
    engine.capture([1, len(prompt), *range(2, k + 2)])
    assert (k + 1, True) in engine.captured
    assert plain_decode(engine, prompt, 60) == ref
    out, stats = speculative_decode(engine, _draft(model, ref), prompt, 60, k)
    assert out == ref and 0 < stats.acceptance_rate < 1
