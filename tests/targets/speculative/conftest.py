import pytest
import torch

from evaluators.speculative.target import load_or_build


@pytest.fixture(scope="session")
def tiny(tmp_path_factory):
    """The tiny preset target (trained once per session, a few seconds), frozen."""
    torch.set_num_threads(1)
    bundle = load_or_build("tiny", tmp_path_factory.getbasetemp() / "spec-cache")
    for p in bundle.model.parameters():
        p.requires_grad_(False)
    return bundle
