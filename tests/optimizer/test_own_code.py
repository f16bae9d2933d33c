"""Targets whose editable files live elsewhere in the user's repository: the candidate is
a copy of the whole repository, the pull branch edits the file in place, and a named
definition is the editable region."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from optimizer.cli import main
from optimizer.edits import apply_edits, parse_edits
from optimizer.errors import ConfigError, EditError
from optimizer.records import FileEdit
from optimizer.targets import load_target
from optimizer.testing.own_repo import (
    PENALTY,
    add_penalty_target,
    commit_all,
    git,
    make_serving_repo,
    vectorised_penalty,
)
from optimizer.vcs import Workspace

EDITABLE = "../../serving/sampling/penalty.py"


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    return make_serving_repo(tmp_path / "serving-repo")


def test_a_target_names_a_definition_in_a_file_elsewhere(repo: Path) -> None:
    folder = add_penalty_target(repo)
    spec = load_target(folder, repo)
    assert spec.name == "penalty"
    assert spec.editable == (EDITABLE,)
    assert spec.symbols == {EDITABLE: ("apply_repetition_penalty",)}
    assert spec.outside == (EDITABLE,)
    assert spec.repo_rel(EDITABLE) == "serving/sampling/penalty.py"
    assert spec.root_from_folder() == "../.."
    assert spec.seed_files() == {EDITABLE: PENALTY}


@pytest.mark.parametrize(("editable", "says"), [
    ("../../../elsewhere.py", "lies outside the repository"),
    ("../../serving/sampling/penalty.py::no_such_function",
     "no function or class named 'no_such_function'"),
    ("../../serving/sampling/missing.py", "does not exist"),
])
def test_bad_editable_entries_are_exit_2_with_the_reason(
    repo: Path, editable: str, says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    (repo.parent / "elsewhere.py").write_text("x = 1\n")
    folder = add_penalty_target(repo, editable)
    with pytest.raises(ConfigError, match=says.replace("(", r"\(")):
        load_target(folder, repo)
    assert main(["run", "--target", str(folder), "--minutes", "0.05"]) == 2
    assert says in capsys.readouterr().err
    assert not (repo / ".optimizer").exists()  # nothing written


def test_an_editable_file_with_uncommitted_changes_is_refused_before_anything_is_written(
    repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = add_penalty_target(repo)
    penalty = repo / "serving" / "sampling" / "penalty.py"
    penalty.write_text(PENALTY + "\n# work in progress\n")
    assert main(["run", "--target", str(folder), "--minutes", "0.05"]) == 2
    err = capsys.readouterr().err
    assert "uncommitted changes: serving/sampling/penalty.py" in err and "commit" in err
    assert not (repo / ".optimizer").exists()


def test_the_seed_evaluates_with_the_package_imports_of_its_own_copy(
    repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """penalty.py imports serving.sampling.util: the candidate's copy of the repository
    is on its import path (nothing else has the package)."""
    folder = add_penalty_target(repo)
    assert main(["evaluate", str(folder), "--json"]) == 0, capsys.readouterr()
    data = json.loads(capsys.readouterr().out)
    assert data["state"] == "VALID" and data["metrics"]["time_s"] > 0
    rewrite = repo.parent / "penalty.py"
    rewrite.write_text(vectorised_penalty())
    assert main(["evaluate", str(folder), str(rewrite), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["state"] == "VALID"
    wrong = vectorised_penalty().replace("out[mask] / penalty", "out[mask] * penalty", 1)
    rewrite.write_text(wrong)
    assert main(["evaluate", str(folder), str(rewrite), "--json"]) == 1
    assert json.loads(capsys.readouterr().out)["state"] == "INVALID"


def test_candidates_hold_the_whole_repository_and_pull_branches_edit_in_place(
    repo: Path,
) -> None:
    folder = add_penalty_target(repo)
    rel = str(folder.relative_to(repo))
    new = vectorised_penalty()
    with Workspace(repo, experiment="own", state_dir=repo / ".optimizer") as ws:
        cand_dir, sha = ws.create_candidate(rel, "penalty", "c0001", {EDITABLE: new}, "c1")
        root = cand_dir.parent.parent
        assert (root / "serving" / "sampling" / "penalty.py").read_text() == new
        assert (root / "serving" / "sampling" / "util.py").is_file()
        assert (root / "tests" / "test_penalty.py").is_file()
        assert (cand_dir / "evaluate.py").is_file()
        assert git(repo, "show", f"{sha}:serving/sampling/penalty.py") == new
        assert ws.read_files("penalty", "c0001", rel, [EDITABLE]) == {EDITABLE: new}
        diff = ws.diff("penalty", "c0001", rel)
        assert "b/serving/sampling/penalty.py" in diff and "np.broadcast_to" in diff
        branch, pull = ws.make_pull_branch("penalty", rel, {EDITABLE: new}, "Faster penalty")
        changed = git(repo, "diff", "--name-only", f"{pull}^", pull).split()
        assert changed == ["serving/sampling/penalty.py"]
        with pytest.raises(Exception, match="outside the repository"):
            ws.create_candidate(rel, "penalty", "c0002", {"../../../x.py": "x"}, "c2")
    assert git(repo, "status", "--porcelain") == ""  # the user's checkout untouched


def test_a_named_definition_is_the_editable_region(repo: Path) -> None:
    files = {EDITABLE: PENALTY}
    symbols = {EDITABLE: ("apply_repetition_penalty",)}
    inside = apply_edits(files, [FileEdit(EDITABLE, blocks=(
        ("            seen.add(tok)\n", "            seen.add(tok)  # once\n"),))], symbols)
    assert "seen.add(tok)  # once" in inside[EDITABLE]
    whole = apply_edits(files, [FileEdit(EDITABLE, content=vectorised_penalty())], symbols)
    assert whole[EDITABLE] == vectorised_penalty()
    with pytest.raises(EditError, match="outside the EVOLVE-BLOCKs"):
        apply_edits(files, [FileEdit(EDITABLE, blocks=(
            ("import numpy as np\n", "import numpy\n"),))], symbols)
    with pytest.raises(EditError, match="only the definitions apply_repetition_penalty"):
        apply_edits(files, [FileEdit(EDITABLE, content=PENALTY.replace(
            '"repetition penalty"', '"fast"'))], symbols)
    with pytest.raises(EditError, match="lost its editable definitions"):
        apply_edits(files, [FileEdit(EDITABLE, content=PENALTY.replace(
            "def apply_repetition_penalty", "def renamed"))], symbols)
    # a SEARCH/REPLACE answer naming the file by its repository path resolves to it
    answer = ("serving/sampling/penalty.py\n<<<<<<< SEARCH\n            seen.add(tok)\n"
              "=======\n            seen.add(tok)\n>>>>>>> REPLACE\n")
    assert parse_edits(answer, [EDITABLE])[0].path == EDITABLE


def test_a_method_can_be_named_and_a_whole_file_still_works(repo: Path) -> None:
    pkg = repo / "serving" / "sampling"
    (pkg / "cls.py").write_text("class Sampler:\n    def step(self):\n        return 1\n\n\n"
                                "X = 2\n")
    commit_all(repo, "cls")
    folder = add_penalty_target(repo, "../../serving/sampling/cls.py::Sampler.step")
    spec = load_target(folder, repo)
    source = (pkg / "cls.py").read_text()
    out = apply_edits({spec.editable[0]: source}, [FileEdit(spec.editable[0], blocks=(
        ("        return 1\n", "        return 2\n"),))], spec.symbols)
    assert "return 2" in out[spec.editable[0]]
    with pytest.raises(EditError):
        apply_edits({spec.editable[0]: source}, [FileEdit(spec.editable[0], blocks=(
            ("X = 2\n", "X = 3\n"),))], spec.symbols)
