"""Error of the TP step model (evaluators/routing/deploy) against Splitwise's measurements.

    .venv/bin/python bench/deploy_calibration.py [--data DIR] [--json OUT]

Reads ``splitwise_perf_model.csv`` from ``../shared/data/deploy/`` (or --data) and reports,
with the constants shipped in tables.json, the absolute relative error of the modelled
prompt time and token time of every measured Llama-2-70B configuration (H100 and A100,
TP 2, 4 and 8): median and 90th percentile per GPU and TP, per GPU and overall. It also
refits the constants with one TP degree left out and reports the error on that degree
(how the model does on a degree it was not fitted to).
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from evaluators.routing.deploy import calibration as cal  # noqa: E402
from evaluators.routing.deploy import tables as tb  # noqa: E402


def held_out(points: list[cal.Point]) -> dict[str, dict[str, float]]:
    """Errors on each (gpu, tp) with constants fitted to that GPU's other degrees."""
    rows = []
    for gpu in sorted({p.gpu for p in points}):
        for tp in sorted({p.tp for p in points if p.gpu == gpu}):
            fitted = cal.fit([p for p in points if p.gpu == gpu and p.tp != tp])
            for p in points:
                if p.gpu == gpu and p.tp == tp:
                    pr, tk = cal.predict(p, fitted)
                    rows.append(
                        {
                            "gpu": gpu,
                            "tp": tp,
                            "prompt_err": pr / p.prompt_s - 1.0,
                            "token_err": tk / p.token_s - 1.0,
                        }
                    )
    return cal.summary(rows)


def _table(summary: dict[str, dict[str, float]]) -> str:
    lines = ["| group | n | prompt median | prompt p90 | token median | token p90 |"]
    lines.append("|---|---|---|---|---|---|")
    for name in sorted(summary, key=lambda k: (k == "all", len(k.split()) == 1, k)):
        s = summary[name]
        lines.append(
            f"| {name} | {s['n']:.0f} | {s['prompt_median']:.1%} | {s['prompt_p90']:.1%} | "
            f"{s['token_median']:.1%} | {s['token_p90']:.1%} |"
        )
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", type=Path, default=tb.default_data_dir())
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    if not (args.data / cal.SPLITWISE_FILE).exists():
        print(f"no {cal.SPLITWISE_FILE} under {args.data}", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    points = cal.load_points(args.data)
    rows = cal.errors(points)
    summary = cal.summary(rows)
    out = held_out(points)
    print("shipped constants (fitted to all points):")
    print(_table(summary))
    print("\nheld out (fitted to the other two TP degrees of the GPU):")
    print(_table(out))
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "command": "python bench/deploy_calibration.py --json " + str(args.json),
                    "machine": platform.platform(),
                    "date": time.strftime("%Y-%m-%d", time.gmtime()),
                    "source": "Mutinifni/splitwise-sim data/perf_model.csv (MIT), Llama-2-70B, "
                    "h100-80gb and a100-80gb rows; a configuration's value is the median "
                    "of its runs",
                    "calibration": tb.tables()["calibration"],
                    "summary": summary,
                    "held_out_tp": out,
                    "seconds": round(time.perf_counter() - t0, 2),
                    "points": [
                        {k: round(v, 4) if isinstance(v, float) else v for k, v in r.items()}
                        for r in rows
                    ],
                },
                indent=1,
            )
            + "\n"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
