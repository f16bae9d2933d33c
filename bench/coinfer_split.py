"""Figures of the split mode: the seed, each baseline and fixed splits on the target's
training and held-out cases, and the regimes where a split could pay (a sweep of cut,
codec, decode placement, server load and WebGPU factor over one device and one link).

    python bench/coinfer_split.py --json bench/results/coinfer-split-2026-12-06.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import platform
import time
from pathlib import Path

from evaluators import get
from evaluators.routing.split.evaluator import request_facts
from evaluators.routing.split.model import Choice
from optimizer.targets import load_target

ROOT = Path(__file__).resolve().parents[1]
KEEP = ("server_usd_per_mtok", "share_server_only", "ttft_p50_s", "ttft_p90_s", "ttft_p99_s",
        "tpot_p50_s", "tpot_p90_s", "tpot_p99_s", "meets_slo", "mean_client_layers")


def _row(m: dict[str, float]) -> dict[str, float]:
    return {k: round(float(m[k]), 5) for k in KEEP}


def regimes(ev, case) -> list[dict]:
    """Every request with one fixed choice, on the case's clients narrowed to one device
    and one link, at rate scales 1 and 4, WebGPU factors 0.5 and 1.0."""
    from evaluators.routing.config import build_workload
    from evaluators.routing.split.settings import Case, clients_for
    from evaluators.routing.split.tables import load_uplinks

    links = load_uplinks(ROOT / "targets/routing/coinfer_split/uplinks.json")
    out = []
    for scale in (1.0, 4.0):
        w = build_workload({"kind": "profile", "profile": "azure2023_conversation",
                            "seed": 3, "duration_s": 60, "rate_scale": scale})
        for link in ("tmobile_lte_short", "verizon_lte_short"):
            clients = clients_for(w, {"rtx_4090": 1.0}, [link], links, 0, 2.0, "bench")
            c = Case(f"x{scale:g}/{link}", w, clients)
            for factor in (0.5, 1.0):
                prof = dataclasses.replace(ev.cfg.profile, webgpu_factor=factor)
                ev.cfg = dataclasses.replace(ev.cfg, profile=prof)
                for k, codec, dec in ((0, "bf16", "server"), (4, "seed_bits5", "server"),
                                      (4, "seed_bits5", "split"), (16, "seed_bits5", "split"),
                                      (16, "bf16", "split")):
                    m = ev.figures(c, [Choice(k, codec, dec)] * len(w))
                    out.append({"case": c.name, "requests": len(w), "webgpu_factor": factor,
                                "layers": k, "codec": codec, "decode": dec, **_row(m)})
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    t0 = time.time()
    ev = get("routing")(load_target(ROOT / "targets/routing/coinfer_split", ROOT))
    ns: dict = {}
    exec(compile((ROOT / "targets/routing/coinfer_split/policy.py").read_text(), "seed",
                 "exec"), ns)
    cases = {}
    for case in (ev.cfg.train,) + ev.cfg.held_out:
        seed = [Choice(**ns["split"](request_facts(case, i, ev.cfg)))
                for i in range(len(case.workload))]
        rows = {"seed": _row(ev.figures(case, seed))}
        rows.update({n: _row(m) for n, m in ev.baseline_figures(case).items()})
        cases[case.name] = {"requests": len(case.workload), "plans": rows}
    out = {"about": __doc__.strip().splitlines()[0], "machine": f"{platform.machine()}, 2 cores",
           "date": "2026-12-06", "cases": cases, "regimes": regimes(ev, ev.cfg.train),
           "seconds": round(time.time() - t0, 1)}
    text = json.dumps(out, indent=1)
    if args.json:
        args.json.write_text(text + "\n")
    for name, c in cases.items():
        for plan, r in c["plans"].items():
            print(name, plan, r["server_usd_per_mtok"], r["ttft_p90_s"], r["tpot_p90_s"],
                  r["meets_slo"])
    for r in out["regimes"]:
        print(r["case"], r["webgpu_factor"], r["layers"], r["codec"], r["decode"],
              r["server_usd_per_mtok"], r["ttft_p90_s"], r["tpot_p90_s"], r["meets_slo"])
    print("seconds", out["seconds"])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
