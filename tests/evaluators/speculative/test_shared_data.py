"""The distillation data generated once on the trusted side equal what a child would make."""

import pytest
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


class _Stop(Exception):
    pass


def test_candidates_share_timed_prompts_and_training_seed_but_not_the_sampled_prompt(
        tiny, tmp_path):
    from pathlib import Path

    from evaluators import get
    from evaluators._base import EvalContext
    from optimizer.targets import load_target

    root = Path(__file__).resolve().parents[3]
    spec = load_target(root / "targets/speculative/independent", root, {"evaluator": {
        "preset": "tiny", "cache_dir": str(tiny.folder.parent.parent), "prompt_len": 24,
        "distill_seqs": 8, "distill_prompt_len": 8, "distill_gen_len": 8}})
    evaluator = get("speculative")(spec)
    payloads = []

    class Ctx(EvalContext):
        def run(self, entry, payload, *, workdir):
            payloads.append(payload)
            raise _Stop

    for seed in (1, 2):
        io = tmp_path / f"io{seed}"
        io.mkdir()
        ctx = Ctx(None, seed=seed, scratch=tmp_path, io_dir=io, timeout_s=10)
        with pytest.raises(_Stop):
            evaluator.correctness(spec.path, ctx)
    a, b = payloads
    assert a["prompts"] == b["prompts"] and a["train_seed"] == b["train_seed"] == 0
    assert a["seed"] != b["seed"] and a["sampling"]["prompt"] != b["sampling"]["prompt"]
    assert Path(a["distill_path"]).is_file()
