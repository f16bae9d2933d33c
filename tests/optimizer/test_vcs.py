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


def git(cwd: Path, *args: str, input_text: str | None = None) -> str:
    out = subprocess.run(["git", "-C", str(cwd), *args], capture_output=True, text=True,
                         input=input_text)
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
        # a file elsewhere in the repository is fine; one outside it is not
        escape = "../" * (len(Path(TARGET_REL).parts) + 1) + "escape.py"
        with pytest.raises(WorkspaceError, match="outside the repository"):
            w.create_worktree(TARGET_REL, "t", "c0001", {escape: ""})
        with pytest.raises(WorkspaceError, match="relative path"):
            w.create_worktree(TARGET_REL, "t", "c0001", {"/etc/passwd": ""})


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


# -- create_candidate: the commit written in-process, compared with what git says --------


def _ls_tree(repo: Path, rev: str) -> dict[str, tuple[str, str]]:
    """path -> (mode, blob sha) of every file at ``rev``, as git lists them."""
    out = {}
    for line in git(repo, "ls-tree", "-r", "--full-tree", rev).splitlines():
        meta, path = line.split("\t", 1)
        mode, _, sha = meta.split()
        out[path] = (mode, sha)
    return out


def _files_under(root: Path) -> dict[str, bool]:
    """relative path -> executable, for every file below ``root`` except git's own."""
    return {
        p.relative_to(root).as_posix(): bool(p.stat().st_mode & 0o100)
        for p in root.rglob("*")
        if p.is_file() and ".git" not in p.relative_to(root).parts
    }


def _with_executable_in_target(repo: Path) -> None:
    (repo / TARGET_REL / "run.sh").write_text("#!/bin/sh\necho seed\n")
    (repo / TARGET_REL / "run.sh").chmod(0o755)
    (repo / TARGET_REL / "data").mkdir()
    (repo / TARGET_REL / "data" / "table.txt").write_text("1 2 3\n")
    (repo / "targets" / "README.md").write_text("targets\n")
    git(repo, "add", "-A")
    git(repo, "-c", "user.name=Setup", "-c", "user.email=s@x", "commit", "-qm", "more")


def test_create_candidate_commit_is_the_base_tree_with_the_files(repo: Path) -> None:
    _with_executable_in_target(repo)
    base = git(repo, "rev-parse", "HEAD")
    files = {"program.py": "X = 2\n", "run.sh": "#!/bin/sh\necho cand\n", "sub/new.py": "N = 1\n"}
    with Workspace(repo, experiment="nightly", state_dir=repo / ".optimizer") as ws:
        folder, sha = ws.create_candidate(TARGET_REL, "topk", "c0001", files, "c0001 RUNNING")
        branch = ws.candidate_branch("topk", "c0001")
        assert git(repo, "rev-parse", branch) == sha
        assert git(repo, "rev-parse", f"{sha}^@") == base  # one parent: the base
        assert git(repo, "log", "-1", "--format=%B", sha) == "c0001 RUNNING"
        want = _ls_tree(repo, base)
        for name, text in files.items():
            blob = git(repo, "hash-object", "--stdin", "-t", "blob", input_text=text)
            old_mode = want.get(f"{TARGET_REL}/{name}", ("100644", ""))[0]
            want[f"{TARGET_REL}/{name}"] = (old_mode, blob)
        got = _ls_tree(repo, sha)
        assert got == want
        assert got[f"{TARGET_REL}/run.sh"][0] == "100755"  # the executable stays executable
        assert got["tool.sh"][0] == "100755"
        for name, text in files.items():
            assert git(repo, "show", f"{branch}:{TARGET_REL}/{name}") == text.rstrip("\n")
        git(repo, "fsck", "--strict", "--no-dangling")  # the objects are well formed
        assert git(repo, "diff", "--name-only", base, sha).split() == sorted(
            f"{TARGET_REL}/{n}" for n in files)
        assert "+X = 2" in ws.diff("topk", "c0001")
        assert ws.read_files("topk", "c0001", TARGET_REL, ["program.py"]) == {
            "program.py": "X = 2\n"}
        assert folder == ws.worktree_path("topk", "c0001") / TARGET_REL


def test_create_candidate_folder_is_the_sparse_cone(repo: Path) -> None:
    _with_executable_in_target(repo)
    files = {"program.py": "X = 3\n", "sub/new.py": "N = 1\n"}
    with Workspace(repo, experiment="nightly", state_dir=repo / ".optimizer") as ws:
        ws.create_candidate(TARGET_REL, "topk", "c0001", files, "m")
        plain = _files_under(ws.worktree_path("topk", "c0001"))
        ws.create_worktree(TARGET_REL, "topk", "c0002", files)  # a real sparse worktree
        sparse = _files_under(ws.worktree_path("topk", "c0002"))
        assert plain == sparse
        assert set(plain) == {
            "serve.py", "tool.sh", "targets/README.md",
            *(f"{TARGET_REL}/{n}" for n in
              ("program.py", "target.toml", "run.sh", "data/table.txt", "sub/new.py")),
        }
        assert plain["tool.sh"] and plain[f"{TARGET_REL}/run.sh"]
        assert not plain["serve.py"]
        root = ws.worktree_path("topk", "c0001")
        assert (root / TARGET_REL / "program.py").read_text() == "X = 3\n"
        assert not (root / "src").exists()
        assert not (root / ".git").exists()  # a plain folder, no worktree of git's
        ws.remove_worktree("topk", "c0001")
        ws.remove_worktree("topk", "c0002")
        assert not root.exists()
    assert git(repo, "worktree", "list", "--porcelain").count("worktree ") == 1


def test_create_candidate_replaces_a_leftover_folder_and_branch(ws: Workspace,
                                                                repo: Path) -> None:
    ws.create_candidate(TARGET_REL, "topk", "c0002", {"program.py": "X = 4\n"}, "first")
    stray = ws.worktree_path("topk", "c0002") / TARGET_REL / "stray.txt"
    stray.write_text("left by the killed evaluation\n")
    folder, sha = ws.create_candidate(TARGET_REL, "topk", "c0002", {"program.py": "X = 5\n"},
                                      "second")
    assert not stray.exists()
    assert (folder / "program.py").read_text() == "X = 5\n"
    assert git(repo, "rev-parse", ws.candidate_branch("topk", "c0002")) == sha
    assert git(repo, "rev-parse", f"{sha}^") == ws.base_commit  # not stacked on the first
    # and over a real worktree left by an older night
    ws.create_worktree(TARGET_REL, "topk", "c0003", {"program.py": "X = 6\n"})
    ws.commit_candidate("topk", "c0003", "old")
    folder, sha = ws.create_candidate(TARGET_REL, "topk", "c0003", {"program.py": "X = 7\n"},
                                      "new")
    assert (folder / "program.py").read_text() == "X = 7\n"
    assert git(repo, "rev-parse", f"{sha}^") == ws.base_commit
    assert ws.read_files("topk", "c0003", TARGET_REL, ["program.py"]) == {
        "program.py": "X = 7\n"}


def test_create_candidate_leaves_the_users_checkout_alone(repo: Path) -> None:
    (repo / "serve.py").write_text("print('my uncommitted change')\n")
    (repo / TARGET_REL / "program.py").write_text("X = 99\n")
    (repo / "notes.txt").write_text("untracked\n")
    git(repo, "add", "notes.txt")
    before = user_state(repo)
    with Workspace(repo, experiment="nightly", state_dir=repo / ".optimizer") as ws:
        for n in range(1, 4):
            ws.create_candidate(TARGET_REL, "topk", ws.cid(n), {"program.py": f"X = {n}\n"},
                                "m")
            ws.annotate("topk", ws.cid(n), f"done {n}")
            ws.remove_worktree("topk", ws.cid(n))
        assert ws.candidate_ids("topk") == ["c0001", "c0002", "c0003"]
    assert user_state(repo) == before
    assert git(repo, "symbolic-ref", "HEAD") == "refs/heads/main"


def test_annotate_after_create_candidate_changes_only_the_message(ws: Workspace,
                                                                  repo: Path) -> None:
    _, sha = ws.create_candidate(TARGET_REL, "topk", "c0004", {"program.py": "X = 8\n"},
                                 "c0004 RUNNING")
    fmt = "%T %P|%an <%ae> %ad|%cn <%ce>"
    before = git(repo, "log", "-1", f"--format={fmt}", sha)
    new = ws.annotate("topk", "c0004", "c0004 VALID\n\n# Metrics\ncost: 1\n")
    assert new != sha
    assert git(repo, "rev-parse", ws.candidate_branch("topk", "c0004")) == new
    assert git(repo, "log", "-1", f"--format={fmt}", new).split("|")[:2] == before.split(
        "|")[:2]
    assert ws.commit_message("topk", "c0004") == "c0004 VALID\n\n# Metrics\ncost: 1"
    git(repo, "fsck", "--strict", "--no-dangling")


def test_annotate_is_compare_and_swap(ws: Workspace, repo: Path) -> None:
    """The branch moved behind the workspace's back (another process): annotate fails
    loudly instead of overwriting that commit."""
    _, sha = ws.create_candidate(TARGET_REL, "topk", "c0005", {"program.py": "X = 2\n"}, "m")
    branch = ws.candidate_branch("topk", "c0005")
    git(repo, "update-ref", f"refs/heads/{branch}", ws.base_commit)
    with pytest.raises(WorkspaceError, match="cannot move"):
        ws.annotate("topk", "c0005", "too late")
    assert git(repo, "rev-parse", branch) == ws.base_commit
    # the ref updater recovers: the next candidate is written as usual
    _, sha6 = ws.create_candidate(TARGET_REL, "topk", "c0006", {"program.py": "X = 3\n"}, "m")
    assert git(repo, "rev-parse", ws.candidate_branch("topk", "c0006")) == sha6
    assert ws.annotate("topk", "c0006", "fine") == git(
        repo, "rev-parse", ws.candidate_branch("topk", "c0006"))


def test_create_candidate_identity_fallback_and_configured(repo: Path) -> None:
    with Workspace(repo, experiment="e", state_dir=repo / ".optimizer") as ws:
        _, sha = ws.create_candidate(TARGET_REL, "topk", "c0001", {"program.py": "X = 1\n"}, "m")
        new = ws.annotate("topk", "c0001", "n")
    for rev in (sha, new):
        assert git(repo, "log", "-1", "--format=%an <%ae>|%cn <%ce>", rev) == (
            f"{FALLBACK_NAME} <{FALLBACK_EMAIL}>|{FALLBACK_NAME} <{FALLBACK_EMAIL}>")
    git(repo, "config", "user.name", "Ada")
    with Workspace(repo, experiment="e", state_dir=repo / ".optimizer") as ws:
        _, sha = ws.create_candidate(TARGET_REL, "topk", "c0002", {"program.py": "X = 2\n"}, "m")
    # the configured name, the fallback email for what is missing
    assert git(repo, "log", "-1", "--format=%an <%ae>", sha) == f"Ada <{FALLBACK_EMAIL}>"
    git(repo, "config", "user.email", "ada@example.org")
    with Workspace(repo, experiment="e", state_dir=repo / ".optimizer") as ws:
        _, sha = ws.create_candidate(TARGET_REL, "topk", "c0003", {"program.py": "X = 3\n"}, "m")
    assert git(repo, "log", "-1", "--format=%an <%ae>|%cn <%ce>", sha) == (
        "Ada <ada@example.org>|Ada <ada@example.org>")


def test_create_candidate_respects_git_dates_and_identity_env(
        repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GIT_AUTHOR_NAME", "Bot")
    monkeypatch.setenv("GIT_AUTHOR_EMAIL", "bot@example.org")
    monkeypatch.setenv("GIT_AUTHOR_DATE", "2001-02-03T04:05:06+0100")
    monkeypatch.setenv("GIT_COMMITTER_DATE", "2002-03-04T05:06:07-0200")
    with Workspace(repo, experiment="e", state_dir=repo / ".optimizer") as ws:
        _, sha = ws.create_candidate(TARGET_REL, "topk", "c0001", {"program.py": "X = 1\n"}, "m")
        new = ws.annotate("topk", "c0001", "n")
    for rev in (sha, new):
        assert git(repo, "log", "-1", "--format=%an <%ae>|%aI|%cI", rev) == (
            "Bot <bot@example.org>|2001-02-03T04:05:06+01:00|2002-03-04T05:06:07-02:00")
        assert git(repo, "log", "-1", "--format=%cn <%ce>", rev) == (
            f"{FALLBACK_NAME} <{FALLBACK_EMAIL}>")


def test_create_candidate_without_dates_uses_now(ws: Workspace, repo: Path) -> None:
    import time

    _, sha = ws.create_candidate(TARGET_REL, "topk", "c0001", {"program.py": "X = 1\n"}, "m")
    stamps = git(repo, "log", "-1", "--format=%at %ct", sha).split()
    assert all(abs(int(s) - time.time()) < 60 for s in stamps)
