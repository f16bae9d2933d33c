"""The walk of docs/your-code.md, as a new user takes it, in a repository outside this
project: the project's wheel installed into a fresh virtual environment (no file of this
project on the way), `optimizer init` on a function of a nested package, a night whose
rewrites come from a local OpenAI-compatible server, a pull branch that edits the original
file in place and passes that repository's own tests, and `optimizer publish` to a bare
remote.

The fresh environment gets the project from its wheel alone (``pip install --no-deps``);
its dependencies are this environment's, reached through a ``.pth`` file, so that no
dependency (torch above all) is downloaded or installed again.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import sysconfig
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from optimizer.testing.own_repo import commit_all, git, make_serving_repo, vectorised_penalty

pytestmark = pytest.mark.slow

PROJECT = Path(__file__).resolve().parents[2]
INIT = ["init", "function", "serving/sampling/penalty.py::apply_repetition_penalty",
        "--name", "penalty",
        "--arg", "logits: float32[B, V]", "--arg", "token_ids: int64[B, T] in -1..V",
        "--arg", "penalty: float in 1.0..2.0",
        "--dim", "B=1..64", "--dim", "V=2..4096", "--dim", "T=1..256"]


def _fake_server() -> Any:
    path = Path(__file__).parent / "proposers" / "fake_openai_server.py"
    spec = importlib.util.spec_from_file_location("fake_openai_server_walk", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtual environment with this project's wheel installed; its bin folder."""
    try:
        import setuptools  # noqa: F401 - the wheel is built without build isolation
    except ImportError:
        pytest.skip("setuptools is needed to build the wheel here")
    root = tmp_path_factory.mktemp("install")
    source = root / "source"  # the project's files as a clone has them
    listed = subprocess.run(["git", "-C", str(PROJECT), "ls-files", "-z", "--cached",
                             "--others", "--exclude-standard"], capture_output=True,
                            check=True).stdout.decode().split("\0")
    for rel in filter(None, listed):
        if (PROJECT / rel).is_file():
            (source / rel).parent.mkdir(parents=True, exist_ok=True)
            (source / rel).write_bytes((PROJECT / rel).read_bytes())
    wheels = root / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps",
                    "--no-build-isolation", "-w", str(wheels), str(source)], check=True,
                   cwd=root)
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()"
                           "['purelib'])"], capture_output=True, text=True,
                          check=True).stdout.strip()
    deps = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    Path(site, "dependencies.pth").write_text("".join(f"{d}\n" for d in sorted(deps)))
    wheel = next(wheels.glob("*.whl"))
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q",
                    "--no-deps", "--no-index", str(wheel)], check=True, cwd=root)
    where = subprocess.run([str(python), "-c", "import optimizer, evaluators; "
                            "print(optimizer.__file__); print(evaluators.__file__)"],
                           capture_output=True, text=True, check=True, cwd=root,
                           env=_env()).stdout.split()
    assert all(Path(w).is_relative_to(venv) for w in where), where  # the wheel's, not ours
    return venv / "bin"


def _env(tmpdir: Path | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "PYTEST"))}
    env["GIT_CONFIG_NOSYSTEM"] = "1"
    if tmpdir is not None:
        env["TMPDIR"] = str(tmpdir)
    return env


def _optimizer(bin_dir: Path, repo: Path, *args: str, timeout: float = 600,
               tmpdir: Path | None = None) -> str:
    proc = subprocess.run([str(bin_dir / "optimizer"), *args], cwd=repo, env=_env(tmpdir),
                          capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"optimizer {' '.join(args)}:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


@pytest.fixture
def user_repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    repo = make_serving_repo(tmp_path / "their-repo")
    assert not repo.is_relative_to(PROJECT)
    yield repo


def test_the_installed_package_runs_a_night_in_another_repository(
    installed: Path, user_repo: Path
) -> None:
    out = _optimizer(installed, user_repo, *INIT)
    assert "wrote targets/penalty/" in out
    commit_all(user_repo, "optimizer target")
    seed = json.loads(_optimizer(installed, user_repo, "evaluate", "targets/penalty", "--json"))
    assert seed["state"] == "VALID", seed["reason"]
    out = _optimizer(installed, user_repo, "run", "--target", "targets/penalty",
                     "--minutes", "4", "--json")
    summary = json.loads(out[out.index("{\n"):])
    target = summary["targets"][0]
    assert target["target"] == "penalty" and target["candidates"] > 1
    # the offline proposer has little to try on a program without knobs: the summary
    # says what would help
    assert "stopped early" in target["note"] and "--proposer llm" in target["note"]
    branches = git(user_repo, "branch", "--list", "optimizer/nightly/penalty/*").split()
    assert len(branches) == target["candidates"]
    assert git(user_repo, "status", "--porcelain") == ""


def test_the_walk_from_pip_install_to_a_merged_pull_branch(
    installed: Path, user_repo: Path, tmp_path: Path
) -> None:
    fake = _fake_server()
    _optimizer(installed, user_repo, *INIT)
    commit_all(user_repo, "optimizer target")
    answer = ("SUMMARY: vectorise the penalty with a boolean mask\n"
              "File: serving/sampling/penalty.py\n```python\n" + vectorised_penalty() + "```\n")
    scratch = tmp_path / "tmp"  # the night's temporary folders, to see nothing escapes them
    scratch.mkdir()
    with fake.FakeOpenAIServer([fake.Reply(answer) for _ in range(200)]) as server:
        out = _optimizer(installed, user_repo, "run", "--target", "targets/penalty",
                         "--minutes", "5", "--proposer", "llm",
                         "--llm-base-url", server.base_url, "--llm-model", "local", "--json",
                         tmpdir=scratch)
    assert server.requests, "the night never asked the server"
    assert not (scratch / "serving").exists()  # the MLflow upload of source/ stayed inside
    summary = json.loads(out[out.index("{\n"):])
    winner = summary["targets"][0]["winner"]
    assert winner, out
    pull = winner["pull_branch"]
    assert pull == "optimizer/pr/nightly/penalty"
    # the pull branch edits the user's own file in place, nothing else
    changed = git(user_repo, "diff", "--name-only", f"{pull}^", pull).split()
    assert changed == ["serving/sampling/penalty.py"]
    assert git(user_repo, "show", f"{pull}:serving/sampling/penalty.py") == vectorised_penalty()
    # ... and passes that repository's own tests
    checkout = tmp_path / "review"
    git(user_repo, "worktree", "add", "--detach", str(checkout), pull)
    tests = subprocess.run([str(installed / "python"), "-m", "pytest", "-q", "-p",
                            "no:cacheprovider", "tests"], cwd=checkout, env=_env(),
                           capture_output=True, text=True, timeout=300)
    assert tests.returncode == 0, tests.stdout + tests.stderr
    # merged as any reviewed change would be
    git(user_repo, "merge", "--ff-only", "--quiet", pull)
    assert (user_repo / "serving/sampling/penalty.py").read_text() == vectorised_penalty()
    git(user_repo, "reset", "--hard", "--quiet", "HEAD@{1}")
    # published to the team's forge (a bare remote here)
    forge = tmp_path / "forge.git"
    subprocess.run(["git", "init", "-q", "--bare", str(forge)], check=True)
    git(user_repo, "remote", "add", "origin", str(forge))
    out = _optimizer(installed, user_repo, "publish")
    assert f"pushed {pull} to origin" in out
    assert git(forge, "rev-parse", pull).strip() == git(user_repo, "rev-parse", pull).strip()
    body = (user_repo / ".optimizer/reports/pr/nightly-penalty.md").read_text()
    assert "## Evidence" in body and "| time_s |" in body and "## How to reproduce" in body
