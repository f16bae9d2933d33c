"""``optimizer publish``: a night's pull branches pushed for review on the team's forge.

Each pull branch (``optimizer/pr/<experiment>/<target>``, one commit on the base whose
message is the pull-request text) is force-pushed to the remote as it is, and a PR body is
written beside the night's reports (``<state_dir>/reports/pr/<experiment>-<target>.md``):
the title, the evidence as a table (each metric of the seed and of the candidate), the
diff's summary (files and lines changed, then the diff itself) and how to reproduce the
measurement. Where ``gh`` (GitHub) or ``glab`` (GitLab) is on PATH, the exact command that
opens the pull request is printed; ``--open`` runs it.
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import tomllib
from dataclasses import dataclass
from pathlib import Path

from optimizer.errors import ConfigError, WorkspaceError

PULL_PREFIX = "optimizer/pr"
_METRIC = re.compile(r"^- (?P<name>[^:]+): (?P<seed>\S+) -> (?P<cand>\S+)$")


@dataclass(frozen=True)
class PullRequest:
    """One pull branch ready for review: where it goes and what it says."""

    branch: str
    experiment: str
    target: str
    title: str
    body: str  # markdown
    body_file: Path
    command: tuple[str, ...] = ()  # opens the pull request (gh or glab), when one is here


def _git(repo: Path, *args: str) -> str:
    proc = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True)
    if proc.returncode != 0:
        raise WorkspaceError(f"git {' '.join(args[:3])} failed: {proc.stderr.strip()}")
    return proc.stdout


def pull_branches(repo: Path, experiment: str | None = None) -> list[str]:
    """The pull branches in ``repo`` (of ``experiment`` only, when given), sorted."""
    prefix = f"refs/heads/{PULL_PREFIX}/" + (f"{experiment}/" if experiment else "")
    out = _git(repo, "for-each-ref", "--format=%(refname)", prefix)
    return sorted(line.removeprefix("refs/heads/") for line in out.splitlines() if line)


def evidence_table(message: str) -> str:
    """The "## Metrics (seed -> candidate)" lines of a pull-branch message as a table."""
    rows, inside = [], False
    for line in message.splitlines():
        if line.startswith("## "):
            inside = line.startswith("## Metrics")
            continue
        m = _METRIC.match(line.strip()) if inside else None
        if m:
            seed, cand = m["seed"], m["cand"]
            try:
                change = f"{float(cand) / float(seed):.3g}x" if float(seed) else "-"
            except ValueError:
                change = "-"
            rows.append(f"| {m['name']} | {seed} | {cand} | {change} |")
    if not rows:
        return ""
    return "| metric | seed | candidate | candidate / seed |\n|---|---:|---:|---:|\n" + \
        "\n".join(rows)


def _section(message: str, heading: str) -> str:
    out, inside = [], False
    for line in message.splitlines():
        if line.startswith("## "):
            inside = line[3:].startswith(heading)
            continue
        if inside:
            out.append(line)
    return "\n".join(out).strip()


def target_folder(repo: Path, commit: str, name: str) -> str | None:
    """The folder (relative to the repository) of the target ``name`` at ``commit``."""
    listing = _git(repo, "ls-tree", "-r", "--name-only", commit)
    for path in listing.splitlines():
        if path == "target.toml" or path.endswith("/target.toml"):
            try:
                data = tomllib.loads(_git(repo, "show", f"{commit}:{path}"))
            except (tomllib.TOMLDecodeError, WorkspaceError):
                continue
            if data.get("name") == name:
                return str(Path(path).parent)
    return None


def pr_body(repo: Path, branch: str, remote: str) -> tuple[str, str]:
    """(title, markdown body) of the pull request of ``branch``."""
    message = _git(repo, "log", "-1", "--format=%B", branch).strip()
    title, _, rest = message.partition("\n")
    _, experiment, target = branch.rsplit("/", 2)
    stat = _git(repo, "diff", "--stat", f"{branch}^", branch).rstrip()
    diff = _git(repo, "diff", "--no-color", f"{branch}^", branch).rstrip()
    folder = target_folder(repo, f"{branch}^", target) or f"<the folder of target {target}>"
    parts = [f"# {title}", ""]
    intro = rest.strip().split("\n## ", 1)[0].strip()
    if intro:
        parts += [intro, ""]
    evidence = _section(message, "Evidence")
    parts += ["## Evidence", ""]
    if evidence:
        parts += [evidence, ""]
    table = evidence_table(message)
    if table:
        parts += [table, ""]
    parts += ["## The change", "", "```", stat, "```", "", "<details><summary>diff</summary>",
              "", "```diff", diff, "```", "", "</details>", ""]
    parts += [
        "## How to reproduce", "",
        "```sh",
        f"git fetch {remote} {branch}",
        f"git switch --detach FETCH_HEAD   # the pull branch: one commit on {experiment}'s base",
        f"optimizer evaluate {folder}      # the changed code, checked and measured",
        "git switch --detach HEAD^",
        f"optimizer evaluate {folder}      # the code before, on the same machine",
        "```", "",
    ]
    for heading in ("Lineage", "Records", "Minimised", "Knobs", "Held-out"):
        text = _section(message, heading)
        if text:
            parts += [f"## {heading}", "", text, ""]
    return title, "\n".join(parts).rstrip() + "\n"


def forge_command(title: str, body_file: Path, branch: str, base: str | None,
                  which: str | None = None) -> tuple[str, ...]:
    """The command that opens the pull request with ``gh`` or ``glab`` (whichever is on
    PATH, ``which`` to choose); () when neither is. glab takes the body itself."""
    tools = [which] if which else ["gh", "glab"]
    for tool in tools:
        if tool and shutil.which(tool):
            if tool == "gh":
                cmd = ["gh", "pr", "create", "--head", branch, "--title", title,
                       "--body-file", str(body_file)]
                return tuple(cmd + (["--base", base] if base else []))
            cmd = ["glab", "mr", "create", "--source-branch", branch, "--title", title,
                   "--description", body_file.read_text(), "--yes"]
            return tuple(cmd + (["--target-branch", base] if base else []))
    return ()


def shown(command: tuple[str, ...], body_file: Path) -> str:
    """``command`` as one shell line (a body given inline reads from its file)."""
    body = body_file.read_text() if body_file.is_file() else None
    return " ".join(f'"$(cat {shlex.quote(str(body_file))})"' if a == body
                    else shlex.quote(a) for a in command)


def publish(repo: Path, *, remote: str, reports: Path, experiment: str | None = None,
            base: str | None = None, push: bool = True) -> list[PullRequest]:
    """Push every pull branch (of ``experiment``) to ``remote`` and write its PR body under
    ``reports``; returns what was published. Nothing is pushed when a branch is missing
    or the remote is unknown (exit 2 from the command line)."""
    remotes = _git(repo, "remote").split()
    if remote not in remotes:
        raise ConfigError(f"no git remote named {remote!r} in {repo} (remotes: "
                          f"{', '.join(remotes) or 'none'}); add one with `git remote add "
                          f"{remote} URL` or pass --remote NAME")
    branches = pull_branches(repo, experiment)
    if not branches:
        which = f" of experiment {experiment!r}" if experiment else ""
        raise ConfigError(f"no pull branches{which} in {repo}: a night leaves "
                          f"{PULL_PREFIX}/<experiment>/<target> for each winner; run "
                          "`optimizer run` first (or `optimizer branches` to see what is there)")
    out = []
    (reports / "pr").mkdir(parents=True, exist_ok=True)
    for branch in branches:
        _, exp, target = branch.rsplit("/", 2)
        title, body = pr_body(repo, branch, remote)
        body_file = reports / "pr" / f"{exp}-{target}.md"
        body_file.write_text(body)
        out.append(PullRequest(branch, exp, target, title, body, body_file,
                               forge_command(title, body_file, branch, base)))
    if push:
        specs = [f"+refs/heads/{b}:refs/heads/{b}" for b in branches]
        proc = subprocess.run(["git", "-C", str(repo), "push", "--quiet", remote, *specs],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            raise WorkspaceError(f"git push to {remote!r} failed: {proc.stderr.strip()}; "
                                 "check the remote (`git remote -v`) and your credentials")
    return out
