"""Train and cache a target preset ahead of a night:
``python -m evaluators.speculative.prepare --preset h200``."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from evaluators.speculative.target import PRESETS, load_or_build


def main(argv: list[str] | None = None) -> int:
    """``python -m evaluators.speculative.prepare --preset NAME [--cache DIR]``: train and
    cache a preset's target ahead of a night (the night's first evaluation would otherwise
    train it inside the night's budget); prints what was cached."""
    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--preset", default="default", choices=sorted(PRESETS))
    parser.add_argument("--cache", type=Path, default=None,
                        help="cache directory (default: .optimizer/cache, a night's)")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    try:
        bundle = load_or_build(args.preset, args.cache)
    except RuntimeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    params = sum(p.numel() for p in bundle.model.parameters())
    print(json.dumps({"folder": str(bundle.folder), "params": params, "steps": bundle.steps,
                      "train_s": round(bundle.train_s, 1),
                      "final_loss": round(bundle.final_loss, 4),
                      "train_tokens": len(bundle.train_tokens),
                      "heldout_tokens": len(bundle.heldout_tokens),
                      "wall_s": round(time.perf_counter() - start, 1)}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
