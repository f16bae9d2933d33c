"""Kernel targets on one GPU: validate and time eager, torch.compile, the seed and the best
candidate of a small recorded search (the seed's knob grid plus hand-written variants).

Needs only torch and triton (evaluators/ imports nothing else). Usage::

    python bench/kernels_h200.py --out bench/results/kernels-h200.json [--targets softmax,gemm]
        [--night DIR]   # DIR/<target>.py: the program a GPU night kept, timed as "night"
        [--quick]       # no search and no torch.compile: seed, night, eager and the rivals
        [--prepare]     # without a GPU: load every program and rival, write what would run

The production rivals (Liger-Kernel, FlashInfer, QuACK; ``evaluators/kernels/rivals.py``)
are timed beside them where their library imports (rows ``rival:<name>``); the ones that
cannot run are listed with the reason under ``rivals_unavailable``.

Every implementation is checked against a float64 reference on fresh inputs (two
distributions) before it is timed; a wrong one is recorded as such and never timed.
Timing: CUDA events, 256 MB L2 flush before every repetition, warm-up, implementations
interleaved, median of 100 repetitions (search: 25), against the copy bandwidth measured
at start. One program per target is "best": the configuration with the lowest geometric
mean over that target's workloads, so it is a program the loop could ship.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import itertools
import json
import math
import re
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from evaluators import numerics, timing  # noqa: E402
from evaluators.kernels import rivals as rival_kernels  # noqa: E402

KNOB = re.compile(r"^(?P<name>[A-Z_][A-Z0-9_]*) = (?P<value>\S+)(?P<rest>\s+# knob: choices=\[(?P<choices>[^\]]*)\].*)$", re.M)  # noqa: E501

# (target, workload name, get_inputs args, init); bf16 memory-bound rows hold 2^27 elements
WORKLOADS = {
    "softmax": [("bf16-32768x4096", {"rows": 32768, "cols": 4096, "dtype": "bfloat16"}, None),
                ("bf16-8192x16384", {"rows": 8192, "cols": 16384, "dtype": "bfloat16"}, None),
                ("fp32-16383x3000", {"rows": 16383, "cols": 3000, "dtype": "float32"}, None)],
    "rmsnorm": [("bf16-32768x4096", {"rows": 32768, "hidden": 4096, "dtype": "bfloat16"},
                 [4096, 1e-6]),
                ("bf16-16381x5120", {"rows": 16381, "hidden": 5120, "dtype": "bfloat16"},
                 [5120, 1e-6])],
    "layernorm": [("bf16-32768x4096", {"rows": 32768, "hidden": 4096, "dtype": "bfloat16"},
                   [4096, 1e-5]),
                  ("bf16-16381x5120", {"rows": 16381, "hidden": 5120, "dtype": "bfloat16"},
                   [5120, 1e-5])],
    "cross_entropy": [("bf16-4096x128256", {"rows": 4096, "vocab": 128256, "dtype": "bfloat16"},
                       None),
                      ("bf16-1023x128256", {"rows": 1023, "vocab": 128256, "dtype": "bfloat16"},
                       None)],
    "gemm": [("bf16-4096^3", {"m": 4096, "n": 4096, "k": 4096, "dtype": "bfloat16"}, None),
             ("bf16-8192^3", {"m": 8192, "n": 8192, "k": 8192, "dtype": "bfloat16"}, None),
             ("bf16-3000x5000x1000", {"m": 3000, "n": 5000, "k": 1000, "dtype": "bfloat16"},
              None)],
}
# GEMM's knob grid has 864 points; these are the usual Hopper tile shapes.
GEMM_CONFIGS = [
    dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=8, NUM_WARPS=w, NUM_STAGES=s)
    for bm, bn, bk, w, s in [(128, 128, 64, 8, 3), (128, 256, 64, 8, 3), (256, 128, 64, 8, 3),
                             (128, 128, 64, 4, 4), (128, 256, 64, 8, 4), (128, 128, 128, 8, 3),
                             (64, 256, 64, 4, 4), (128, 64, 64, 4, 4)]
]
MAX_GRID = 16  # --grid-max


def knobs(source: str) -> dict[str, list]:
    return {m["name"]: json.loads("[" + m["choices"] + "]") for m in KNOB.finditer(source)}


def near_first(source: str) -> list[dict]:
    """The knob grid, nearest to the source's own values first (a truncated grid then
    explores around the hand-picked default instead of one corner)."""
    k = knobs(source)
    now = {m["name"]: json.loads(m["value"]) for m in KNOB.finditer(source)}

    def dist(values: dict) -> int:
        return sum(abs(k[n].index(v) - (k[n].index(now[n]) if now[n] in k[n] else 0))
                   for n, v in values.items())

    combos = [dict(zip(k, c, strict=True)) for c in itertools.product(*k.values())]
    return sorted(combos, key=dist)


def substitute(source: str, values: dict) -> str:
    def repl(m: re.Match) -> str:
        if m["name"] in values:
            return f"{m['name']} = {values[m['name']]!r}{m['rest']}"
        return m.group(0)

    return KNOB.sub(repl, source)


def night_workloads(tdir: Path) -> list[tuple[str, dict, list | None]]:
    """The GPU workloads a night times (target.toml, read as the evaluator reads it),
    instead of the bench's headline ones."""
    from evaluators.kernels.evaluator import KernelConfig
    from optimizer.targets import load_target

    spec = load_target(tdir, ROOT)
    cfg = KernelConfig.parse(dict(spec.evaluator), f"{spec.rel_path}/target.toml")
    return [(w.name, w.args, None if w.init is None else list(w.init))
            for w in cfg.workloads if w.device == "cuda" and not w.skip]


def load_module(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


class Bench:
    def __init__(self, out: Path, reps: int, search_reps: int, grid_max: int = MAX_GRID,
                 night: Path | None = None, variants: str = "", night_workloads: bool = False,
                 quick: bool = False):
        self.out, self.reps, self.search_reps = out, reps, search_reps
        self.quick = quick  # no search, no torch.compile
        self.unavailable: dict[str, dict[str, str]] = {}
        self.variants = set(filter(None, variants.split(",")))
        self.night_workloads = night_workloads
        self.night = night
        self.grid_max = grid_max
        self.copy_gbs = timing.copy_bandwidth_gbs()
        self.flusher = timing.L2Flusher("cuda")
        self.tmp = Path(tempfile.mkdtemp(prefix="kbench-"))
        self.rows: list[dict] = []
        self.search_log: list[dict] = []
        self.n_mod = 0
        print(f"copy bandwidth {self.copy_gbs:.0f} GB/s on {torch.cuda.get_device_name()}",
              flush=True)

    def module_from_source(self, source: str):
        self.n_mod += 1
        path = self.tmp / f"cand{self.n_mod}.py"
        path.write_text(source)
        return load_module(path, f"cand{self.n_mod}")

    def write(self) -> None:
        data = {
            "device": torch.cuda.get_device_name(),
            "date": datetime.date.today().isoformat(),
            "torch": torch.__version__,
            "triton": __import__("triton").__version__,
            "copy_gbs": self.copy_gbs,
            "method": "CUDA events, 256 MB L2 flush and a 0.1 ms GPU spin before the start "
                      "event per repetition (the host launch is never timed), interleaved, "
                      f"median of {self.reps}; bytes = inputs + outputs + parameters, each once",
            "rows": self.rows,
            "rivals_unavailable": self.unavailable,
            "search": self.search_log,
        }
        self.out.parent.mkdir(parents=True, exist_ok=True)
        self.out.write_text(json.dumps(data, indent=1))

    def run_target(self, target: str) -> None:
        tdir = ROOT / "targets" / "kernels" / target
        ref = load_module(tdir / "reference.py", f"ref_{target}")
        seed_src = (tdir / "kernel.py").read_text()
        sources = {"seed": seed_src}
        night = self.night / f"{target}.py" if self.night else None
        if night is not None and night.is_file():
            sources["night"] = night.read_text()  # also a contender for "best"
        grid = [] if self.quick else list(self._grid(target, seed_src))
        for values in grid:
            sources[f"seed{values}"] = substitute(seed_src, values)
        for vpath in sorted((tdir / "variants").glob("*.py")) if (tdir / "variants").exists() \
                else []:
            if self.quick or (self.variants and vpath.stem not in self.variants):
                continue
            vsrc = vpath.read_text()
            for values in near_first(vsrc)[:self.grid_max]:
                sources[f"{vpath.stem}{values}"] = substitute(vsrc, values)
        cases = []
        for wname, args, init in (night_workloads(tdir) if self.night_workloads
                                  else WORKLOADS[target]):
            init = list(init if init is not None else ref.get_init_inputs())
            dt = numerics.torch_dtype(args["dtype"])
            cases.append((wname, args, init, dt))
        # search: validate on the first check distribution, time briefly, keep the best program
        scores: dict[str, list[float]] = {k: [] for k in sources}
        mods = {}
        for key, src in sources.items():
            mods[key] = self.module_from_source(src)
        bad: dict[str, str] = {}
        for _wname, args, init, dt in cases:
            inputs, params, refs = self._case(ref, args, init, dt, "normal", 1)
            for key, mod in mods.items():
                if key in bad:
                    continue
                try:
                    model = self._model(mod.ModelNew, init, params)
                    with torch.no_grad():
                        out = model(*inputs)
                    torch.cuda.synchronize()
                except Exception as exc:  # noqa: BLE001 - a config may not compile
                    bad[key] = f"{type(exc).__name__}: {str(exc)[:200]}"
                    continue
                v = self._verdict(out, refs)
                if v:
                    bad[key] = v
                    continue
                with torch.no_grad():
                    s = timing.time_interleaved({"x": lambda m=model, i=inputs: m(*i)},
                                                reps=self.search_reps, flusher=self.flusher)["x"]
                scores[key].append(s.median)
            del inputs, refs
        for key in sources:
            ok = key not in bad and len(scores[key]) == len(cases)
            self.search_log.append({"target": target, "config": key, "valid": ok,
                                    "reason": bad.get(key, ""),
                                    "ms": scores[key] if ok else []})
        ranked = sorted((math.exp(statistics.fmean(map(math.log, v))), k)
                        for k, v in scores.items() if k not in bad and len(v) == len(cases))
        best_key = ranked[0][1] if ranked else "seed"
        print(f"{target}: {len(sources)} programs searched, {len(bad)} invalid/failed, best "
              f"{best_key}", flush=True)
        for key, why in list(bad.items())[:4]:
            print(f"  rejected {key}: {why[:160]}", flush=True)
        for wname, args, init, dt in cases:
            self._final(target, ref, wname, args, init, dt, mods["seed"], mods[best_key],
                        best_key, mods.get("night"))
            self.write()

    def _grid(self, target: str, src: str):
        if target == "gemm":
            yield from GEMM_CONFIGS[:self.grid_max]
            return
        yield from near_first(src)[:self.grid_max]

    def _case(self, ref, args, init, dt, dist, seed):
        case = numerics.make_case(ref, args, init, dist, seed, dt)
        inputs = [t.cuda() if isinstance(t, torch.Tensor) else t for t in case.inputs]
        params = {k: v.cuda() for k, v in case.params.items()}
        model = ref.Model(*init).cuda().double()
        if params:
            model.load_state_dict({k: v.double() for k, v in params.items()})
        with torch.no_grad():
            refs = numerics.as_list(model(*[t.double() if isinstance(t, torch.Tensor) and
                                            t.is_floating_point() else t for t in inputs]))
        return inputs, params, refs

    @staticmethod
    def _model(cls, init, params, dt=None):
        model = cls(*init).cuda()
        if params:
            model.load_state_dict(params)
        return model

    @staticmethod
    def _verdict(out, refs) -> str:
        outs = numerics.as_list(out)
        for o, r in zip(outs, refs, strict=True):
            dn = str(o.dtype).removeprefix("torch.")
            v = numerics.compare(o, r, numerics.DEFAULT_TOLERANCES[dn], out_dtype=dn)
            if not v.ok:
                return v.reason
        return ""

    def _final(self, target, ref, wname, args, init, dt, seed_mod, best_mod, best_key,
               night_mod=None):
        impls = {"eager": ref.Model, "seed": seed_mod.ModelNew, "best": best_mod.ModelNew}
        if night_mod is not None:
            impls["night"] = night_mod.ModelNew
        impls.update(self._rivals(target))
        fns, valid = {}, {}
        for dist, seed in (("offset" if target != "gemm" else "uniform", 7), ("wide", 8)):
            inputs, params, refs = self._case(ref, args, init, dt, dist, seed)
            for name, cls in list(impls.items()):
                try:
                    model = self._model(cls, init, params)
                    with torch.no_grad():
                        out = model(*inputs)
                    torch.cuda.synchronize()
                except Exception as exc:  # noqa: BLE001 - a rival that fails is a row's reason
                    if not name.startswith("rival:"):
                        raise
                    self.unavailable.setdefault(target, {})[name.removeprefix("rival:")] = (
                        f"failed on {wname}: {type(exc).__name__}: {str(exc)[:300]}")
                    del impls[name]
                    continue
                valid.setdefault(name, "")
                valid[name] = valid[name] or self._verdict(out, refs)
            del refs
        inputs, params, _ = self._case(ref, args, init, dt, "normal", 9)
        for name, cls in impls.items():
            model = self._model(cls, init, params)
            fns[name] = (lambda m=model, i=inputs: m(*i))
        t0 = time.perf_counter()
        if not self.quick:
            compiled = torch.compile(self._model(ref.Model, init, params))
            with torch.no_grad():
                out = compiled(*inputs)
            refs = self._case(ref, args, init, dt, "normal", 9)[2]
            valid["compile"] = self._verdict(out, refs)
            del refs
            fns["compile"] = lambda c=compiled, i=inputs: c(*i)
        compile_s = time.perf_counter() - t0
        with torch.no_grad():
            samples = timing.time_interleaved(fns, reps=self.reps, flusher=self.flusher)
            out = fns["best"]()
        nbytes = timing.tensor_bytes(inputs) + timing.tensor_bytes(out) + sum(
            timing.tensor_bytes(p) for p in params.values())
        for name, s in samples.items():
            row = {"target": target, "workload": wname, "impl": name,
                   "program": best_key if name == "best" else name,
                   "production": name.startswith("rival:"),
                   "valid": not valid[name], "reason": valid[name],
                   "bytes": nbytes, **timing.summary(s, nbytes, self.copy_gbs)}
            if target == "gemm":
                flops = 2 * args["m"] * args["n"] * args["k"]
                row["tflops"] = flops / (row["ms"] * 1e-3) / 1e12
            if name == "compile":
                row["compile_s"] = compile_s
            why = timing.implausible(s, nbytes, self.copy_gbs)
            row["implausible"] = why or ""
            self.rows.append(row)
            extra = f" {row['tflops']:.0f} TFLOP/s" if "tflops" in row else ""
            print(f"{target:14s} {wname:20s} {name:8s} {row['ms']:8.4f} ms "
                  f"{row['frac_copy_bw']:5.2f} of copy bw{extra} "
                  f"{'' if row['valid'] else 'INVALID ' + row['reason'][:80]}", flush=True)


    def _rivals(self, target: str) -> dict:
        """The production rivals that run here, by row name; the others' reasons kept."""
        out = {}
        why = self.unavailable.setdefault(target, {})
        for rival in rival_kernels.rivals_for(target):
            reason = rival_kernels.unavailable(rival, "cuda")
            if reason:
                why[rival.name] = reason
            else:
                out[f"rival:{rival.name}"] = rival_kernels.rival_class(target, rival.name)
        for (t, lib), reason in rival_kernels.NOT_OFFERED.items():
            if t == target:
                why[lib] = reason
        return out


def prepare(out: Path, targets: list[str], night: Path | None) -> None:
    """Without a GPU: every program the run would time imports (seed, night), every rival
    class is built, and the rivals that could not run are listed with their reason."""
    plan: dict[str, dict] = {}
    for target in targets:
        tdir = ROOT / "targets" / "kernels" / target
        ref = load_module(tdir / "reference.py", f"ref_{target}")
        progs = {"seed": tdir / "kernel.py"}
        if night is not None and (night / f"{target}.py").is_file():
            progs["night"] = night / f"{target}.py"
        for name, path in progs.items():
            if not hasattr(load_module(path, f"prep_{target}_{name}"), "ModelNew"):
                raise SystemExit(f"{path}: no ModelNew")
        init = ref.get_init_inputs()
        classes = {f"rival:{r.name}": rival_kernels.rival_class(target, r.name)(*init)
                   for r in rival_kernels.rivals_for(target)}
        plan[target] = {"programs": sorted(progs), "rival_rows": sorted(classes),
                        "rivals": rival_kernels.table("cuda")[target],
                        "workloads": [w[0] for w in WORKLOADS[target]]}
        print(f"{target}: {sorted(progs)} and {sorted(classes) or 'no rivals'}", flush=True)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"prepare": True, "device": "cpu", "targets": plan,
                               "rivals_unavailable": {t: {k: v for k, v in p["rivals"].items()
                                                          if v} for t, p in plan.items()},
                               "rows": []}, indent=1))


def evaluator_check(target: str) -> None:
    """The engine's own path on this GPU: static check, sandboxed correctness, timing."""
    from evaluators._base import EvalContext
    from evaluators.kernels import KernelEvaluator
    from optimizer.sandbox import Sandbox, SandboxSettings
    from optimizer.targets import load_target

    spec = load_target(ROOT / "targets" / "kernels" / target, ROOT)
    with tempfile.TemporaryDirectory() as d:
        # the engine's settings for GPU kinds (optimizer/evaluation.py make_sandbox): no RLIMIT_AS
        # (a CUDA context reserves terabytes of address space), GPU device nodes allowed, a
        # warm zygote that imported torch and triton without creating a CUDA context
        rw = Path(d) / "rw"
        (rw / "io").mkdir(parents=True)
        cand = rw / "cand"
        shutil.copytree(spec.path, cand)
        settings = SandboxSettings(memory_mb=0, timeout_s=300, allow_gpu=True, rw_root=rw,
                                   preload=("torch", "triton"), extra_ro=(spec.path,))
        with Sandbox(settings) as sandbox:
            ctx = EvalContext(sandbox, seed=int(time.time()), scratch=Path(d) / "scratch",
                              io_dir=rw / "io", device="cuda", timeout_s=300)
            ctx.scratch.mkdir()
            t0 = time.perf_counter()
            res = KernelEvaluator(spec).evaluate(cand, ctx)
            print(f"sandbox isolation on this machine: {sandbox.isolation}", flush=True)
    ms = {k: round(v, 4) for k, v in res.metrics.items() if k.startswith(("ms/", "frac", "time"))}
    print(f"evaluator {target}: {res.state.value} {res.stage} {res.reason[:300]} {ms} "
          f"({time.perf_counter() - t0:.1f} s)", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / "bench/results/kernels-h200.json")
    ap.add_argument("--targets", default=",".join(WORKLOADS))
    ap.add_argument("--reps", type=int, default=100)
    ap.add_argument("--search-reps", type=int, default=25)
    ap.add_argument("--grid-max", type=int, default=MAX_GRID)
    ap.add_argument("--night", type=Path, default=None,
                    help="folder of <target>.py programs a GPU night kept (timed as 'night')")
    ap.add_argument("--variants", default="",
                    help="search only these variants/ (file stems, comma-separated)")
    ap.add_argument("--night-workloads", action="store_true",
                    help="time the workloads of each target.toml (a night's objective)")
    ap.add_argument("--evaluator", default="",
                    help="also run the sandboxed KernelEvaluator on these targets' seeds")
    ap.add_argument("--quick", action="store_true",
                    help="no search and no torch.compile: seed, night, eager and the rivals")
    ap.add_argument("--prepare", action="store_true",
                    help="no GPU needed: import every program and rival, write the plan")
    args = ap.parse_args()
    if args.prepare:
        prepare(args.out, args.targets.split(","), args.night)
        return
    if not torch.cuda.is_available():
        sys.exit("needs a CUDA GPU")
    for target in filter(None, args.evaluator.split(",")):
        evaluator_check(target)
    bench = Bench(args.out, args.reps, args.search_reps, args.grid_max, args.night,
                  args.variants, args.night_workloads, args.quick)
    for target in args.targets.split(","):
        bench.run_target(target)
        bench.write()


if __name__ == "__main__":
    main()
