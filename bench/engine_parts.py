"""Per-candidate cost of the engine's git and MLflow bookkeeping (no evaluation).

Builds a throw-away repository (``--files`` tracked files besides one target folder) and a
fresh sqlite MLflow store, then runs the per-candidate sequence the loop runs::

    create_worktree -> commit_candidate -> diff -> log_candidate -> annotate -> remove_worktree

and prints, per step, the median and 90th percentile of the wall time and the median CPU
time (this process plus its git children) in milliseconds. Usage::

    .venv/bin/python bench/engine_parts.py --candidates 30 --files 2000
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from optimizer.records import Candidate, CandidateState, EvalResult, content_hash
from optimizer.tracking import Tracker
from optimizer.vcs import Workspace

TARGET_REL = "targets/function/topk"


def _cpu_s() -> float:
    """CPU seconds of this process and its finished children (the git commands).

    Wall time on a shared machine includes waiting for other processes; CPU time does not.
    """
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def make_repo(root: Path, n_files: int) -> None:
    root.mkdir()
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    for i in range(n_files):
        f = root / "src" / f"pkg{i // 100}" / f"mod{i}.py"
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(f"VALUE = {i}\n" * 20)
    (root / TARGET_REL).mkdir(parents=True)
    (root / TARGET_REL / "program.py").write_text("K = 8  # knob: int 1..64\n" * 40)
    (root / TARGET_REL / "target.toml").write_text('name = "topk"\n')
    subprocess.run(["git", "-C", str(root), "add", "-A"], check=True)
    ident = ["-c", "user.name=bench", "-c", "user.email=bench@localhost"]
    subprocess.run(["git", "-C", str(root), *ident, "commit", "-qm", "seed"], check=True)


def run(n_candidates: int, n_files: int) -> dict[str, dict[str, float]]:
    times: dict[str, list[float]] = defaultdict(list)
    cpu: dict[str, list[float]] = defaultdict(list)

    def timed(step: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        t0, c0 = time.perf_counter(), _cpu_s()
        out = fn(*args, **kwargs)
        times[step].append(1e3 * (time.perf_counter() - t0))
        cpu[step].append(1e3 * (_cpu_s() - c0))
        return out

    with tempfile.TemporaryDirectory() as tmp:
        repo = Path(tmp) / "repo"
        make_repo(repo, n_files)
        state = repo / ".optimizer"
        ws = Workspace(repo, experiment="bench", state_dir=state)
        tracker = Tracker.local(state, "bench")
        night = tracker.start_night("bench-night", {"candidates": n_candidates}, {})
        for n in range(1, n_candidates + 1):
            cid = ws.cid(n)
            files = {"program.py": f"K = {n}  # knob: int 1..64\n" * 40}
            cand = Candidate(
                id=cid,
                target="topk",
                parent_id=None,
                proposer="offline",
                files=files,
                knobs={"K": n},
                content_hash=content_hash(files),
            )
            result = EvalResult(
                state=CandidateState.VALID if n % 3 else CandidateState.INVALID,
                reason="" if n % 3 else "max relative error 3e-2 > 1e-3",
                metrics={"time_s": 1e-3 * n, "speedup": 1.0 + n / 100},
                objectives=(1e-3 * n,),
                cost_s=1.5,
            )

            timed("create_worktree", ws.create_worktree, TARGET_REL, "topk", cid, files)
            sha = timed("commit_candidate", ws.commit_candidate, "topk", cid, f"{cid} RUNNING")
            diff = timed("diff", ws.diff, "topk", cid)
            timed(
                "log_candidate",
                tracker.log_candidate,
                parent_run_id=night,
                candidate=cand,
                result=result,
                branch=ws.candidate_branch("topk", cid),
                commit=sha,
                trial_number=n - 1,
                diff=diff,
                prompt="p" * 4000,
                response="r" * 2000,
                eval_log="log line\n" * 50,
            )
            timed("annotate", ws.annotate, "topk", cid, f"{cid} {result.state.value}")
            timed("remove_worktree", ws.remove_worktree, "topk", cid)
        ws.close()
    git_steps = ("create_worktree", "commit_candidate", "diff", "annotate", "remove_worktree")
    for table in (times, cpu):
        table["git_total"] = [sum(table[s][i] for s in git_steps) for i in range(n_candidates)]
    return {
        step: {
            "median_ms": round(statistics.median(v), 1),
            "p90_ms": round(sorted(v)[int(0.9 * (len(v) - 1))], 1),
            "cpu_median_ms": round(statistics.median(cpu[step]), 1),
        }
        for step, v in times.items()
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--candidates", type=int, default=30)
    parser.add_argument("--files", type=int, default=2000, help="tracked files besides the target")
    args = parser.parse_args()
    print(json.dumps(run(args.candidates, args.files), indent=2))


if __name__ == "__main__":
    main()
