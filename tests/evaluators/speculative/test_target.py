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
