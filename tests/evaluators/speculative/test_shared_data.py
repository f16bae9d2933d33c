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
        tiny, tmp_path, monkeypatch):
    from pathlib import Path

    from evaluators import get
    from evaluators._base import EvalContext
    from evaluators.speculative.evaluator import SECRET_ENV
    from optimizer.targets import load_target

    monkeypatch.delenv(SECRET_ENV, raising=False)
    root = Path(__file__).resolve().parents[3]
    cache = tiny.folder.parent.parent
    settings = {"preset": "tiny", "cache_dir": str(cache), "prompt_len": 24,
                "distill_seqs": 8, "distill_prompt_len": 8, "distill_gen_len": 8}

    def evaluator():
        spec = load_target(root / "targets/speculative/independent", root,
                           {"evaluator": settings})
        return get("speculative")(spec)

    payloads = []

    class Ctx(EvalContext):
        def session(self, entry, payload, **kw):
            payloads.append(payload)
            raise _Stop

    sets = []
    for seed in (1, 2):
        ev = evaluator()  # a new evaluator (another night, same cache): the same prompts
        io = tmp_path / f"io{seed}"
        io.mkdir()
        ctx = Ctx(None, seed=seed, scratch=tmp_path, io_dir=io, timeout_s=10)
        with pytest.raises(_Stop):
            ev.correctness(spec_path(root), ctx)
        sets.append(ev._prompt_sets(ev._timing_seed(), 2))
        assert ev._sample_prompt(1) != ev._sample_prompt(2)  # the sampled check: fresh
    a, b = payloads
    assert sets[0] == sets[1] and a["train_seed"] == b["train_seed"] == 0
    assert sets[0][0] != sets[0][1]  # the sweep and the repeat decode different prompts
    assert "prompts" not in a and Path(a["distill_path"]).name == "distill.safetensors"
    assert not Path(a["target_dir"]).exists()  # the staged target goes with the session
    # the secret lives in the trusted cache; another secret draws other prompts
    assert (cache / "speculative" / "timing-secret").is_file()
    monkeypatch.setenv(SECRET_ENV, "another night elsewhere")
    ev = evaluator()
    ev._use(ctx)
    assert ev._prompt_sets(ev._timing_seed(), 2) != sets[0]


def spec_path(root):
    return root / "targets/speculative/independent"


def test_timed_prompt_sets_are_disjoint_windows(tiny):
    from pathlib import Path

    from evaluators import get
    from optimizer.targets import load_target

    root = Path(__file__).resolve().parents[3]
    spec = load_target(root / "targets/speculative/ngram", root, {"evaluator": {
        "preset": "tiny", "cache_dir": str(tiny.folder.parent.parent), "prompts": 4,
        "prompt_len": 24, "n_new": 32}})
    ev = get("speculative")(spec)
    sets = ev._prompt_sets(123, 4)
    assert [len(s) for s in sets] == [4] * 4
    assert ev._prompt_sets(123, 2) == sets[:2]  # earlier sets do not depend on the count
    held = ev.bundle().heldout_tokens.tolist()
    starts = sorted(i for s in sets for p in s for i in range(len(held) - 23)
                    if held[i : i + 24] == p)
    assert len(starts) >= 16 and all(b - a >= 24 for a, b in zip(starts, starts[1:], strict=False))
