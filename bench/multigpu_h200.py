"""A night on one host with several GPUs, and workers sharing one:

    source bench/gpu_env.sh   # on a machine without a package index (py=python3 first)
    python bench/multigpu_h200.py --out OUTDIR [--minutes 8] [--per-gpu 4] [--gpus N]
        [--experiment experiments/kernels.toml] [--parts nights,workers]

Run from the root of a git checkout (gpu_env.sh makes one of a bare copy).

1. ``nights``: the experiment's night twice, from empty stores, for the same minutes: on
   one GPU (``CUDA_VISIBLE_DEVICES=0``, ``--per-gpu`` slots) and on all ``--gpus``
   (``--per-gpu`` slots on each, ``optimizer.slots`` puts them round the GPUs), each under
   a name of its own (``<name>-1gpu``, ``<name>-<N>gpu``) so neither sees the other's
   candidates.
2. ``workers``: one ``optimizer worker`` per GPU (``CUDA_VISIBLE_DEVICES=i``, ``--per-gpu``
   slots, each in its own clone of a bare git remote made here), sharing one Optuna
   storage (a PostgreSQL cluster started here where its server programs are installed,
   else one sqlite file: workers on this machine only) and an MLflow tracking server.
   Once a worker has claimed ``--kill-after`` candidates and holds one with a program it
   is frozen (SIGSTOP), what it holds is read, and it is SIGKILLed; the others finish the
   night.
3. ``OUTDIR/multigpu.json``: for each night its candidates, candidates per minute, states
   and pull branches, and the ratio of the two nights; for the workers the candidates
   each claimed, the lost candidates and their re-runs (each must run once, on another
   worker), programs evaluated twice, candidate ids unique, one pull branch per winner,
   and whether ``optimizer status`` finds Optuna, MLflow and the remote agreeing. A short
   table is printed last.

On a machine without a GPU (``--gpus 2`` forced, for a dry run with a ``function``
experiment) the same steps run; ``CUDA_VISIBLE_DEVICES`` then changes nothing.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import tomllib
from datetime import date
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import optuna  # noqa: E402
from optuna.trial import TrialState  # noqa: E402

from optimizer.claims import Claims  # noqa: E402
from optimizer.config import load_experiment  # noqa: E402
from optimizer.records import WORKER_LOST  # noqa: E402
from optimizer.status import collect_status  # noqa: E402
from optimizer.testing import servers  # noqa: E402
from optimizer.testing.workers import freeze_a_holder  # noqa: E402
from optimizer.worker import workers_study  # noqa: E402

CLI = ["-c", "import sys; from optimizer.cli import main; sys.exit(main())"]


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True,
                          text=True).stdout


def _env(gpus: str | None) -> dict[str, str]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT),
                                                       os.environ.get("PYTHONPATH")]))}
    if gpus is not None:
        env["CUDA_VISIBLE_DEVICES"] = gpus
    return env


def _experiment_name(experiment: Path) -> str:
    data = tomllib.loads(experiment.read_text())
    return str(data.get("name", experiment.stem))


def _pull_branches(repo: Path, name: str) -> list[str]:
    return _git(repo, "for-each-ref", "--format=%(refname:short)",
                f"refs/heads/optimizer/pr/{name}/").split()


def _states(storage: str, name: str, targets: list[str]) -> dict[str, Any]:
    """Per target: candidates, their states, candidates per worker (claims)."""
    out: dict[str, Any] = {}
    store = optuna.storages.RDBStorage(storage)
    for target in targets:
        try:
            study = optuna.load_study(study_name=f"{name}/{target}", storage=store)
        except KeyError:
            continue
        cands = [t for t in study.get_trials(deepcopy=False) if t.user_attrs.get("candidate")]
        out[target] = {"candidates": len(cands),
                       "states": dict(collections.Counter(t.user_attrs.get("state", "?")
                                                          for t in cands)),
                       "winner": study.user_attrs.get("winner")}
    return out


# -- 1. the nights ---------------------------------------------------------------------------


def night(repo: Path, experiment: Path, name: str, minutes: float, slots: int,
          gpus: str | None, out: Path, extra: list[str]) -> dict[str, Any]:
    """One `optimizer run` of ``experiment`` under ``name``, from empty stores of its own
    (``.optimizer-<name>/``; an earlier try's, and its branches, are removed first)."""
    sets = [*extra, f'name="{name}"', f'state_dir=".optimizer-{name}"']
    cfg = load_experiment(repo / experiment, sets, workspace=repo)
    if cfg.state_dir.exists():
        shutil.rmtree(cfg.state_dir)
    for ref in _git(repo, "for-each-ref", "--format=%(refname)",
                    f"refs/heads/optimizer/{name}/", f"refs/heads/optimizer/pr/{name}/").split():
        _git(repo, "update-ref", "-d", ref)
    log = out / f"night-{name}.log"
    started = time.monotonic()
    with log.open("w") as fh:
        code = subprocess.run(
            [sys.executable, *CLI, "run", str(experiment), "--minutes", str(minutes),
             "--slots", str(slots), *[a for s in sets for a in ("--set", s)]],
            cwd=repo, env=_env(gpus), stdout=fh, stderr=subprocess.STDOUT).returncode
    took = time.monotonic() - started
    targets = _states(cfg.optuna_storage, name, [e.spec.name for e in cfg.targets])
    n = sum(t["candidates"] for t in targets.values())
    failed = sum(t["states"].get("FAILED", 0) for t in targets.values())
    return {"name": name, "exit": code, "slots": slots, "gpus": gpus, "minutes": minutes,
            "wall_s": round(took, 1), "candidates": n,
            "candidates_per_min": round(n / (took / 60), 2) if took else 0.0,
            "failed": failed, "pull_branches": _pull_branches(repo, name),
            "targets": targets, "log_tail": log.read_text()[-1500:]}


# -- 2. the workers --------------------------------------------------------------------------


def _kill_one(url: str, name: str, targets: list[str],
              procs: dict[int, subprocess.Popen[bytes]], after: int,
              ) -> dict[str, Any] | None:
    """Freeze, read and SIGKILL the first worker (of ``procs``) that has claimed ``after``
    candidates and holds one with a program; None if none did before they all ended."""
    storage = optuna.storages.RDBStorage(url)
    claims = Claims(storage)
    pids = set(procs)
    while any(p.poll() is None for p in procs.values()):
        time.sleep(0.1)
        try:
            wsid = storage.get_study_id_from_name(workers_study(name))
            sids = [storage.get_study_id_from_name(f"{name}/{t}") for t in targets]
        except KeyError:
            continue
        workers = {key.split(":", 1)[1]: rec
                   for key, rec in claims.prefixed(wsid, "worker:").items()
                   if rec.get("pid") in pids and rec.get("candidates", 0) >= after}
        frozen = freeze_a_holder(storage, claims, sids, workers)
        if frozen is None:
            continue
        wid, held = frozen
        rec = workers[wid]
        os.killpg(rec["pid"], signal.SIGKILL)
        names = {sid: t for sid, t in zip(sids, targets, strict=True)}
        return {"worker": wid, "pid": rec["pid"], "after_candidates": rec["candidates"],
                "held": [f"{names[sid]} trial {n}" for sid, n in held]}
    return None


def _check_workers(url: str, tracking: str, remote: Path, clone: Path, experiment: Path,
                   sets: list[str], targets: list[str], killed: dict[str, Any] | None,
                   ) -> dict[str, Any]:
    """What the stores say after the night: see the module's docstring, part 3."""
    name = sets[-1].split("=", 1)[1].strip('"')
    storage = optuna.storages.RDBStorage(url)
    claims = Claims(storage)
    per_target: dict[str, Any] = {}
    problems: list[str] = []
    by_worker: collections.Counter[str] = collections.Counter()
    for target in targets:
        try:
            study = optuna.load_study(study_name=f"{name}/{target}", storage=storage)
        except KeyError:
            continue
        trials = study.get_trials(deepcopy=False)
        cands = [t for t in trials if t.user_attrs.get("candidate")]
        payloads = claims.read(study._study_id, [f"trial:{t.number}" for t in cands])
        worker_of = {t.number: (payloads.get(f"trial:{t.number}") or {}).get("worker")
                     for t in cands}
        by_worker.update(w for w in worker_of.values() if w)
        ids = [t.user_attrs["candidate"] for t in cands]
        if len(ids) != len(set(ids)):
            problems.append(f"{target}: a candidate id twice")
        if any(t.state == TrialState.RUNNING for t in trials):
            problems.append(f"{target}: trials left RUNNING")
        lost = [t for t in cands if t.user_attrs.get("reason") == WORKER_LOST]
        reruns = {}
        for t in lost:
            cid = t.user_attrs["candidate"]
            again = [r for r in cands
                     if r.user_attrs.get("summary", "").startswith(f"re-run of {cid} ")]
            reruns[cid] = [r.user_attrs["candidate"] for r in again]
            if len(again) != 1:
                problems.append(f"{target}: {cid} re-run {len(again)} times")
            elif worker_of[again[0].number] == worker_of[t.number]:
                problems.append(f"{target}: {cid} re-run by the worker that lost it")
        lost_hashes = {t.user_attrs.get("content_hash") for t in lost}
        hashes = collections.Counter(t.user_attrs.get("content_hash") for t in cands
                                     if t.user_attrs.get("content_hash"))
        twice = [h for h, n in hashes.items() if n > 1 and h not in lost_hashes]
        if twice:
            problems.append(f"{target}: {len(twice)} program(s) evaluated twice")
        winners = claims.prefixed(study._study_id, "winners:")
        if len(winners) > 1:
            problems.append(f"{target}: winners selected {len(winners)} times")
        per_target[target] = {
            "candidates": len(cands),
            "states": dict(collections.Counter(t.user_attrs.get("state", "?") for t in cands)),
            "lost": [t.user_attrs["candidate"] for t in lost],
            "lost_trials": [t.number for t in lost], "reruns": reruns,
            "winner_selected_by": [v.get("by") for v in winners.values()],
            "winner": study.user_attrs.get("winner")}
    for held in (killed or {}).get("held", []):  # "<target> trial <number>"
        target, number = held.split(" trial ")
        if int(number) not in per_target.get(target, {}).get("lost_trials", []):
            problems.append(f"{held}, held by the killed worker, is not recorded lost")
    cfg = load_experiment(clone / experiment, [
        *sets, f'search.storage="{url}"', f'tracking.uri="{tracking}"', 'vcs.push="origin"'],
        workspace=clone)
    status = collect_status(cfg)
    if not status["consistent"]:
        problems.append("optimizer status: the stores disagree")
    pulls = _git(remote, "for-each-ref", "--format=%(refname:short)",
                 f"refs/heads/optimizer/pr/{name}/").split()
    with_winner = [t for t, d in per_target.items() if d["winner"]]
    if len(pulls) != len(with_winner):
        problems.append(f"{len(pulls)} pull branches for {len(with_winner)} winners")
    return {"targets": per_target, "candidates_by_worker": dict(by_worker),
            "consistent": bool(status["consistent"]), "pull_branches": pulls,
            "workers": [{k: w.get(k) for k in ("worker", "pid", "alive", "phase",
                                               "candidates")} for w in status["workers"]],
            "problems": problems, "ok": not problems}


def workers(repo: Path, experiment: Path, name: str, minutes: float, slots: int, n: int,
            kill_after: int, use_gpus: bool, out: Path, extra: list[str]) -> dict[str, Any]:
    """``n`` workers share a night; one is killed mid-candidate (see the docstring)."""
    sets = [*extra, f'name="{name}"']
    cfg = load_experiment(repo / experiment, sets, workspace=repo)
    targets = [e.spec.name for e in cfg.targets]
    tmp = Path(tempfile.mkdtemp(prefix="optimizer-workers-"))
    result: dict[str, Any] = {"name": name, "workers": n, "slots_each": slots,
                              "minutes": minutes}
    with contextlib.ExitStack() as stack:
        try:
            url = stack.enter_context(servers.postgres_cluster("optuna"))
            result["storage"] = "postgresql (a cluster started on this machine)"
        except servers.Unavailable as exc:
            url = f"sqlite:///{tmp / 'optuna.db'}"
            result["storage"] = f"sqlite (one file: workers on this machine; {exc})"
        tracking = stack.enter_context(servers.mlflow_server(tmp / "mlflow"))
        result["tracking"] = "mlflow server (sqlite store)"
        remote = tmp / "remote.git"
        subprocess.run(["git", "clone", "-q", "--bare", str(repo), str(remote)], check=True)
        procs: dict[int, subprocess.Popen[bytes]] = {}
        logs = []
        started = time.monotonic()
        for i in range(n):
            clone = tmp / f"worker{i}"
            subprocess.run(["git", "clone", "-q", str(remote), str(clone)], check=True)
            logs.append(out / f"worker{i}.log")
            proc = subprocess.Popen(
                [sys.executable, *CLI, "worker", str(experiment), "--storage", url,
                 "--tracking-uri", tracking, "--remote", "origin", "--minutes", str(minutes),
                 "--slots", str(slots), *[a for s in sets for a in ("--set", s)]],
                cwd=clone, env=_env(str(i) if use_gpus else None),
                stdout=logs[-1].open("w"), stderr=subprocess.STDOUT, start_new_session=True)
            procs[proc.pid] = proc
            stack.callback(servers.stop_group, proc)
        killed = _kill_one(url, name, targets, procs, kill_after)
        result["killed"] = killed
        codes = {}
        for pid, proc in procs.items():
            codes[pid] = proc.wait(timeout=minutes * 60 + 600)
        result["wall_s"] = round(time.monotonic() - started, 1)
        result["exit"] = {str(pid): code for pid, code in codes.items()}
        result.update(_check_workers(url, tracking, remote, tmp / "worker0", experiment,
                                     sets, targets, killed))
        total = sum(t["candidates"] for t in result["targets"].values())
        result["candidates"] = total
        result["candidates_per_min"] = round(total / (result["wall_s"] / 60), 2)
        if killed is None:
            result["problems"].append("no worker was killed (none got far enough)")
            result["ok"] = False
        if any(code != 0 for pid, code in codes.items() if not killed or pid != killed["pid"]):
            result["problems"].append("a worker that was not killed failed")
            result["ok"] = False
    shutil.rmtree(tmp, ignore_errors=True)
    return result


# -- the run ---------------------------------------------------------------------------------


def _gpu_count() -> int:
    try:
        import torch

        return int(torch.cuda.device_count())
    except Exception:  # noqa: BLE001 - no torch, or no driver: no GPU
        return 0


def _device() -> str:
    try:
        import torch

        if torch.cuda.is_available():
            return f"{torch.cuda.device_count()} x {torch.cuda.get_device_name(0)}"
    except Exception:  # noqa: BLE001
        pass
    return f"no GPU ({platform.processor() or platform.machine()}, {os.cpu_count()} cores)"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--repo", type=Path, default=Path.cwd(),
                    help="the git checkout whose experiment runs (default: here)")
    ap.add_argument("--experiment", type=Path, default=Path("experiments/kernels.toml"))
    ap.add_argument("--minutes", type=float, default=8.0)
    ap.add_argument("--per-gpu", type=int, default=4, help="slots on each GPU")
    ap.add_argument("--gpus", type=int, default=0, help="GPUs to use (default: all)")
    ap.add_argument("--kill-after", type=int, default=8,
                    help="a worker is killed once it has claimed this many candidates")
    ap.add_argument("--parts", default="nights,workers")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="an experiment setting for every night and worker (repeatable)")
    args = ap.parse_args()
    found = _gpu_count()
    n = args.gpus or found
    if n < 2:
        raise SystemExit(f"{found} GPU(s) here: this run needs two or more (--gpus N forces "
                         "a dry run without them)")
    use_gpus = found >= n
    args.out = args.out.resolve()
    args.out.mkdir(parents=True, exist_ok=True)
    repo = args.repo.resolve()
    base = _experiment_name(repo / args.experiment)
    parts = set(args.parts.split(","))
    data: dict[str, Any] = {
        "device": _device(), "date": date.today().isoformat(),
        "experiment": str(args.experiment), "minutes": args.minutes, "gpus": n,
        "slots_per_gpu": args.per_gpu,
        "command": "python bench/multigpu_h200.py " + " ".join(sys.argv[1:])}
    if "nights" in parts:
        one = night(repo, args.experiment, f"{base}-1gpu", args.minutes, args.per_gpu,
                    "0" if use_gpus else None, args.out, args.set)
        every = night(repo, args.experiment, f"{base}-{n}gpu", args.minutes, args.per_gpu * n,
                      ",".join(map(str, range(n))) if use_gpus else None, args.out, args.set)
        data["nights"] = {"one_gpu": one, "all_gpus": every,
                          "throughput_ratio": round(every["candidates_per_min"]
                                                    / max(one["candidates_per_min"], 1e-9), 3)}
    if "workers" in parts:
        data["workers"] = workers(repo, args.experiment, f"{base}-workers", args.minutes,
                                  args.per_gpu, n, args.kill_after, use_gpus, args.out,
                                  args.set)
    (args.out / "multigpu.json").write_text(json.dumps(data, indent=1, default=str))
    print(f"{'run':<22}{'slots':>6}{'cands':>7}{'per min':>9}{'failed':>8}  pull branches")
    for key, rec in data.get("nights", {}).items():
        if isinstance(rec, dict):
            print(f"{key:<22}{rec['slots']:>6}{rec['candidates']:>7}"
                  f"{rec['candidates_per_min']:>9.1f}{rec['failed']:>8}  "
                  f"{len(rec['pull_branches'])}")
    if "nights" in data:
        print(f"throughput ratio (all GPUs / one): {data['nights']['throughput_ratio']:.2f}")
    if "workers" in data:
        w = data["workers"]
        print(f"{'workers x' + str(w['workers']):<22}{w['slots_each']:>6}{w['candidates']:>7}"
              f"{w['candidates_per_min']:>9.1f}{'':>8}  {len(w['pull_branches'])}")
        print(f"killed: {w['killed']}; stores agree: {w['consistent']}; "
              f"problems: {w['problems'] or 'none'}")


if __name__ == "__main__":
    main()
