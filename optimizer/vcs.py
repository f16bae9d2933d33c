"""Git side of the engine: one branch and one short-lived folder per candidate.

Names on disk (stable)::

    optimizer/<experiment>/<target>/c<NNNN>        a candidate branch (one commit on the base)
    optimizer/pr/<experiment>/<target>             a pull branch (one commit on the base)
    <state_dir>/worktrees/<experiment>/<target>/<cid>   the candidate's folder

The user's checkout is never touched: no checkout, reset, stash or index write happens in
it. A night's candidate (:meth:`Workspace.create_candidate`) is a commit built in this
process (optimizer/git_objects.py), and the folder the evaluation reads is a plain
directory holding what a sparse worktree would (the target folder and the files directly
inside its parent folders): 1-3 ms per candidate where ``git worktree add`` + ``git
commit`` + ``git worktree remove`` cost 40-45 ms (bench/engine_parts.py).
:meth:`create_worktree` still makes a real sparse worktree (tests and people use it).
Hooks, commit signing, message clean-up and automatic gc from the user's configuration are
switched off for our commits; annotations and pull branches are built with plumbing, a pull
branch in a temporary index.

Commits work without a configured git identity: whatever part of the identity is missing
(in ``GIT_AUTHOR_*``/``GIT_COMMITTER_*`` or ``user.name``/``user.email``) falls back to
``optimizer <optimizer@localhost>``.
"""

from __future__ import annotations

import os
import posixpath
import re
import shutil
import tempfile
from collections.abc import Iterable, Mapping
from io import BytesIO
from pathlib import Path, PurePosixPath
from typing import Any

import git
from gitdb import IStream

from optimizer.errors import WorkspaceError
from optimizer.git_objects import Objects, RefUpdater, commit_object, now_stamp, write_file

FALLBACK_NAME = "optimizer"
FALLBACK_EMAIL = "optimizer@localhost"
BRANCH_ROOT = "optimizer"
PULL_PREFIX = f"{BRANCH_ROOT}/pr"

# A name used as one branch component: no slashes, no git ref specials.
_NAME_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")
_CID_RE = re.compile(r"^c(\d+)$")
_IDENT_RE = re.compile(r"^(.*) (\d+) ([+-]\d{4})$")
# Variables that would redirect our git commands to another repository or index (they are
# set while git runs a hook); refusing is safer than writing the user's index by accident.
_REDIRECTING_ENV = ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_COMMON_DIR")
# Written into candidate trees by the evaluation itself, never part of a candidate.
_ADD_EXCLUDES = (":(exclude,glob)**/__pycache__/**", ":(exclude,glob)**/*.pyc")


def _check_name(kind: str, value: str) -> str:
    if not _NAME_RE.match(value) or value.endswith(".lock") or ".." in value:
        raise WorkspaceError(
            f"{kind} name {value!r} cannot be used in a git branch name; use letters, digits, "
            "'_', '-' and '.', starting with a letter, digit or '_'"
        )
    return value


def _check_rel(path: str, what: str) -> PurePosixPath:
    p = PurePosixPath(path)
    if p.is_absolute() or ".." in p.parts or not p.parts or str(p) == ".":
        raise WorkspaceError(f"{what} {path!r} must be a relative path inside the repository")
    return p


def _in_repo(rel: PurePosixPath, name: str, what: str) -> PurePosixPath:
    """``name`` (relative to the target folder ``rel``, perhaps "../../serving/x.py") as a
    path from the repository root; one that leaves the repository is an error."""
    p = PurePosixPath(name)
    if p.is_absolute() or not p.parts:
        raise WorkspaceError(f"{what} {name!r} must be a relative path inside the repository")
    joined = posixpath.normpath(str(rel / p))
    if joined == "." or joined == ".." or joined.startswith("../"):
        raise WorkspaceError(f"{what} {name!r} lies outside the repository")
    return PurePosixPath(joined)


def _escapes(rel: PurePosixPath, names: Iterable[str]) -> list[str]:
    """Those of ``names`` (relative to ``rel``) that lie outside the folder ``rel``."""
    return [n for n in names if posixpath.normpath(n).startswith("../")]


# Cone-mode sparse checkout with a sparse index, passed on the command line so that the
# user's repository configuration is never changed. The worktree's index then holds one
# entry per folder outside the cone instead of one per file. With 20,000 tracked files,
# create_worktree + commit_candidate cost 130 ms of CPU with a full index and 21-52 ms with
# a sparse one (bench/engine_parts.py, 2 shared cores).
_SPARSE = (
    "-c", "core.sparseCheckout=true", "-c", "core.sparseCheckoutCone=true",
    "-c", "index.sparse=true",
)  # fmt: skip


_COMMIT_CONFIG = (
    "-c", "core.hooksPath=/dev/null", "-c", "commit.gpgsign=false",
    "-c", "gc.auto=0", "-c", "maintenance.auto=false",
)  # fmt: skip


def _cone_patterns(target_rel: PurePosixPath) -> str:
    """Cone patterns for one folder: its files, plus files directly inside its parents."""
    lines = ["/*", "!/*/"]
    parts = [re.sub(r"([\\*?\[\]!#])", r"\\\1", p) for p in target_rel.parts]
    for depth in range(1, len(parts) + 1):
        prefix = "/".join(parts[:depth])
        lines.append(f"/{prefix}/")
        if depth < len(parts):
            lines.append(f"!/{prefix}/*/")
    return "\n".join(lines) + "\n"


class Workspace:
    """Candidate branches, worktrees and pull branches of one experiment in one repository."""

    def __init__(self, root: Path, *, experiment: str, state_dir: Path, base: str = "HEAD"):
        for var in _REDIRECTING_ENV:
            if var in os.environ:
                raise WorkspaceError(
                    f"{var} is set in the environment (as inside a git hook); it would redirect "
                    f"the optimizer's git commands. Unset {var} and run again."
                )
        if experiment == "pr":
            raise WorkspaceError(
                "experiment name 'pr' collides with the pull branches optimizer/pr/...; "
                "choose another experiment name"
            )
        self.experiment = _check_name("experiment", experiment)
        try:
            self.repo = git.Repo(Path(root), search_parent_directories=True)
        except (git.InvalidGitRepositoryError, git.NoSuchPathError) as exc:
            raise WorkspaceError(
                f"{root} is not inside a git repository; run `git init` and commit the "
                "targets there (the optimizer keeps one branch per candidate)"
            ) from exc
        if self.repo.working_tree_dir is None:
            raise WorkspaceError(f"{root} is a bare repository; use a checkout with a work tree")
        self.repo_root = Path(self.repo.working_tree_dir).resolve()
        self._identity_env: dict[str, str] = {}
        if not self.repo.head.is_valid():
            raise WorkspaceError(
                f"the repository at {self.repo_root} has no commit yet (unborn HEAD); "
                "commit the targets first, e.g. `git add -A && git commit -m 'targets'`"
            )
        try:
            self.base_commit: str = self._git("rev-parse", "--verify", f"{base}^{{commit}}")
        except git.GitCommandError as exc:
            raise WorkspaceError(
                f"base {base!r} does not name a commit in {self.repo_root}; pass an existing "
                "branch, tag or commit (default HEAD)"
            ) from exc
        self.state_dir = Path(state_dir).resolve()
        self.worktree_root = self.state_dir / "worktrees"
        self._target_rel: dict[str, str] = {}
        self._outside: dict[str, set[str]] = {}  # target -> editable paths outside its folder
        self._identity_env = self._identity()
        self._prepare_state_dir()
        self._ref_updater = RefUpdater(self.repo_root, self._identity_env)
        self._objects = Objects(self.repo)
        self._idents: tuple[str, str] | None = None
        self._base_tree: bytes | None = None
        # (target, cid) -> (sha, tree, author line) of commits made here: annotate
        # rewrites the message without asking git for them again
        self._made: dict[tuple[str, str], tuple[str, str, str]] = {}

    # -- plumbing helpers ----------------------------------------------------------------

    def _git(
        self, *args: str, cwd: Path | None = None, env: Mapping[str, str] | None = None
    ) -> str:
        cmd: list[str] = ["git"]
        if cwd is not None:
            cmd += ["-C", str(cwd)]
        cmd += list(args)
        out = self.repo.git.execute(cmd, env={**self._identity_env, **(env or {})})
        return str(out)

    def _identity(self) -> dict[str, str]:
        env: dict[str, str] = {}
        for key, fallback in (("name", FALLBACK_NAME), ("email", FALLBACK_EMAIL)):
            try:
                configured = self.repo.git.config("--get", f"user.{key}")
            except git.GitCommandError:
                configured = ""
            for role in ("AUTHOR", "COMMITTER"):
                var = f"GIT_{role}_{key.upper()}"
                if not configured and not os.environ.get(var):
                    env[var] = fallback
        return env

    def _prepare_state_dir(self) -> None:
        try:
            self.worktree_root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise WorkspaceError(
                f"cannot create the state directory {self.state_dir}: {exc}"
            ) from exc
        # A state dir inside the checkout ignores itself, so that worktrees and databases
        # never show up in the user's `git status`.
        if self.state_dir.is_relative_to(self.repo_root):
            ignore = self.state_dir / ".gitignore"
            if not ignore.exists():
                ignore.write_text("*\n")

    def close(self) -> None:
        """Stop the ref updater and GitPython's persistent helper processes."""
        self._ref_updater.close()
        self.repo.close()

    def __enter__(self) -> Workspace:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- names ---------------------------------------------------------------------------

    def candidate_branch(self, target: str, cid: str) -> str:
        _check_name("target", target)
        _check_name("candidate id", cid)
        return f"{BRANCH_ROOT}/{self.experiment}/{target}/{cid}"

    def pull_branch(self, target: str) -> str:
        return f"{PULL_PREFIX}/{self.experiment}/{_check_name('target', target)}"

    def worktree_path(self, target: str, cid: str) -> Path:
        _check_name("candidate id", cid)
        return self.worktree_root / self.experiment / _check_name("target", target) / cid

    @staticmethod
    def cid(number: int) -> str:
        """The candidate id of the ``number``-th candidate: ``c0007``."""
        return f"c{number:04d}"

    def next_cid(self, target: str) -> str:
        """One past the highest existing candidate id of this target (for --resume)."""
        ids = self.candidate_ids(target)
        last = int(_CID_RE.match(ids[-1]).group(1)) if ids else 0  # type: ignore[union-attr]
        return self.cid(last + 1)

    def _ref(self, branch: str) -> str:
        return f"refs/heads/{branch}"

    def _show(self, branch: str, fmt: str) -> str:
        """``git log -1 --format=fmt`` of a branch tip: one call, no separate rev-parse."""
        try:
            args = ("-1", "--no-show-signature", f"--format={fmt}", "--date=raw")
            return self._git("log", *args, self._ref(branch))
        except git.GitCommandError as exc:
            raise WorkspaceError(f"branch {branch} does not exist") from exc

    # -- candidate life cycle ------------------------------------------------------------

    def create_worktree(
        self, target_rel: str, target: str, cid: str, files: Mapping[str, str]
    ) -> Path:
        """New branch at the base, a sparse worktree of ``target_rel``, ``files`` written.

        Returns the absolute path of the target folder inside the worktree. A worktree or
        branch of the same name left by a crash is replaced.
        """
        rel = _check_rel(target_rel, "target folder")
        for name in files:
            _in_repo(rel, name, f"candidate file of {target}")
        whole = bool(_escapes(rel, files))
        branch = self.candidate_branch(target, cid)
        path = self.worktree_path(target, cid)
        path.parent.mkdir(parents=True, exist_ok=True)
        add = ("worktree", "add", "--quiet", "--no-checkout")
        try:
            self._git(*add, "-b", branch, str(path), self.base_commit)
        except git.GitCommandError:
            self._drop_worktree(path)
            try:
                self._git(*add, "-B", branch, str(path), self.base_commit)
            except git.GitCommandError as exc:
                raise WorkspaceError(
                    f"cannot create the worktree {path} on {branch}: {exc.stderr.strip()}; "
                    f"if another worktree holds the branch, run `git worktree list` and remove it"
                ) from exc
        # Sparse checkout of the target folder (and the files directly in its parents): the
        # index still holds the whole base tree, folders outside collapsed to tree entries,
        # so commits keep every other file.
        admin = Path((path / ".git").read_text().split(":", 1)[1].strip())
        (admin / "info").mkdir(exist_ok=True)
        # editable files outside the target folder: the whole repository, so that the
        # candidate's imports of the user's own package find the candidate's files
        (admin / "info" / "sparse-checkout").write_text("/*\n" if whole else _cone_patterns(rel))
        self._git(*_SPARSE, "read-tree", "-mu", "HEAD", cwd=path)
        folder = path / rel
        for name, text in files.items():
            dest = path / _in_repo(rel, name, f"candidate file of {target}")
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_text(text)
        self._remember(target, rel, files)
        return folder

    def _remember(self, target: str, rel: PurePosixPath, names: Iterable[str]) -> None:
        """The target's folder, and the paths of its editable files outside it (diffs)."""
        self._target_rel[target] = str(rel)
        outside = {str(_in_repo(rel, n, "file")) for n in _escapes(rel, names)}
        if outside:
            self._outside.setdefault(target, set()).update(outside)

    def create_candidate(
        self, target_rel: str, target: str, cid: str, files: Mapping[str, str], message: str
    ) -> tuple[Path, str]:
        """The candidate's branch (one commit on the base: the base tree with ``files``
        in ``target_rel``) and a plain folder holding what a sparse worktree of it would;
        returns (the target folder in it, the commit sha). A folder or branch of the same
        name left by a crash is replaced."""
        rel = _check_rel(target_rel, "target folder")
        names = {str(_in_repo(rel, n, f"candidate file of {target}")): t
                 for n, t in files.items()}
        whole = bool(_escapes(rel, files))
        branch = self.candidate_branch(target, cid)
        base_tree = self._base()
        blobs = {PurePosixPath(name).parts: text.encode() for name, text in names.items()}
        tree = self._objects.tree_with(base_tree, blobs)
        author, _ = self._identities()
        author_line = f"{author} {self._stamp('AUTHOR')}"
        sha = self._commit(tree, author_line, message)
        self._ref_updater.update(self._ref(branch), sha)
        self._made[(target, cid)] = (sha, tree, author_line)
        path = self.worktree_path(target, cid)
        if path.exists() or path.is_symlink():
            self._drop_worktree(path)
        folder = path / rel
        # editable files outside the target folder: the whole repository, so that the
        # candidate's imports of the user's own package find the candidate's files
        cone = PurePosixPath(".") if whole else rel
        for relpath, mode, data in self._objects.cone_files(base_tree, cone):
            write_file(path / relpath, mode, data)
        folder.mkdir(parents=True, exist_ok=True)
        for name, text in names.items():
            (path / name).parent.mkdir(parents=True, exist_ok=True)
            (path / name).write_text(text)
        self._remember(target, rel, files)
        return folder, sha

    def _base(self) -> bytes:
        """The base commit's tree (its binary sha)."""
        if self._base_tree is None:
            self._base_tree = self.repo.commit(self.base_commit).tree.binsha
        return self._base_tree

    def _commit(self, tree: str, author_line: str, message: str) -> str:
        """A commit of ``tree`` on the base written in this process; returns its sha."""
        _, committer = self._identities()
        committer_line = f"{committer} {self._stamp('COMMITTER')}"
        body = commit_object(tree, self.base_commit, author_line, committer_line, message)
        return self._objects.store("commit", body)

    def _identities(self) -> tuple[str, str]:
        """``Name <email>`` of the author and the committer, as git resolves them."""
        if self._idents is None:
            found = []
            for var in ("GIT_AUTHOR_IDENT", "GIT_COMMITTER_IDENT"):
                line = self._git("var", var).strip()
                m = _IDENT_RE.match(line)
                found.append(m.group(1) if m else line)
            self._idents = (found[0], found[1])
        return self._idents

    def _stamp(self, role: str) -> str:
        """The date of a commit header: now, or what ``GIT_<role>_DATE`` says."""
        if not os.environ.get(f"GIT_{role}_DATE"):
            return now_stamp()
        m = _IDENT_RE.match(self._git("var", f"GIT_{role}_IDENT").strip())
        return f"{m.group(2)} {m.group(3)}" if m else now_stamp()

    def commit_candidate(self, target: str, cid: str, message: str) -> str:
        """Commit everything changed in the candidate's worktree; returns the commit sha.

        An unchanged candidate still gets its own commit (the branch always moves).
        """
        path = self.worktree_path(target, cid)
        if not (path / ".git").exists():
            raise WorkspaceError(f"no worktree at {path}; call create_worktree first")
        self._git(*_SPARSE, "add", "-A", "--", ".", *_ADD_EXCLUDES, cwd=path)
        # Porcelain commit because it keeps the index sparse (write-tree expands it: 13 ms
        # more per candidate with 20,000 files); the flags neutralise what the user's
        # configuration could add: hooks, signing, message clean-up, automatic gc.
        self._git(*_SPARSE, *_COMMIT_CONFIG, "commit", "--quiet", "--no-verify",
                  "--allow-empty", "--cleanup=verbatim", "-m", message, cwd=path)  # fmt: skip
        sha = self._git("rev-parse", "HEAD", cwd=path)
        return sha

    def annotate(self, target: str, cid: str, message: str) -> str:
        """Replace the tip commit's message (same tree, parents and author); returns its sha."""
        branch = self.candidate_branch(target, cid)
        made = self._made.pop((target, cid), None)
        if made is not None:  # made here: the new commit is written in this process
            tip, tree, author_line = made
            sha = self._commit(tree, author_line, message)
            self._ref_updater.update(self._ref(branch), sha, tip)  # compare-and-swap, as below
            return sha
        fields = self._show(branch, "%H%n%T%n%P%n%an%n%ae%n%ad")
        old, tree, parents, name, email, date = fields.split("\n")
        author = {"GIT_AUTHOR_NAME": name, "GIT_AUTHOR_EMAIL": email, "GIT_AUTHOR_DATE": date}
        parent_args = [a for p in parents.split() for a in ("-p", p)]
        sha = self._git("commit-tree", tree, *parent_args, "-m", message, env=author)
        # Compare-and-swap: a tip moved by someone else in the meantime is an error.
        self._git("update-ref", "-m", "optimizer: annotate", self._ref(branch), sha, old)
        return sha

    def remove_worktree(self, target: str, cid: str) -> None:
        """Delete the candidate's worktree; its branch is kept."""
        self._drop_worktree(self.worktree_path(target, cid))

    def _drop_worktree(self, path: Path) -> None:
        if path.is_dir() and not path.is_symlink() and not (path / ".git").exists():
            shutil.rmtree(path, ignore_errors=True)  # a plain folder (create_candidate's)
            if not path.exists():
                return
        try:
            self._git("worktree", "remove", "--force", "--force", str(path))
        except git.GitCommandError:
            # Not registered (or its admin data is gone): delete the folder, forget the rest.
            shutil.rmtree(path, ignore_errors=True)
            # A `git worktree add` killed midway (SIGKILL of a night) leaves its admin entry
            # locked ("initializing"), perhaps with an empty commondir: `prune` keeps a
            # locked entry, and every later `worktree add` fails on an empty commondir
            # ("failed to read .git/worktrees/c0005/commondir"), whichever candidate it is
            # for. So this path's entry goes with its folder, and so do half-made entries of
            # this experiment's other worktrees (one night per experiment runs at a time).
            for admin in self._stale_admin_entries(path):
                shutil.rmtree(admin, ignore_errors=True)
            self._git("worktree", "prune")

    def _stale_admin_entries(self, path: Path) -> list[Path]:
        """Worktree admin folders (``.git/worktrees/<name>``) of ``path``, and those of this
        experiment's worktrees that a killed ``git worktree add`` left without a commondir."""
        root = Path(self.repo.common_dir) / "worktrees"
        ours = os.path.realpath(self.worktree_root / self.experiment)
        want = os.path.realpath(path / ".git")
        found = []
        for admin in sorted(root.iterdir()) if root.is_dir() else ():
            try:
                named = os.path.realpath((admin / "gitdir").read_text().strip() or "/")
            except OSError:
                continue
            try:
                half_made = not (admin / "commondir").read_text().strip()
            except OSError:
                half_made = True
            if named == want or (half_made and named.startswith(ours + os.sep)):
                found.append(admin)
        return found

    # -- reading -------------------------------------------------------------------------

    def _refs(self, prefix: str) -> list[str]:
        out = self._git("for-each-ref", "--format=%(refname)", f"refs/heads/{prefix}/")
        return [line.removeprefix("refs/heads/") for line in out.splitlines() if line]

    def candidate_ids(self, target: str) -> list[str]:
        """Candidate ids with a branch for this experiment and target, in numeric order."""
        prefix = f"{BRANCH_ROOT}/{self.experiment}/{_check_name('target', target)}"
        ids = [b.rsplit("/", 1)[1] for b in self._refs(prefix)]
        found = [(int(m.group(1)), c) for c in ids if (m := _CID_RE.match(c))]
        return [c for _, c in sorted(found)]

    def read_files(
        self, target: str, cid: str, target_rel: str, names: Iterable[str]
    ) -> dict[str, str]:
        """The named files of the target folder at the candidate branch's tip."""
        branch = self.candidate_branch(target, cid)
        try:
            tree = self.repo.commit(self._ref(branch)).tree
        except (ValueError, git.BadName) as exc:
            raise WorkspaceError(f"branch {branch} does not exist") from exc
        out: dict[str, str] = {}
        rel = _check_rel(target_rel, "target folder")
        for name in names:
            path = str(_in_repo(rel, name, "file"))
            try:
                blob = tree / path
            except KeyError as exc:
                raise WorkspaceError(f"{path} is not in candidate {cid} of {target}") from exc
            out[name] = blob.data_stream.read().decode()
        return out

    def commit_message(self, target: str, cid: str) -> str:
        """The tip's message, without trailing newlines."""
        return self._show(self.candidate_branch(target, cid), "%B").rstrip("\n")

    def diff(self, target: str, cid: str, target_rel: str | None = None) -> str:
        """Unified diff of the candidate's tip against the base, limited to the target folder.

        ``target_rel`` defaults to the folder given to :meth:`create_worktree` in this
        process; without either, the whole diff is returned (candidate commits only ever
        change their target folder).
        """
        branch = self.candidate_branch(target, cid)
        rel = target_rel or self._target_rel.get(target)
        paths = ["--", rel, *sorted(self._outside.get(target, ()))] if rel else ["--"]
        try:
            return self._git(
                "diff", "--no-color", "--no-ext-diff", "--no-textconv", "--src-prefix=a/",
                "--dst-prefix=b/", self.base_commit, self._ref(branch), *paths,
            )  # fmt: skip
        except git.GitCommandError as exc:
            raise WorkspaceError(f"cannot diff {branch}: {str(exc.stderr).strip()}") from exc

    # -- pull branches -------------------------------------------------------------------

    def make_pull_branch(
        self, target: str, target_rel: str, files: Mapping[str, str], message: str
    ) -> tuple[str, str]:
        """One commit on the base whose tree is the base tree with ``files`` replaced.

        Built in a temporary index file, so the user's index and checkout stay untouched;
        the branch is force-updated when it exists. Returns (branch, sha).
        """
        rel = _check_rel(target_rel, "target folder")
        branch = self.pull_branch(target)
        base_tree = self.repo.commit(self.base_commit).tree
        cacheinfo: list[str] = []
        for name, text in files.items():
            path = str(_in_repo(rel, name, f"file of {target}"))
            data = text.encode()
            binsha = self.repo.odb.store(IStream("blob", len(data), BytesIO(data))).binsha
            try:
                mode = base_tree[path].mode  # keep an executable bit
            except KeyError:
                mode = 0o100644
            cacheinfo += ["--cacheinfo", f"{mode:o},{binsha.hex()},{path}"]
        with tempfile.TemporaryDirectory(dir=self.state_dir) as tmp:
            env = {"GIT_INDEX_FILE": str(Path(tmp) / "index")}
            self._git("read-tree", self.base_commit, env=env)
            if cacheinfo:
                self._git("update-index", "--add", *cacheinfo, env=env)
            tree = self._git("write-tree", env=env)
        sha = self._git("commit-tree", tree, "-p", self.base_commit, "-m", message)
        self._git("update-ref", "-m", "optimizer: pull branch", self._ref(branch), sha)
        self._remember(target, rel, files)
        return branch, sha

    def push(self, remote: str, branches: Iterable[str]) -> None:
        """Force-push branches (annotate rewrites tips) to ``remote``."""
        specs = [f"+{self._ref(b)}:{self._ref(b)}" for b in branches]
        if not specs:
            return
        try:
            self._git("push", "--quiet", remote, *specs)
        except git.GitCommandError as exc:
            raise WorkspaceError(
                f"git push to {remote!r} failed: {str(exc.stderr).strip()}; check the remote "
                "name (`git remote -v`) and your credentials"
            ) from exc

    # -- housekeeping --------------------------------------------------------------------

    def branches(self, experiment: str | None = None) -> list[str]:
        """Candidate and pull branches, of one experiment or of all."""
        if experiment is None:
            return sorted(self._refs(BRANCH_ROOT))
        _check_name("experiment", experiment)
        found = self._refs(f"{BRANCH_ROOT}/{experiment}") + self._refs(
            f"{PULL_PREFIX}/{experiment}"
        )
        return sorted(found)

    def prune(self, experiment: str | None = None, keep_pull: bool = True) -> int:
        """Delete candidate branches (and pull branches unless ``keep_pull``) and worktrees.

        Returns the number of branches deleted.
        """
        root = self.worktree_root if experiment is None else self.worktree_root / experiment
        # Deleting the folders and pruning once is one git call instead of one per worktree.
        if root.exists():
            shutil.rmtree(root)
        self.worktree_root.mkdir(parents=True, exist_ok=True)
        self._git("worktree", "prune")
        doomed = [
            b
            for b in self.branches(experiment)
            if not (keep_pull and b.startswith(f"{PULL_PREFIX}/"))
        ]
        for start in range(0, len(doomed), 200):  # bounded command lines
            self._git("branch", "--quiet", "-D", *doomed[start : start + 200])
        return len(doomed)

    def describe(self) -> dict[str, Any]:
        """What this workspace points at (for logs and the report)."""
        return {
            "repo_root": str(self.repo_root),
            "base_commit": self.base_commit,
            "experiment": self.experiment,
            "state_dir": str(self.state_dir),
        }
