"""The toy target the engine's tests and benchmarks run on: a ``function`` kind whose
program has two knobs and a cost to minimise, in a throwaway git repository with an
experiment file (``make_toy_repo``), copies of it as further targets (``add_toy_target``)
and evaluators of a fixed cost (``SLOW_EVALUATE``, ``NOTING_EVALUATE``)."""

from __future__ import annotations

import shutil
import subprocess
import textwrap
from pathlib import Path

TOY_TARGET = """
name = "toy"
kind = "function"
description = "A toy cost function with two knobs and an operator to mutate."
editable = ["program.py"]
objectives = [{ metric = "cost", direction = "minimize" }]
noise = "deterministic"
min_gain = 0.05
timeout_s = 30
"""

TOY_PROGRAM = '''
"""Toy program: cost is lowest at X = 7, Y = 0.3."""

# EVOLVE-BLOCK-START
X = 1  # knob: int 0..20
Y = 0.9  # knob: float 0.0..1.0


def cost():
    return abs(X - 7) + 10 * abs(Y - 0.3) + 1.0
# EVOLVE-BLOCK-END
'''

TOY_EVALUATE = """
import importlib.util
import uuid


def _load(path):
    spec = importlib.util.spec_from_file_location(f"_c{uuid.uuid4().hex}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def validate(path):
    value = _load(path).cost()
    assert isinstance(value, (int, float)) and value >= 0, f"cost must be >= 0, got {value!r}"


def evaluate(path):
    mod = _load(path)
    return {"cost": float(mod.cost()), "x": float(mod.X)}


def evaluate_held_out(path):
    return {"cost": float(_load(path).cost()) + 0.5}
"""


# the toy's evaluate.py with an evaluation of a fixed cost: it sleeps TOY_EVAL_S and, when
# TOY_EVAL_LOG names a file, appends when it ran (the concurrency tests and bench/throughput)
SLOW_EVALUATE = TOY_EVALUATE.split("def evaluate_held_out")[0].replace(
    "import importlib.util\n", "import importlib.util\nimport json\nimport os\nimport time\n", 1
).replace(
    """    mod = _load(path)
    return {"cost": float(mod.cost()), "x": float(mod.X)}""",
    """    start = time.monotonic()
    value = float(_load(path).cost())
    time.sleep(float(os.environ.get("TOY_EVAL_S", "0.4")))
    if os.environ.get("TOY_EVAL_LOG"):
        with open(os.environ["TOY_EVAL_LOG"], "a") as fh:
            fh.write(json.dumps([start, time.monotonic()]) + "\\n")
    return {"cost": value}""")


# the slow evaluate.py that also notes, as each evaluation begins, which program it is of
# (the candidate's file, which the stand-in names, and its text's hash) in TOY_EVAL_PROGRAMS
_TIMED = "    value = float(_load(path).cost())\n"
assert _TIMED in SLOW_EVALUATE
NOTING_EVALUATE = SLOW_EVALUATE.replace(
    _TIMED, "    mod = _load(path)\n    _note(mod)\n    value = float(mod.cost())\n"
) + '''

def _note(mod):
    if os.environ.get("TOY_EVAL_PROGRAMS"):
        import hashlib

        path = mod.__candidate_file__
        with open(path, "rb") as fh:
            digest = hashlib.sha256(fh.read()).hexdigest()
        with open(os.environ["TOY_EVAL_PROGRAMS"], "a") as fh:
            fh.write(json.dumps([path, digest]) + "\\n")
'''


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args], check=True, capture_output=True, text=True
    ).stdout


def write_experiment(repo: Path, name: str = "toy", body: str = "") -> Path:
    exp = repo / "experiments" / f"{name}.toml"
    exp.parent.mkdir(exist_ok=True)
    exp.write_text(
        textwrap.dedent(f'''
        name = "{name}"
        seed = 1
        [budget]
        minutes = 3
        max_candidates = 10
        [search]
        n_startup_trials = 4
        [[targets]]
        path = "targets/function/toy"
    ''')
        + body
    )
    return exp


def make_toy_repo(repo: Path, evaluate: str = TOY_EVALUATE) -> Path:
    """A git repository at ``repo`` with one committed toy target (its evaluate.py
    ``evaluate``) and an experiment file (the benchmarks build theirs with it too)."""
    target = repo / "targets" / "function" / "toy"
    target.mkdir(parents=True)
    (target / "target.toml").write_text(TOY_TARGET)
    (target / "program.py").write_text(TOY_PROGRAM)
    (target / "evaluate.py").write_text(evaluate)
    write_experiment(repo)
    (repo / ".gitignore").write_text(".optimizer*/\n")
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True)
    git(repo, "add", "-A")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "init")
    return repo


def add_toy_target(repo: Path, name: str, evaluate: str | None = None,
                   kind: str = "function") -> Path:
    """A copy of the toy target named ``name`` (its own ``evaluate.py`` and ``kind`` if
    given), committed, for nights of several targets; returns its folder."""
    src, dst = repo / "targets" / "function" / "toy", repo / "targets" / "function" / name
    shutil.copytree(src, dst)
    (dst / "target.toml").write_text(TOY_TARGET.replace('name = "toy"', f'name = "{name}"')
                                     .replace('kind = "function"', f'kind = "{kind}"'))
    if evaluate is not None:
        (dst / "evaluate.py").write_text(evaluate)
    git(repo, "add", "-A")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", f"target {name}")
    return dst
