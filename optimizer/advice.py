"""What gives a search room when its proposer runs dry.

The offline proposer re-tunes the knobs a program declares and mutates the numeric
constants and operators inside its editable regions; a program with no knobs and few
such sites soon has nothing new to offer, and the night stops the target after a run of
duplicate proposals. Stopping is right; the summary then says why and what would help,
from what the target itself declares:

    stopped early: 40 duplicate proposals in a row (the offline proposer had nothing new
    to try: the program declares no knobs and the target no other starts). What would
    help: declare knobs ..., add starts ..., or propose with an LLM ...
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from optimizer.targets import TargetSpec


def knob_count(files: Mapping[str, str]) -> int:
    """Knobs the program's Python files declare (a file that does not parse counts 0)."""
    try:
        from optimizer.knobs import parse_knobs
    except ImportError:  # pragma: no cover - the engine always has it
        return 0
    count = 0
    for path, source in files.items():
        if not path.endswith(".py"):
            continue
        try:
            count += len(parse_knobs(source, path))
        except Exception:  # noqa: BLE001 - a broken declaration declares nothing usable
            continue
    return count


def dry_run_advice(target: TargetSpec, files: Mapping[str, str],
                   proposers: Iterable[str]) -> str:
    """Why the target's proposals ran dry and what would give the search room ("" when
    nothing applies). ``files`` is the program searched from (the seed's), ``proposers``
    the names of the proposers that made its candidates."""
    names = {p.split(":")[0] for p in proposers if p}
    offline = not names or names <= {"offline", "seed", "start"}
    knobs = knob_count(files)
    why = []
    if offline:
        why.append("the offline proposer had nothing new to try")
    if knobs == 0:
        why.append("the program declares no knobs")
    elif knobs < 3:
        why.append(f"the program declares only {knobs} knob{'s' if knobs > 1 else ''}")
    if not target.starts:
        why.append("the target has no other starting programs")
    helps = []
    if knobs < 3:
        helps.append("declare the numbers worth tuning as knobs in the editable code "
                     "(`BLOCK = 64  # knob: choices=[32, 64, 128]`, "
                     "`WEIGHT = 0.5  # knob: float 0.0..4.0`)")
    if not target.starts:
        helps.append("add other starting programs to target.toml "
                     "(`starts = [\"variants/other.py\"]`)")
    if offline:
        helps.append("propose rewrites with an LLM behind any OpenAI-compatible endpoint "
                     "(`optimizer run --proposer llm --llm-base-url URL --llm-model NAME`)")
    if not helps:
        return ""
    return (f" ({'; '.join(why)})" if why else "") + ". What would help: " + \
        "; ".join(helps)
