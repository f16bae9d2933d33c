"""Fixtures shared by the engine tests: a throwaway git workspace with a tiny target."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

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


@pytest.fixture
def slow_evaluate() -> str:
    return SLOW_EVALUATE


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


@pytest.fixture
def noting_evaluate() -> str:
    return NOTING_EVALUATE



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


@pytest.fixture
def toy_target_adder():
    """The ``add_toy_target`` helper, as a fixture."""
    return add_toy_target


@pytest.fixture
def toy_repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A git repository with one committed toy target and an experiment file."""
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    return make_toy_repo(tmp_path / "repo")


@pytest.fixture
def experiment_writer():
    """The ``write_experiment`` helper, as a fixture (test modules cannot import conftest)."""
    return write_experiment


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_healthy(base: str, proc: subprocess.Popen, what: str, timeout_s: float = 90) -> None:
    import time
    import urllib.request

    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with urllib.request.urlopen(f"{base}/health", timeout=2) as resp:
                if resp.status == 200:
                    return
        except OSError:
            pass
        assert proc.poll() is None, f"{what} exited"
        assert time.monotonic() < deadline, f"{what} did not come up within {timeout_s:.0f} s"
        time.sleep(0.5)


@pytest.fixture
def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    return _free_port()


@pytest.fixture
def wait_healthy():
    """``wait_healthy(base_url, process, what)``: poll ``/health`` until it answers 200."""
    return _wait_healthy


def _pg_bin() -> Path | None:
    found = shutil.which("initdb")
    if found:
        return Path(found).parent
    for root in sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True):
        if (root / "initdb").exists():
            return root
    return None


@pytest.fixture(scope="module")
def postgres_url() -> Iterator[str]:
    if os.environ.get("OPTIMIZER_TEST_POSTGRES_URL"):
        yield os.environ["OPTIMIZER_TEST_POSTGRES_URL"]
        return
    pytest.importorskip("psycopg2", reason="psycopg2 is needed for PostgreSQL storage")
    bindir = _pg_bin()
    if bindir is None:
        pytest.skip("no PostgreSQL server binaries here (apt-get install postgresql)")
    # pytest's temp root is private to root; the server runs as `postgres`
    parent = Path(tempfile.mkdtemp(prefix="optimizer-pg-"))
    data = parent / "data"
    as_root = os.geteuid() == 0
    if as_root:
        import pwd

        os.chown(parent, pwd.getpwnam("postgres").pw_uid, -1)

    def sh(*cmd: str) -> None:
        full = ["su", "postgres", "-c", " ".join(cmd)] if as_root else list(cmd)
        subprocess.run(full, check=True, capture_output=True, timeout=120)

    port = _free_port()
    sh(str(bindir / "initdb"), "-D", str(data), "-A", "trust", "-U", "postgres")
    sh(
        str(bindir / "pg_ctl"),
        "-D",
        str(data),
        "-w",
        "-l",
        str(data.parent / "log"),
        "-o",
        f"'-p {port} -k {data.parent} -c listen_addresses=127.0.0.1'",
        "start",
    )
    try:
        deadline = time.monotonic() + 30
        import psycopg2

        while True:
            try:
                conn = psycopg2.connect(
                    host="127.0.0.1", port=port, user="postgres", dbname="postgres"
                )
                break
            except psycopg2.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.3)
        conn.autocommit = True
        conn.cursor().execute("CREATE DATABASE optuna_test")
        conn.close()
        yield f"postgresql+psycopg2://postgres@127.0.0.1:{port}/optuna_test"
    finally:
        sh(str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop")
        shutil.rmtree(parent, ignore_errors=True)
