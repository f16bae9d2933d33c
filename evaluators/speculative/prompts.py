"""The timed prompts: disjoint held-out windows drawn with a seed no candidate sees.

A public seed would let a candidate rebuild them: the corpus is the standard library,
readable in the sandbox, and the split is fixed, so it could decode the timed prompts in
advance. The seed mixes the target's ``timing_seed`` with a secret kept on the trusted
side, the same for every candidate of a night (common random numbers: with fresh prompts
per candidate the seed draft's accepted length moved between 3.9 and 7.5 from one draw of 4
prompts to the next, more than any knob changed it).
"""

from __future__ import annotations

import hashlib
import os
import secrets
from pathlib import Path

import torch

SECRET_ENV = "OPTIMIZER_SPEC_TIMING_SECRET"  # trusted side only: the sandbox scrubs it


def secret(cache_dir: Path) -> str:
    """``OPTIMIZER_SPEC_TIMING_SECRET`` when set, else a random secret made once in the
    trusted cache (``speculative/timing-secret``; a night's cache is hidden from the
    sandbox), so nights on one cache share their prompts."""
    env = os.environ.get(SECRET_ENV)
    if env:
        return env
    folder = cache_dir / "speculative"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "timing-secret"
    if not path.is_file():
        tmp = folder / f".timing-secret-{os.getpid()}"
        tmp.write_text(secrets.token_hex(16))
        try:
            os.link(tmp, path)  # atomic and never overwrites: two workers agree
        except FileExistsError:
            pass
        finally:
            tmp.unlink()
    return path.read_text().strip()


def timing_seed(secret_text: str, public_seed: int) -> int:
    text = f"{secret_text}:{public_seed}"
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little") >> 1


def prompt_sets(held: torch.Tensor, n: int, plen: int, n_new: int, seed: int,
                n_sets: int) -> list[list[list[int]]]:
    """``n_sets`` lists of ``n`` held-out windows of ``plen`` tokens, disjoint from one
    another where the split is long enough (each in a slot of its window plus its
    continuation's span), so that no context is timed twice; earlier sets do not depend
    on ``n_sets``."""
    span = plen + n_new
    gen = torch.Generator().manual_seed(seed)
    slots = len(held) // span
    if slots >= n * n_sets:
        order = torch.randperm(slots, generator=gen)
        offsets = torch.randint(0, span - plen + 1, (slots,), generator=gen)
        starts = (order * span + offsets[order])[: n * n_sets].tolist()
    else:  # a small held-out split (the tiny preset): windows may overlap
        starts = torch.randint(0, len(held) - plen, (n * n_sets,), generator=gen).tolist()
    windows = [held[s : s + plen].tolist() for s in starts]
    return [windows[i * n : (i + 1) * n] for i in range(n_sets)]


SAMPLE_LEN = 32


def sample_prompt(held: torch.Tensor, seed: int) -> list[int]:
    """The sampled check's prompt: 32 held-out tokens, fresh per evaluation."""
    gen = torch.Generator().manual_seed(seed)
    start = int(torch.randint(0, len(held) - SAMPLE_LEN, (1,), generator=gen))
    return held[start : start + SAMPLE_LEN].tolist()
