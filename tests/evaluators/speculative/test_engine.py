"""The static decode engine: the same tokens and logits as the model's own cached decoding,
on CPU (eager static steps) and on a GPU (CUDA graphs)."""

import copy

import pytest
import torch

from evaluators.speculative.api import Draft
from evaluators.speculative.decoding import plain_decode, speculative_decode
from evaluators.speculative.engine import StaticDecoder, choose_padding


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
    assert engine.calibrate(range(1, 4)) == {} and engine.pad_to == {}


def test_padding_goes_to_the_cheapest_size_at_or_above():
    # the replayed step costs measured on an H200 (2026-12-02), plus made-up 2, 4, 6
    costs = {1: 1.94, 2: 3.3, 3: 3.24, 4: 3.0, 5: 2.54, 6: 3.4, 9: 3.05, 13: 3.71}
    assert choose_padding(costs) == {2: 5, 3: 5, 4: 5, 6: 9}
    assert choose_padding({1: 1.0, 2: 0.98}) == {}  # within the margin: not worth a pad
    assert choose_padding({1: 1.0, 2: 0.9}, margin=0.0) == {1: 2}
    assert choose_padding({}) == {}


def test_padded_steps_decode_what_unpadded_steps_decode(tiny):
    model = tiny.model
    prompt = tiny.heldout_tokens[100:120]
    ref = plain_decode(model, prompt, 60)
    engine = StaticDecoder(model, 128)
    # every verification padded by two tokens, with and without features
    engine.pad_to = {(t, w): t + 2 for t in range(2, 9) for w in (False, True)}
    seq = tiny.heldout_tokens[:40][None]
    ref_cache, cache = model.new_cache(1, 128), engine.new_cache(1, 128)
    model(seq[:, :11], ref_cache)
    engine(seq[:, :11], cache)
    want, wf = model(seq[:, 11:14], ref_cache, (0, -1))
    got, gf = engine(seq[:, 11:14], cache, (0, -1))
    assert got.shape == want.shape and gf.shape == wf.shape and cache.length == 14
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(gf, wf, atol=1e-5, rtol=1e-5)
    draft = _draft(model, ref)
    out, stats = speculative_decode(engine, draft, prompt, 60, 6)
    assert out == ref and 0 < stats.acceptance_rate < 1
    assert plain_decode(engine, prompt, 60) == ref


def test_no_padding_past_the_end_of_the_cache(tiny):
    engine = StaticDecoder(tiny.model, 32)
    engine.pad_to = {(3, False): 8}
    cache = engine.new_cache(1, 32)
    engine(tiny.heldout_tokens[:26][None], cache)
    logits, _ = engine(tiny.heldout_tokens[26:29][None], cache)  # 29 + 5 pads > 32
    assert logits.shape[1] == 3 and cache.length == 29


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU")
@pytest.mark.parametrize("k, padded", [(2, False), (5, False), (4, True)])
def test_graph_replays_decode_what_eager_steps_decode(tiny, k, padded):
    model = copy.deepcopy(tiny.model).cuda().eval()
    prompt = tiny.heldout_tokens[100:120].cuda()
    eager = StaticDecoder(model, 128)
    eager.uses_graphs = False
    ref = plain_decode(eager, prompt, 60)
    engine = StaticDecoder(model, 128)
    engine.capture([1, len(prompt), *range(2, 10 if padded else k + 2)])
    assert (k + 1, True) in engine.captured
    if padded:  # calibrated, then every verification forced up to the 9-token graph
        engine.calibrate(range(1, 10), reps=5)
        assert len(engine.step_ms) == 18 and all(ms > 0 for ms in engine.step_ms.values())
        engine.pad_to = {(t, w): 9 for t in range(2, 9) for w in (False, True)}
    assert plain_decode(engine, prompt, 60) == ref
    out, stats = speculative_decode(engine, _draft(model, ref), prompt, 60, k)
    assert out == ref and 0 < stats.acceptance_rate < 1
