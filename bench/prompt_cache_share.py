"""How much of each LLM prompt a provider's prompt cache can serve: a simulated night.

For every built-in target (each folder under targets/ with a target.toml, its real seed
files and trusted reference), the script plays a night of ``--calls`` proposals through the
real prompt builder (``optimizer.proposers.prompt.PromptBook``) and the engine's real
``Archive`` (parents mostly the best, sometimes any valid candidate; inspirations best and
diverse; feedback the most recent candidates). No model is called: each "answer" is a
scripted edit of 1-6 lines inside the parent's EVOLVE-BLOCK, and each outcome is drawn from
a scripted mix of states with realistic reasons and artifacts (validation reports, compile
logs, rejected edits naming the closest lines, timeouts, duplicates).

Tokens are counted as characters / 4 (no tokenizer is needed, and every ratio below is a
ratio of characters anyway). Reported per target and overall:

* ``prefix_share``: the identical prefix of successive calls' prompts (system + user text)
  as a share of the later prompt; mean and min over the night's successive pairs;
* ``cache_hit_share``: the share of all prompt tokens a provider cache would serve, counted
  as OpenAI documents it: the longest prefix shared with any earlier call of the target,
  in whole blocks of 128 tokens, and nothing for a prefix under 1,024 tokens.

Usage::

    .venv/bin/python bench/prompt_cache_share.py --calls 40 \
        --json bench/results/prompt-cache-share.json
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import random
import re
import statistics
import sys
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script from anywhere
    sys.path.insert(0, str(ROOT))

import evaluators  # noqa: E402
from optimizer.archive import Archive  # noqa: E402
from optimizer.config import LLMConfig  # noqa: E402
from optimizer.edits import evolve_regions  # noqa: E402
from optimizer.knobs import Knob, knobs_of_files, structure_key, values_of  # noqa: E402
from optimizer.proposers._base import ProposalContext  # noqa: E402
from optimizer.proposers.prompt import PromptBook  # noqa: E402
from optimizer.records import ArchiveEntry, CandidateState  # noqa: E402
from optimizer.targets import TargetSpec, load_target  # noqa: E402

CHARS_PER_TOKEN = 4
CACHE_MIN_TOKENS = 1024  # OpenAI caches prompts from 1,024 tokens on ...
CACHE_BLOCK_TOKENS = 128  # ... in increments of 128 tokens

# The scripted mix of outcomes: a state, its weight, and how it reads in the feedback.
_OUTCOMES: tuple[tuple[CandidateState | None, float], ...] = (
    (CandidateState.VALID, 0.45),
    (CandidateState.INVALID, 0.18),
    (CandidateState.FAILED, 0.10),
    (CandidateState.REJECTED, 0.15),
    (CandidateState.TIMEOUT, 0.05),
    (None, 0.07),  # a duplicate of an earlier candidate: not added to the archive
)
_SUMMARIES = (
    "fuse the two passes over the row into one online pass",
    "larger block with more warps so that one program covers a whole row",
    "hoist the reciprocal out of the inner loop and multiply instead of dividing",
    "weigh cache affinity by the queued tokens instead of the request count",
    "declare the tile sizes as knobs and let the search pick them",
    "vectorise the loads: each program reads contiguous chunks of 8 elements",
    "skip the second normalisation pass when the row fits in one block",
    "break ties by the replica with the shortest queue, not the lowest index",
)


def all_targets(root: Path = ROOT) -> list[TargetSpec]:
    """Every built-in target, in path order."""
    return [
        load_target(toml.parent, root) for toml in sorted((root / "targets").rglob("target.toml"))
    ]


_MARK = re.compile(r"(  # c\d{4}: changed| \[c\d{4}\])$")
_ADDED = re.compile(r"# c\d{4}: a new step goes here")


def _mutate(files: dict[str, str], cid: str, rng: random.Random) -> dict[str, str]:
    """Edit 1-6 consecutive lines inside one EVOLVE-BLOCK, as a model's answer would."""
    path = rng.choice(sorted(files))
    source = files[path]
    lines = source.splitlines(keepends=True)
    starts, pos = [], 0
    for line in lines:
        starts.append(pos)
        pos += len(line)
    inside = [
        i
        for i, at in enumerate(starts)
        if any(a <= at < b for a, b in evolve_regions(source)) and lines[i].strip()
    ]
    if not inside:
        return dict(files)
    first = rng.choice(inside)
    # Most answers change a few lines; one in seven rewrites a larger part of the block.
    size = rng.randint(8, 24) if rng.random() < 0.15 else rng.randint(1, 6)
    span = [i for i in inside if first <= i < first + size]
    new = list(lines)
    # Comments only, so that the code still parses and the knobs still read; an earlier
    # simulated change on the same line is replaced, not added to, so that files keep their
    # size over generations as real rewrites do.
    for i in span:
        body = _MARK.sub("", lines[i].rstrip("\n"))
        indent = body[: len(body) - len(body.lstrip())]
        if _ADDED.fullmatch(body.strip()):
            new[i] = ""  # a line an ancestor added is taken out again
        elif "knob:" in body:
            continue  # declarations stay readable (the search changes their values anyway)
        elif "#" in body:
            new[i] = f"{body} [{cid}]\n"
        else:
            new[i] = f"{body}  # {cid}: changed\n"
    if rng.random() < 0.4:  # an inserted line or two
        new[span[-1]] += f"{indent}# {cid}: a new step goes here\n" * rng.randint(1, 2)
    return {**files, path: "".join(new)}


def _knob_value(knob: Knob, rng: random.Random) -> Any:
    if knob.kind == "choices":
        return rng.choice(knob.choices or (knob.default,))
    assert knob.low is not None and knob.high is not None
    if knob.kind == "int":
        return rng.randint(int(knob.low), int(knob.high))
    return round(rng.uniform(float(knob.low), float(knob.high)), 4)


def _outcome(
    state: CandidateState, target: TargetSpec, parent: ArchiveEntry, rng: random.Random
) -> tuple[str, dict[str, float], dict[str, str]]:
    """(reason, metrics, artifacts) for a scripted outcome."""
    metric = target.primary.metric
    file = target.editable[0]
    if state is CandidateState.VALID:
        factor = math.exp(rng.gauss(-0.01, 0.06))  # some better, most within noise
        value = parent.objectives[0] * (factor if target.primary.minimize else 1 / factor)
        return "", {metric: value, "spread": abs(rng.gauss(0, 0.02))}, {}
    if state is CandidateState.INVALID:
        rows = "\n".join(
            f"- w{i} ({s}), inputs '{d}', output 0: ok, rel. norm error {rng.uniform(1, 9):.2e}"
            for i, (s, d) in enumerate(
                [("4096x4096 bf16", "normal"), ("1x131072 fp32", "large_offset")]
            )
        )
        reason = (
            f"w2 (8192x1024 fp16), inputs 'extreme', output 0: rel. norm error "
            f"{rng.uniform(1, 9):.1e}-02 above 1.6e-02; 12 elements above the per-element bound"
        )
        return reason, {}, {"validation.md": f"{rows}\n- FAILED: {reason}"}
    if state is CandidateState.FAILED:
        line = rng.randint(20, 60)
        log = (
            "Traceback (most recent call last):\n"
            f'  File "{file}", line {line}, in <module>\n'
            "    out = entry(*inputs)\n"
            f'  File "{file}", line {line + 7}, in entry\n'
            "    return _kernel[grid](x, y, n, BLOCK=BLOCK, num_warps=NUM_WARPS)\n"
            "CompilationError: at 14:8: arange's range must be a power of 2 (got 96)\n"
        )
        return f"the candidate crashed: CompilationError at {file}:{line}", {}, {"stderr.txt": log}
    if state is CandidateState.REJECTED:
        a = rng.randint(10, 40)
        return (
            (
                f"edit rejected: {file}: SEARCH block 1 does not occur exactly once in the parent; "
                f"the closest text is lines {a}-{a + 3} ({rng.randint(80, 97)}% similar): "
                "indentation differs on the second line"
            ),
            {},
            {},
        )
    assert state is CandidateState.TIMEOUT
    return f"killed after {target.timeout_s:g} s (wall-clock limit)", {}, {}


@dataclass(frozen=True)
class Night:
    target: str
    prompts: tuple[str, ...]  # system + user text of each call, in order
    system_chars: int
    parent_kept: tuple[bool, ...]  # per call after the first: same parent as the call before


def simulate(
    target: TargetSpec, calls: int, seed: int = 0, settings: LLMConfig | None = None
) -> Night:
    """Play ``calls`` proposals for ``target`` and return the prompts that would be sent."""
    rng = random.Random(f"{seed}/{target.name}")
    book = PromptBook(settings or LLMConfig())
    files = target.seed_files()
    seed_entry = ArchiveEntry(
        "c0000", None, files, values_of(files), CandidateState.VALID,
        metrics={target.primary.metric: 1.0}, objectives=(1.0,), summary="the seed",
    )  # fmt: skip
    archive = Archive(target)
    archive.add(seed_entry, structure_key(files), "seed")
    evaluator = evaluators.get(target.kind)(target)  # the kind's own prompt text and files
    kind_text, trusted = evaluator.prompt_text(), evaluator.prompt_files()
    prompts: list[str] = []
    parents: list[str] = []
    states = [s for s, _ in _OUTCOMES]
    weights = [w for _, w in _OUTCOMES]
    for i in range(calls):
        parent = archive.pick_parent(rng)
        ctx = ProposalContext(
            target=target,
            parent=parent,
            seed=seed_entry,
            inspirations=archive.inspirations(parent, rng),
            feedback=archive.feedback(),
            iteration=i,
            structures_seen=archive.structures(),
            kind_text=kind_text,
            trusted_files=trusted,
        )
        messages = book.messages(ctx)
        prompts.append("".join(m["content"] for m in messages))
        parents.append(parent.id)
        state = rng.choices(states, weights)[0]
        if state is None:
            continue  # a duplicate: the loop skips it; the next prompt sees the same archive
        cid = f"c{len(archive.entries):04d}"
        child = _mutate(dict(parent.files), cid, rng)
        reason, metrics, artifacts = _outcome(state, target, parent, rng)
        knobs = {n: _knob_value(k, rng) for n, k in knobs_of_files(child).items()}
        objective = (metrics[target.primary.metric],) if metrics else ()
        entry = ArchiveEntry(
            cid, parent.id, child, knobs if state is not CandidateState.REJECTED else {}, state,
            reason, metrics, objective, artifacts, rng.choice(_SUMMARIES), "llm:gpt-5-mini",
        )  # fmt: skip
        structure = "rejected" if state is CandidateState.REJECTED else structure_key(child)
        archive.add(entry, structure, cid)
    system = len(book.messages(ctx)[0]["content"])
    kept = tuple(a == b for a, b in zip(parents, parents[1:], strict=False))
    return Night(target.name, tuple(prompts), system, kept)


def common_prefix(a: str, b: str) -> int:
    n = min(len(a), len(b))
    lo, hi = 0, n  # binary search on slices: C-speed comparisons instead of a Python loop
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def prefix_shares(prompts: tuple[str, ...] | list[str]) -> list[float]:
    """Identical prefix of each call with the call before, as a share of the later call."""
    return [common_prefix(a, b) / len(b) for a, b in zip(prompts, prompts[1:], strict=False)]


def cached_tokens(prompt: str, earlier: list[str]) -> int:
    """Tokens a provider cache serves for ``prompt`` after ``earlier`` calls (see docstring)."""
    shared = max((common_prefix(prompt, e) for e in earlier), default=0) // CHARS_PER_TOKEN
    if shared < CACHE_MIN_TOKENS:
        return 0
    return shared // CACHE_BLOCK_TOKENS * CACHE_BLOCK_TOKENS


def measure(night: Night) -> dict[str, Any]:
    shares = prefix_shares(night.prompts)
    kept = [s for s, k in zip(shares, night.parent_kept, strict=True) if k]
    moved = [s for s, k in zip(shares, night.parent_kept, strict=True) if not k]
    tokens = [len(p) // CHARS_PER_TOKEN for p in night.prompts]
    cached = [cached_tokens(p, list(night.prompts[:i])) for i, p in enumerate(night.prompts)]
    return {
        "calls": len(night.prompts),
        "system_tokens": night.system_chars // CHARS_PER_TOKEN,
        "prompt_tokens_mean": round(statistics.mean(tokens)),
        "prompt_tokens_max": max(tokens),
        "prefix_share_mean": round(statistics.mean(shares), 4),
        "prefix_share_min": round(min(shares), 4),
        "prefix_share_parent_kept": round(statistics.mean(kept), 4) if kept else None,
        "prefix_share_parent_changed": round(statistics.mean(moved), 4) if moved else None,
        "parent_kept_share": round(len(kept) / len(shares), 3),
        "cache_hit_share": round(sum(cached) / sum(tokens), 4),
        "_shares": shares,
        "_cached": sum(cached),
        "_tokens": sum(tokens),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=40, help="proposals per target")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, help="write the results here")
    args = parser.parse_args(argv)
    per_target: dict[str, dict[str, Any]] = {}
    for target in all_targets():
        row = measure(simulate(target, args.calls, args.seed))
        per_target[target.name] = row
        print(
            f"{target.name:22s} prompt {row['prompt_tokens_mean']:5d} tok "
            f"(system {row['system_tokens']:5d})  prefix share mean "
            f"{row['prefix_share_mean']:.3f} min {row['prefix_share_min']:.3f} "
            f"(kept {row['prefix_share_parent_kept']:.3f}, changed "
            f"{row['prefix_share_parent_changed']:.3f}, kept {row['parent_kept_share']:.0%})  "
            f"cache hit {row['cache_hit_share']:.3f}"
        )
    shares = [s for row in per_target.values() for s in row.pop("_shares")]
    cached = sum(row.pop("_cached") for row in per_target.values())
    tokens = sum(row.pop("_tokens") for row in per_target.values())
    overall = {
        "targets": len(per_target),
        "prefix_share_mean": round(statistics.mean(shares), 4),
        "prefix_share_min": round(min(shares), 4),
        "prefix_share_target_means_min": min(r["prefix_share_mean"] for r in per_target.values()),
        "cache_hit_share": round(cached / tokens, 4),
    }
    print(
        f"overall: prefix share mean {overall['prefix_share_mean']:.3f} "
        f"min {overall['prefix_share_min']:.3f}; cache hit {overall['cache_hit_share']:.3f}"
    )
    if args.json:
        result = {
            "what": "identical prefix of successive LLM prompts per target over a simulated "
            "night (real prompt builder and archive, scripted answers and outcomes); tokens "
            "= characters / 4; cache hits counted in 128-token blocks from 1,024 tokens on",
            "command": f"python bench/prompt_cache_share.py --calls {args.calls} "
            f"--seed {args.seed} --json {args.json}",
            "platform": platform.platform(),
            "machine": platform.machine(),
            "python": platform.python_version(),
            "date": date.today().isoformat(),
            "calls_per_target": args.calls,
            "overall": overall,
            "per_target": per_target,
        }
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
