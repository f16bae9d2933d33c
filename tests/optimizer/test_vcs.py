"""Workspace against real git repositories in temporary folders, with no git identity."""

from __future__ import annotations

import hashlib
import multiprocessing
import shutil
import subprocess
from pathlib import Path

import pytest

from optimizer.errors import WorkspaceError
from optimizer.vcs import FALLBACK_EMAIL, FALLBACK_NAME, Workspace

TARGET_REL = "targets/function/topk"
SEED = "X = 1  # knob: int 1..8\n"


@pytest.fixture(autouse=True)
def no_identity(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch):
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    for var in (
        "GIT_CONFIG_GLOBAL",
        "GIT_AUTHOR_NAME",
        "GIT_AUTHOR_EMAIL",
        "GIT_COMMITTER_NAME",
        "GIT_COMMITTER_EMAIL",
        "EMAIL",
    ):
        monkeypatch.delenv(var, raising=False)


def git(cwd: Path, *args: str) -> str:
    out = subprocess.run(["git", "-C", str(cwd), *args], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def make_repo(path: Path) -> Path:
    path.mkdir()
    git(path, "init", "-q", "-b", "main")
    (path / TARGET_REL).mkdir(parents=True)
    (path / TARGET_REL / "program.py").write_text(SEED)
    (path / TARGET_REL / "target.toml").write_text('name = "topk"\n')
    (path / "serve.py").write_text("print('serving')\n")
    (path / "src").mkdir()
    (path / "src" / "engine.py").write_text("ENGINE = 1\n")
    (path / "tool.sh").write_text("#!/bin/sh\n")
    (path / "tool.sh").chmod(0o755)
    git(path, "add", "-A")
    git(path, "-c", "user.name=Setup", "-c", "user.email=s@x", "commit", "-qm", "seed")
    return path


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "repo")


@pytest.fixture
def ws(repo: Path):
    with Workspace(repo, experiment="nightly", state_dir=repo / ".optimizer") as w:
        yield w


def user_state(repo: Path) -> tuple[str, str, str, str]:
    index = hashlib.sha256((repo / ".git" / "index").read_bytes()).hexdigest()
    return (
        git(repo, "status", "--porcelain", "--untracked-files=all"),
        git(repo, "rev-parse", "HEAD"),
        index,
        (repo / "serve.py").read_text(),
    )


def test_not_a_repository(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))
    (tmp_path / "plain").mkdir()
    with pytest.raises(WorkspaceError, match="not inside a git repository.*git init"):
        Workspace(tmp_path / "plain", experiment="e", state_dir=tmp_path / "s")


def test_unborn_head(tmp_path: Path) -> None:
    git(tmp_path, "init", "-q")
    with pytest.raises(WorkspaceError, match="unborn HEAD"):
        Workspace(tmp_path, experiment="e", state_dir=tmp_path / "s")


def test_bad_base_and_names(repo: Path) -> None:
    with pytest.raises(WorkspaceError, match="does not name a commit"):
        Workspace(repo, experiment="e", state_dir=repo / ".optimizer", base="no-such-branch")
    with pytest.raises(WorkspaceError, match="collides"):
        Workspace(repo, experiment="pr", state_dir=repo / ".optimizer")
    with pytest.raises(WorkspaceError, match="branch name"):
        Workspace(repo, experiment="a b", state_dir=repo / ".optimizer")
    with Workspace(repo, experiment="e", state_dir=repo / ".optimizer") as w:
        with pytest.raises(WorkspaceError, match="branch name"):
            w.candidate_branch("../x", "c0001")
        with pytest.raises(WorkspaceError, match="relative path"):
            w.create_worktree(TARGET_REL, "t", "c0001", {"../escape.py": ""})


def test_full_cycle_leaves_user_work_alone(repo: Path) -> None:
    (repo / "serve.py").write_text("print('my uncommitted change')\n")
    (repo / "notes.txt").write_text("untracked\n")
    (repo / TARGET_REL / "program.py").write_text("X = 99\n")  # dirty target file too
    git(repo, "add", "notes.txt")  # and something staged
    before = user_state(repo)
    base = before[1]

    with Workspace(repo, experiment="nightly", state_dir=repo / ".optimizer") as ws:
        folder = ws.create_worktree(TARGET_REL, "topk", "c0001", {"program.py": "X = 2\n"})
        assert folder == ws.worktree_path("topk", "c0001") / TARGET_REL
        assert (folder / "program.py").read_text() == "X = 2\n"
        assert (folder / "target.toml").exists()  # the rest of the target folder is there
        assert not (ws.worktree_path("topk", "c0001") / "src").exists()  # sparse

        sha = ws.commit_candidate("topk", "c0001", "candidate c0001\n\nstate: RUNNING")
        branch = ws.candidate_branch("topk", "c0001")
        assert branch == "optimizer/nightly/topk/c0001"
        assert git(repo, "rev-parse", branch) == sha
        assert git(repo, "rev-parse", f"{sha}^") == base
        # Only the target file changed; files outside the sparse checkout are kept.
        assert git(repo, "diff", "--name-only", base, sha) == f"{TARGET_REL}/program.py"
        assert git(repo, "log", "-1", "--format=%an <%ae>|%cn <%ce>", sha) == (
            f"{FALLBACK_NAME} <{FALLBACK_EMAIL}>|{FALLBACK_NAME} <{FALLBACK_EMAIL}>"
        )
        assert "+X = 2" in ws.diff("topk", "c0001")
        assert ws.read_files("topk", "c0001", TARGET_REL, ["program.py"]) == {
            "program.py": "X = 2\n"
        }
        ws.remove_worktree("topk", "c0001")
        assert not ws.worktree_path("topk", "c0001").exists()
        assert ws.candidate_ids("topk") == ["c0001"]

    assert user_state(repo) == before
    assert git(repo, "worktree", "list", "--porcelain").count("worktree ") == 1


def test_unchanged_candidate_still_commits(ws: Workspace, repo: Path) -> None:
    ws.create_worktree(TARGET_REL, "topk", "c0001", {"program.py": SEED})
    sha = ws.commit_candidate("topk", "c0001", "same as base")
    assert sha != ws.base_commit
    assert git(repo, "rev-parse", f"{sha}^{{tree}}") == git(repo, "rev-parse", "HEAD^{tree}")
    assert ws.diff("topk", "c0001") == ""


def test_evaluation_leftovers_are_not_committed(ws: Workspace, repo: Path) -> None:
    folder = ws.create_worktree(TARGET_REL, "topk", "c0001", {"program.py": "X = 3\n"})
    (folder / "__pycache__").mkdir()
    (folder / "__pycache__" / "program.cpython-311.pyc").write_bytes(b"\0")
    sha = ws.commit_candidate("topk", "c0001", "m")
    assert git(repo, "diff", "--name-only", ws.base_commit, sha) == f"{TARGET_REL}/program.py"


def test_stale_worktree_and_branch_are_replaced(ws: Workspace, repo: Path) -> None:
    ws.create_worktree(TARGET_REL, "topk", "c0002", {"program.py": "X = 4\n"})
    ws.commit_candidate("topk", "c0002", "first attempt")
    # A crash left the worktree and the branch; the next run reuses the id.
    folder = ws.create_worktree(TARGET_REL, "topk", "c0002", {"program.py": "X = 5\n"})
    assert (folder / "program.py").read_text() == "X = 5\n"
    sha = ws.commit_candidate("topk", "c0002", "second attempt")
    assert git(repo, "rev-parse", f"{sha}^") == ws.base_commit  # not stacked on the stale one

    # A crash that lost the folder but left git's records of the worktree.
    shutil.rmtree(ws.worktree_path("topk", "c0002"))
    ws.create_worktree(TARGET_REL, "topk", "c0002", {"program.py": "X = 6\n"})
    sha = ws.commit_candidate("topk", "c0002", "third")
    assert git(repo, "rev-parse", ws.candidate_branch("topk", "c0002")) == sha
    assert ws.read_files("topk", "c0002", TARGET_REL, ["program.py"])["program.py"] == "X = 6\n"


def test_a_worktree_add_killed_midway_does_not_block_the_next(ws: Workspace,
                                                              repo: Path) -> None:
    """What SIGKILL during `git worktree add` left in a concurrent night (seen in
    tests/optimizer/test_loop_resume_concurrent.py): the branch, the admin entry locked
    "initializing" with an empty commondir, and every later `worktree add` failing."""
    ws.create_worktree(TARGET_REL, "topk", "c0005", {"program.py": "X = 4\n"})
    admin = repo / ".git" / "worktrees" / "c0005"
    (admin / "commondir").write_text("")
    (admin / "locked").write_text("initializing")
    shutil.rmtree(ws.worktree_path("topk", "c0005") / TARGET_REL)
    with pytest.raises(subprocess.CalledProcessError):
        subprocess.run(["git", "-C", str(repo), "worktree", "add", "--no-checkout",
                        str(repo.parent / "probe"), "HEAD"], check=True, capture_output=True)
    # the next candidate's worktree: its first `worktree add` fails, the retry succeeds
    folder = ws.create_worktree(TARGET_REL, "topk", "c0006", {"program.py": "X = 6\n"})
    assert (folder / "program.py").read_text() == "X = 6\n"
    assert not admin.exists()
    ws.commit_candidate("topk", "c0006", "after the kill")
    ws.remove_worktree("topk", "c0005")  # --resume's clean-up of the interrupted one
    assert "c0005" not in git(repo, "worktree", "list")


@pytest.mark.parametrize("keep_worktree", [True, False])
def test_annotate_replaces_message_only(ws: Workspace, repo: Path, keep_worktree: bool) -> None:
    ws.create_worktree(TARGET_REL, "topk", "c0003", {"program.py": "X = 7\n"})
    sha = ws.commit_candidate("topk", "c0003", "c0003 RUNNING")
    if not keep_worktree:
        ws.remove_worktree("topk", "c0003")
    message = "c0003 VALID\n\n# Metrics\ntime_s: 0.25\n"
    new = ws.annotate("topk", "c0003", message)
    assert new != sha
    branch = ws.candidate_branch("topk", "c0003")
    assert git(repo, "rev-parse", branch) == new
    assert git(repo, "rev-parse", f"{new}^{{tree}}") == git(repo, "rev-parse", f"{sha}^{{tree}}")
    assert git(repo, "rev-parse", f"{new}^") == git(repo, "rev-parse", f"{sha}^")
    assert ws.commit_message("topk", "c0003") == message.rstrip("\n")  # '#' lines are kept
    if keep_worktree:
        wt = ws.worktree_path("topk", "c0003")
        assert git(wt, "rev-parse", "HEAD") == new
        assert git(wt, "status", "--porcelain") == ""


def test_missing_candidate_is_a_clear_error(ws: Workspace) -> None:
    for call in (
        lambda: ws.annotate("topk", "c0404", "m"),
        lambda: ws.commit_message("topk", "c0404"),
        lambda: ws.read_files("topk", "c0404", TARGET_REL, ["program.py"]),
        lambda: ws.diff("topk", "c0404"),
        lambda: ws.commit_candidate("topk", "c0404", "m"),
    ):
        with pytest.raises(WorkspaceError, match="c0404"):
            call()
    ws.create_worktree(TARGET_REL, "topk", "c0001", {"program.py": "X = 1\n"})
    ws.commit_candidate("topk", "c0001", "m")
    with pytest.raises(WorkspaceError, match="missing.py is not in candidate c0001"):
        ws.read_files("topk", "c0001", TARGET_REL, ["missing.py"])


def test_configured_identity_is_used(repo: Path) -> None:
    git(repo, "config", "user.name", "Ada")
    git(repo, "config", "user.email", "ada@example.org")
    with Workspace(repo, experiment="e", state_dir=repo / ".optimizer") as ws:
        ws.create_worktree(TARGET_REL, "topk", "c0001", {"program.py": "X = 1\n"})
        sha = ws.commit_candidate("topk", "c0001", "m")
    assert git(repo, "log", "-1", "--format=%an <%ae>", sha) == "Ada <ada@example.org>"


def test_pull_branch_is_one_commit_on_base(ws: Workspace, repo: Path) -> None:
    (repo / "serve.py").write_text("dirty\n")
    before = user_state(repo)
    files = {"program.py": "X = 8\n", "helpers/extra.py": "Y = 1\n"}
    branch, sha = ws.make_pull_branch("topk", TARGET_REL, files, "Speed up topk by 1.3x")
    assert branch == "optimizer/pr/nightly/topk"
    assert git(repo, "rev-list", "--count", f"{ws.base_commit}..{branch}") == "1"
    assert git(repo, "rev-parse", f"{sha}^") == ws.base_commit
    changed = git(repo, "diff", "--name-only", ws.base_commit, sha).splitlines()
    assert sorted(changed) == [f"{TARGET_REL}/helpers/extra.py", f"{TARGET_REL}/program.py"]
    assert git(repo, "show", f"{sha}:{TARGET_REL}/program.py") == "X = 8"
    assert git(repo, "log", "-1", "--format=%B", sha) == "Speed up topk by 1.3x"
    assert git(repo, "ls-tree", sha, "tool.sh").startswith("100755")  # modes kept
    # Force-updated, still one commit on the base.
    _, sha2 = ws.make_pull_branch("topk", TARGET_REL, {"program.py": "X = 9\n"}, "again")
    assert git(repo, "rev-parse", f"{sha2}^") == ws.base_commit
    assert git(repo, "diff", "--name-only", ws.base_commit, sha2) == f"{TARGET_REL}/program.py"
    assert user_state(repo) == before


def test_branches_and_prune(ws: Workspace, repo: Path) -> None:
    for cid in ("c0001", "c0002", "c0010"):
        ws.create_worktree(TARGET_REL, "topk", cid, {"program.py": f"X = {cid[-1]}\n"})
        ws.commit_candidate("topk", cid, cid)
    ws.remove_worktree("topk", "c0001")  # c0002 and c0010 keep their worktrees (a crash)
    ws.make_pull_branch("topk", TARGET_REL, {"program.py": "X = 2\n"}, "pr")
    with Workspace(repo, experiment="other", state_dir=repo / ".optimizer") as other:
        other.create_worktree(TARGET_REL, "topk", "c0001", {"program.py": "X = 0\n"})
        other.commit_candidate("topk", "c0001", "o")

    assert ws.candidate_ids("topk") == ["c0001", "c0002", "c0010"]
    assert ws.next_cid("topk") == "c0011"
    assert ws.branches("nightly") == [
        "optimizer/nightly/topk/c0001",
        "optimizer/nightly/topk/c0002",
        "optimizer/nightly/topk/c0010",
        "optimizer/pr/nightly/topk",
    ]
    assert len(ws.branches()) == 5

    assert ws.prune("nightly") == 3
    assert ws.branches("nightly") == ["optimizer/pr/nightly/topk"]
    assert not (ws.worktree_root / "nightly").exists()
    assert (ws.worktree_root / "other" / "topk" / "c0001").exists()  # other experiment kept
    assert ws.branches("other") == ["optimizer/other/topk/c0001"]
    assert ws.prune(None, keep_pull=False) == 2
    assert ws.branches() == []
    assert git(repo, "worktree", "list", "--porcelain").count("worktree ") == 1
    assert git(repo, "status", "--porcelain") == ""  # the state dir ignores itself


def test_push_to_a_remote(ws: Workspace, repo: Path, tmp_path: Path) -> None:
    remote = tmp_path / "remote.git"
    git(tmp_path, "init", "-q", "--bare", str(remote))
    git(repo, "remote", "add", "origin", str(remote))
    ws.create_worktree(TARGET_REL, "topk", "c0001", {"program.py": "X = 3\n"})
    ws.commit_candidate("topk", "c0001", "m")
    branch = ws.candidate_branch("topk", "c0001")
    ws.push("origin", [branch])
    new = ws.annotate("topk", "c0001", "rewritten")  # a rewritten tip still pushes
    ws.push("origin", [branch])
    assert git(remote, "rev-parse", branch) == new
    with pytest.raises(WorkspaceError, match="git push to 'nowhere' failed"):
        ws.push("nowhere", [branch])


def _worker(repo: str, first: int) -> list[str]:
    with Workspace(Path(repo), experiment="nightly", state_dir=Path(repo) / ".optimizer") as ws:
        shas = []
        for n in range(first, first + 4):
            cid = ws.cid(n)
            ws.create_worktree(TARGET_REL, "topk", cid, {"program.py": f"X = {n}\n"})
            ws.commit_candidate("topk", cid, f"{cid} RUNNING")
            shas.append(ws.annotate("topk", cid, f"{cid} VALID"))
            ws.remove_worktree("topk", cid)
        return shas


def test_parallel_workers_share_one_repository(repo: Path) -> None:
    with multiprocessing.get_context("fork").Pool(2) as pool:
        results = pool.starmap(_worker, [(str(repo), 1), (str(repo), 5)])
    with Workspace(repo, experiment="nightly", state_dir=repo / ".optimizer") as ws:
        assert ws.candidate_ids("topk") == [ws.cid(n) for n in range(1, 9)]
        tips = [git(repo, "rev-parse", ws.candidate_branch("topk", ws.cid(n))) for n in range(1, 9)]
        assert tips == results[0] + results[1]
        for n in range(1, 9):
            files = ws.read_files("topk", ws.cid(n), TARGET_REL, ["program.py"])
            assert files == {"program.py": f"X = {n}\n"}
    assert git(repo, "worktree", "list", "--porcelain").count("worktree ") == 1
