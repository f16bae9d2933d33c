"""Kernel wins against production: the end-to-end gate on a night's kept programs, and the
one result file of a GPU run (``bench/kernels_production_gpu.sh``).

    python bench/kernels_production.py gate --kept DIR --out gate.json [--device cuda]
    python bench/kernels_production.py summary --work DIR --out result.json
    python bench/kernels_production.py kept --result result.json --night DIR

``gate``: for every target, the program the night kept (``DIR/<target>.py``), the seed, each
production rival that runs here and torch's op (``reference``) go through
:mod:`evaluators.kernels.gate` in this process: the verdict (greedy tokens and logits
against the float64 model) and, on a GPU, the engine's decode and prefill steps replayed.
Targets whose night kept a pull branch go first; the file is rewritten after each target,
so a run cut short keeps what it finished.

``kept``: an earlier run's kept programs and their origin, from its result file, written as
the night script writes them (``DIR/kept/<target>.py``, ``DIR/kept.json``).

``summary``: the night's status and kept programs, the bench's rows (``bench.json`` of
``kernels_h200.py --quick``) and the gate's (``gate.json``) in one JSON file, and a short
table printed last.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

TARGETS = ("softmax", "rmsnorm", "layernorm", "cross_entropy", "gemm")


def _norm_tol(tdir: Path, dtype: str) -> float:
    from evaluators.kernels.evaluator import KernelConfig
    from optimizer.targets import load_target

    spec = load_target(tdir, ROOT)
    cfg = KernelConfig.parse(dict(spec.evaluator), f"{spec.rel_path}/target.toml")
    return cfg.tolerance(dtype).norm


def run_gate(kept: Path, out: Path, device: str, targets: list[str], seed: int, reps: int,
             steps: int | None, prompt: int | None) -> dict[str, Any]:
    import torch

    from evaluators.kernels import gate, rivals

    if device == "cpu":
        import os

        os.environ["TRITON_INTERPRET"] = "1"
    kept_by = json.loads((kept.parent / "kept.json").read_text()) \
        if (kept.parent / "kept.json").is_file() else {}
    order = sorted(targets, key=lambda t: kept_by.get(t, "seed") == "seed")  # winners first
    data: dict[str, Any] = {"device": torch.cuda.get_device_name() if device == "cuda"
                            else "cpu", "date": datetime.date.today().isoformat(),
                            "torch": torch.__version__, "seed": seed, "targets": {}}
    for target in order:
        tdir = ROOT / "targets" / "kernels" / target
        shape = gate.shape_for(device, target)
        shape = gate.GateShape(**{**shape.to_json(), **({"steps": steps} if steps else {}),
                                  **({"prompt": prompt} if prompt else {})})
        tol = _norm_tol(tdir, shape.dtype)
        programs = {"night": str(kept / f"{target}.py"), "seed": str(tdir / "kernel.py")}
        if not (kept / f"{target}.py").is_file():
            programs.pop("night")
        skipped = {}
        for r in rivals.rivals_for(target):
            why = rivals.unavailable(r, device)
            if why:
                skipped[r.name] = why
            else:
                programs[r.name] = f"rival:{r.name}"
        programs["torch"] = "reference"
        rec: dict[str, Any] = {"kept": kept_by.get(target, "?"), "shape": shape.to_json(),
                               "norm_tol": tol, "rivals_unavailable": skipped, "programs": {}}
        data["targets"][target] = rec
        for name, program in programs.items():
            t0 = time.perf_counter()
            try:
                res = gate.run_in_process(tdir, program, device, seed, tol,
                                          time_it=device == "cuda", shape=shape, reps=reps)
            except Exception as exc:  # noqa: BLE001 - one program's failure is its row
                res = {"program": program, "verdict": {"ok": False, "reason":
                                                       f"{type(exc).__name__}: {exc}"[:600]},
                       "times": {}}
            res["wall_s"] = round(time.perf_counter() - t0, 2)
            rec["programs"][name] = res
            v = res["verdict"]
            print(f"gate {target:13s} {name:10s} {'PASS' if v['ok'] else 'FAIL'} "
                  f"{v['reason'][:150]} {res['times']} ({res['wall_s']} s)", flush=True)
            if device == "cuda":
                torch.cuda.empty_cache()
            out.write_text(json.dumps(data, indent=1))
        times = {n: p["times"] for n, p in rec["programs"].items() if p["times"]}
        main = "night" if "night" in rec["programs"] else "seed"
        rec["gain"] = gate.gain_line(times, main)
        out.write_text(json.dumps(data, indent=1))
    return data


def _read(path: Path, tail: int = 0) -> Any:
    if not path.is_file():
        return None
    text = path.read_text(errors="replace")
    if path.suffix == ".json":
        try:
            return json.loads(text)
        except json.JSONDecodeError:
            return {"unreadable": text[-2000:]}
    return text[-tail:] if tail else text


def _fmt(ms: float | None) -> str:
    return "-" if ms is None or not math.isfinite(ms) else f"{ms:.4f}"


def summary(work: Path, out: Path, stages: dict[str, Any]) -> list[str]:
    night = work / "night"
    kept = _read(night / "kept.json") or {}
    bench = _read(work / "bench.json") or {}
    gate = _read(work / "gate.json") or {}
    data = {
        "date": datetime.date.today().isoformat(),
        "stages": stages,
        "night": {"kept": kept, "status": _read(night / "status.txt"),
                  "report_tail": _read(night / "report.md", 6000),
                  "log_tail": _read(night / "night.log", 8000),
                  "script_tail": _read(work / "night-stdout.log", 3000),
                  "kept_sources": {p.stem: p.read_text() for p in
                                   sorted((night / "kept").glob("*.py"))}},
        "bench": bench,
        "gate": gate,
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(data, indent=1))
    lines = table(data)
    (out.parent / "table.txt").write_text("\n".join(lines) + "\n")
    return lines


def table(data: dict[str, Any]) -> list[str]:
    """Per target and headline workload: the kept program's time, the seed's, the fastest
    production rival's; then the gate's verdict and decode step times."""
    rows = [r for r in (data.get("bench") or {}).get("rows", []) if r.get("valid")]
    kept = (data.get("night") or {}).get("kept") or {}
    lines = ["kernel bench (ms; fastest production rival)",
             f"{'target':13s} {'workload':20s} {'kept':>9s} {'seed':>9s} {'eager':>9s} "
             f"{'rival':>22s}"]
    seen = []
    for r in rows:
        key = (r["target"], r["workload"])
        if key not in seen:
            seen.append(key)
    for t, w in seen:
        by = {r["impl"]: r["ms"] for r in rows if (r["target"], r["workload"]) == (t, w)}
        riv = {k.removeprefix("rival:"): v for k, v in by.items() if k.startswith("rival:")}
        best = min(riv, key=lambda k: riv[k]) if riv else None
        rtxt = f"{best} {_fmt(riv[best])}" if best else "none ran"
        lines.append(f"{t:13s} {w:20s} {_fmt(by.get('night', by.get('seed'))):>9s} "
                     f"{_fmt(by.get('seed')):>9s} {_fmt(by.get('eager')):>9s} {rtxt:>22s}")
    unavailable = (data.get("bench") or {}).get("rivals_unavailable") or {}
    for t, why in unavailable.items():
        for lib, reason in why.items():
            lines.append(f"  {t} {lib}: {reason[:110]}")
    lines.append("end-to-end gate (decode / prefill step ms, replayed)")
    for t, rec in ((data.get("gate") or {}).get("targets") or {}).items():
        progs = rec.get("programs", {})
        cells = []
        for name, p in progs.items():
            v = p.get("verdict", {})
            tm = p.get("times") or {}
            score = f"/score {_fmt(tm['score_ms'])}" if "score_ms" in tm else ""
            cells.append(f"{name} {'ok' if v.get('ok') else 'FAIL'} "
                         f"{_fmt(tm.get('decode_ms'))}/{_fmt(tm.get('prefill_ms'))}{score}")
        lines.append(f"{t:13s} kept={kept.get(t, rec.get('kept', '?'))}: " + "; ".join(cells))
        for name, p in progs.items():
            v = p.get("verdict", {})
            if not v.get("ok"):
                lines.append(f"  {name}: {str(v.get('reason', ''))[:150]}")
    return lines


def restore_kept(result: Path, night: Path) -> None:
    data = json.loads(result.read_text())
    sources = (data.get("night") or {}).get("kept_sources") or {}
    if not sources:
        print(f"{result} holds no kept programs (night.kept_sources)", file=sys.stderr)
        sys.exit(2)
    (night / "kept").mkdir(parents=True, exist_ok=True)
    for target, src in sources.items():
        (night / "kept" / f"{target}.py").write_text(src)
    kept = {t: (data["night"].get("kept") or {}).get(t, "?") for t in sources}
    (night / "kept.json").write_text(json.dumps(kept, indent=1))
    print(f"kept programs of {result}: {kept}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("gate", help="the end-to-end gate on the kept programs")
    g.add_argument("--kept", type=Path, required=True, help="folder of <target>.py")
    g.add_argument("--out", type=Path, required=True)
    g.add_argument("--device", default="")
    g.add_argument("--targets", default=",".join(TARGETS))
    g.add_argument("--seed", type=int, default=20261205)
    g.add_argument("--reps", type=int, default=50)
    g.add_argument("--steps", type=int, default=0, help="greedy steps (default: the shape's)")
    g.add_argument("--prompt", type=int, default=0, help="prompt tokens (default: the shape's)")
    k = sub.add_parser("kept", help="an earlier run's kept programs, from its result file")
    k.add_argument("--result", type=Path, required=True)
    k.add_argument("--night", type=Path, required=True)
    s = sub.add_parser("summary", help="one result file and a table")
    s.add_argument("--work", type=Path, required=True)
    s.add_argument("--out", type=Path, required=True)
    s.add_argument("--stage", action="append", default=[],
                   help="NAME=EXIT_STATUS:SECONDS of a stage of the run (repeatable)")
    args = ap.parse_args()
    if args.cmd == "gate":
        import torch

        device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
        targets = [t for t in args.targets.split(",") if t]
        bad = [t for t in targets if t not in TARGETS]
        if bad:
            print(f"unknown targets {bad}: choose from {','.join(TARGETS)}", file=sys.stderr)
            sys.exit(2)
        if not args.kept.is_dir():
            print(f"--kept {args.kept} is not a folder of <target>.py programs",
                  file=sys.stderr)
            sys.exit(2)
        run_gate(args.kept, args.out, device, targets, args.seed, args.reps,
                 args.steps or None, args.prompt or None)
        return
    if args.cmd == "kept":
        restore_kept(args.result, args.night)
        return
    stages = {}
    for item in args.stage:
        name, _, rest = item.partition("=")
        code, _, secs = rest.partition(":")
        stages[name] = {"exit": int(code or 0), "seconds": int(secs or 0)}
    for line in summary(args.work, args.out, stages):
        print(line)


if __name__ == "__main__":
    main()
