"""The distillation data generated once on the trusted side equal what a child would make."""

import torch

from evaluators.speculative.distill import load_data, make_data, shared_data


def test_shared_data_matches_per_candidate_data(tiny, tmp_path):
    kw = {"n_seqs": 8, "prompt_len": 8, "gen_len": 12}
    path = shared_data(tiny.model, tiny.train_tokens, tmp_path, seed=3, **kw)
    mtime = path.stat().st_mtime_ns
    assert shared_data(tiny.model, tiny.train_tokens, tmp_path, seed=3, **kw) == path
    assert path.stat().st_mtime_ns == mtime  # second call reuses the file
    fresh = make_data(tiny.model, tiny.train_tokens, feature_layers=(0, -1), seed=3, **kw)
    loaded = load_data(path, tiny.model, (0, -1))
    assert torch.equal(loaded["tokens"], fresh["tokens"])
    assert torch.equal(loaded["labels"], fresh["labels"])
    assert loaded["feats"].shape == (8, 20, 2 * tiny.model.cfg.d_model)
    torch.testing.assert_close(loaded["feats"], fresh["feats"])
    assert load_data(path, tiny.model, ())["feats"] is None
