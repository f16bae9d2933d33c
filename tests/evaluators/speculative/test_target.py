"""The built-in target's weights do not depend on the caller's thread setting."""

import dataclasses

import pytest
import torch

from evaluators.speculative.target import PRESETS, TRAIN_THREADS, build_target

# the preset's time cap is a safety net: on a loaded machine it ended training early and two
# runs trained different numbers of steps, which this test is not about
PRESET = dataclasses.replace(PRESETS["tiny"], max_train_s=600.0)


@pytest.mark.slow
def test_target_weights_do_not_depend_on_the_callers_threads():
    before = torch.get_num_threads()
    models = []
    try:
        for threads in (1, TRAIN_THREADS + 1):
            torch.set_num_threads(threads)
            models.append(build_target(PRESET).model.state_dict())
            assert torch.get_num_threads() == threads  # the caller's setting is restored
    finally:
        torch.set_num_threads(before)
    a, b = models
    assert a.keys() == b.keys()
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_a_short_standard_library_is_followed_by_the_installed_packages(tmp_path, monkeypatch):
    import sysconfig

    from evaluators.speculative import target as target_mod

    std, pure = tmp_path / "lib", tmp_path / "site"
    (std / "pkg").mkdir(parents=True)
    pure.mkdir()
    (std / "a.py").write_text("A" * 10)
    (std / "pkg" / "b.py").write_text("B" * 10)
    (pure / "c.py").write_text("C" * 10)
    paths = {"stdlib": str(std), "purelib": str(pure), "platlib": str(pure)}
    monkeypatch.setattr(sysconfig, "get_paths", lambda: paths)
    assert target_mod.corpus_text(100) == "A" * 10  # the top folder only: nothing added
    assert target_mod.corpus_text(25, recursive=True) == "A" * 10 + "B" * 10 + "C" * 5
    assert target_mod.corpus_text(15, recursive=True) == "A" * 10 + "B" * 5


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message without a GPU")
def test_preparing_a_gpu_preset_without_a_gpu_is_a_clear_error(tmp_path, capsys):
    from evaluators.speculative.prepare import main

    assert main(["--preset", "h200", "--cache", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "trained on a CUDA GPU and none is visible here" in err
    assert not (tmp_path / "speculative").exists()  # nothing half-made


def _train(monkeypatch, clock, max_s: float, steps: int = 6,
           **kw: bool) -> dict[str, torch.Tensor]:
    """Six steps of a two-layer model on a fixed token stream, under a given clock."""
    import types

    from evaluators.speculative import target as target_mod

    monkeypatch.setattr(target_mod, "time", types.SimpleNamespace(perf_counter=clock))
    torch.manual_seed(0)
    model = target_mod.TinyLM(target_mod.LMConfig(64, 16, 2, 2, 2, max_len=32))
    tokens = torch.randint(0, 64, (400,), generator=torch.Generator().manual_seed(1))
    losses, _ = target_mod.train_target(model, tokens, steps=6, batch=2, seq_len=16, lr=1e-2,
                                        max_s=max_s, **kw)
    assert len(losses) == steps
    return {k: v.clone() for k, v in model.state_dict().items()}


def test_a_busy_machine_trains_the_same_cpu_model(monkeypatch):
    # A loaded machine's clock runs ahead of the steps (half the cap gone after one step):
    # the learning-rate schedule follows the steps alone, so the weights are the same.
    quiet = _train(monkeypatch, lambda: 0.0, max_s=100.0)
    ticks = iter([0.0, 0.0] + [50.0] * 100)
    busy = _train(monkeypatch, lambda: next(ticks), max_s=100.0)
    assert all(torch.equal(quiet[k], busy[k]) for k in quiet)


def test_passing_the_cap_on_the_cpu_is_an_error_not_a_smaller_model(monkeypatch):
    ticks = iter([0.0] + [float(i) for i in range(1, 100)])
    with pytest.raises(RuntimeError, match=r"passed its 3 s cap after \d of 6 steps"):
        _train(monkeypatch, lambda: next(ticks), max_s=3.0)


def test_a_benchmarks_time_budget_ends_its_training_at_the_cap(monkeypatch):
    ticks = iter([0.0] + [float(i) for i in range(1, 100)])
    _train(monkeypatch, lambda: next(ticks), max_s=3.0, steps=2, time_budget=True)
