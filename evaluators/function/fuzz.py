"""Differential fuzzing for the function kind: inputs drawn from the target's declared domain.

A target's ``evaluate.py`` may declare, beside its reference::

    def fuzz_domain() -> dict[str, hypothesis.strategies.SearchStrategy]:
        # function name -> a strategy of argument tuples (the domain of its inputs)
    def fuzz_check(name: str, args: tuple, result) -> None:
        # the trusted verdict on one answer: AssertionError says what is wrong

The harness draws inputs from each strategy with Hypothesis (its generation tries simple
and extreme values first: zero, one, the bounds, empty, special values), calls the
candidate's function across the boundary and checks every answer; the first wrong answer
(or exception) is a wrong answer whose reason names the input. Examples are drawn from the
evaluation's hidden seed, so every evaluation sees new ones: a small budget per candidate,
a large one before a pull branch is published.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from evaluators.function.harness import CandidateError


def describe(args: tuple[Any, ...]) -> str:
    """A short, readable form of an input (arrays by shape, dtype and a few values)."""
    parts = []
    for a in args:
        shape, dtype = getattr(a, "shape", None), getattr(a, "dtype", None)
        if shape is not None and dtype is not None:
            flat = a.reshape(-1)[:4].tolist() if a.size else []
            parts.append(f"array{tuple(shape)} {dtype} starting {flat}")
        else:
            parts.append(repr(a)[:80])
    return "(" + ", ".join(parts) + ")"


def fuzz(
    module: Any,
    domains: Mapping[str, Any],
    check: Callable[[str, tuple[Any, ...], Any], None],
    *,
    budget: int,
    seed: int,
    shrink: bool = False,
) -> int:
    """Check ``budget`` drawn inputs per declared function; returns how many were checked.
    Raises AssertionError naming the input when an answer is wrong or the call raises."""
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as hypothesis_seed
    from hypothesis.errors import HypothesisException

    if budget <= 0:
        return 0
    checked = 0
    phases = [Phase.explicit, Phase.generate] + ([Phase.shrink] if shrink else [])
    for name, strategy in domains.items():
        fn = getattr(module, name, None)
        if fn is None:
            raise AssertionError(f"the program defines no {name}()")

        def one(args: tuple[Any, ...], fn: Any = fn, name: str = name) -> None:
            nonlocal checked
            checked += 1
            try:
                result = fn(*args)
            except CandidateError as exc:
                raise AssertionError(f"{exc} on {name}{describe(args)}") from None
            try:
                check(name, args, result)
            except AssertionError as exc:
                raise AssertionError(f"{exc} on {name}{describe(args)}") from None

        prop = settings(max_examples=budget, deadline=None, database=None, phases=phases,
                        suppress_health_check=list(HealthCheck), print_blob=False)(
            hypothesis_seed(seed)(given(strategy)(lambda args: one(args))))
        try:
            prop()
        except HypothesisException as exc:  # e.g. Flaky: the same input answered two ways
            raise AssertionError(f"{name}(): {type(exc).__name__}: {str(exc)[:800]}") from None
    return checked
