import shutil
import tempfile
from pathlib import Path

import pytest
import torch

from evaluators.speculative.target import load_or_build


@pytest.fixture(scope="session")
def tiny():
    """The tiny preset target (trained once per session, a few seconds), frozen.

    Cached in its own temporary folder: pytest's numbered base folders are pruned by
    other pytest sessions on the same machine, which pulled the cache out from under a
    sandboxed child.
    """
    torch.set_num_threads(1)
    folder = Path(tempfile.mkdtemp(prefix="spec-tiny-"))
    bundle = load_or_build("tiny", folder)
    for p in bundle.model.parameters():
        p.requires_grad_(False)
    yield bundle
    shutil.rmtree(folder, ignore_errors=True)
