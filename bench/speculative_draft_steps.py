"""What one draft call costs in the draft's own process: the EAGLE seed's ``propose(k)``
with its steps run eagerly and replayed as CUDA graphs, on a target view of the ``h200``
preset's shape (random weights: cost only, no acceptance).

    python bench/speculative_draft_steps.py --out OUT.json
    python bench/speculative_draft_steps.py --preset tiny --out /tmp/steps.json   # CPU
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from evaluators.speculative.api import TargetView  # noqa: E402
from evaluators.speculative.model import LMConfig, TargetHead  # noqa: E402
from evaluators.speculative.serve_draft import greedy_pick  # noqa: E402
from evaluators.speculative.target import PRESETS  # noqa: E402


def _eagle(graphs: int):
    spec = importlib.util.spec_from_file_location(
        f"eagle_{graphs}", ROOT / "targets" / "speculative" / "eagle" / "draft.py")
    mod = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(mod)
    mod.GRAPHS = graphs
    return mod


@torch.no_grad()
def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--preset", default="h200")
    ap.add_argument("--ks", default="1,4,8")
    ap.add_argument("--calls", type=int, default=100)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    torch.set_num_threads(1)
    p = PRESETS[args.preset]
    cfg = LMConfig(p.vocab, p.d_model, p.n_layers, p.n_heads, p.ffn_mult, p.max_len)
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    head = TargetHead(cfg).to(dev).eval()
    view = TargetView(cfg.vocab, cfg.d_model, cfg.n_layers, cfg.n_heads, cfg.max_len,
                      head.embed, head.head)
    rows: dict[str, dict[str, float]] = {}
    for graphs in (0, 1):
        torch.manual_seed(0)
        draft = _eagle(graphs).build(view).to(dev).eval()
        t0 = time.perf_counter()
        draft.load_state_dict(draft.state_dict())  # the load hook captures (GRAPHS = 1)
        capture_s = time.perf_counter() - t0
        n_feats = len(draft.feature_layers) * cfg.d_model
        for k in [int(x) for x in args.ks.split(",")]:
            draft.reset(torch.arange(65, device=dev) % cfg.vocab,
                        torch.randn(64, n_feats, device=dev))
            times = []
            for i in range(args.calls + 3):
                accepted = [int(i % cfg.vocab)] * (1 + i % 3)  # as if verification took some
                if torch.cuda.is_available():
                    torch.cuda.synchronize()
                t0 = time.perf_counter()
                draft.propose(k, greedy_pick)  # the draft's process's pick when greedy
                if torch.cuda.is_available():
                    torch.cuda.synchronize()
                times.append(time.perf_counter() - t0)
                draft.accept(accepted, torch.randn(len(accepted), n_feats, device=dev))
                if len(draft.tokens) > cfg.max_len - 2 * k - 8:
                    draft.reset(torch.arange(65, device=dev) % cfg.vocab,
                                torch.randn(64, n_feats, device=dev))
            rows[f"graphs={graphs} k={k}"] = {
                "propose_ms": 1e3 * statistics.median(times[3:]), "capture_s": capture_s}
    out = {"device": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu",
           "date": datetime.date.today().isoformat(), "torch": torch.__version__,
           "preset_shape": args.preset, "draft": "spec_eagle seed (random weights)",
           "command": "python bench/speculative_draft_steps.py " + " ".join(sys.argv[1:]),
           "timing": "median wall clock of propose(k) after a device sync, in the draft's "
                     "process (no round trip)", "rows": rows}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1))
    for name, r in rows.items():
        print(f"{name:>14}  propose {r['propose_ms']:.3f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
