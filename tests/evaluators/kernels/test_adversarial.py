"""Kernels that game one check each are stopped by that check, with a reason that says so.

Inputs are fresh for every run (random hidden seed), as in the nightly.
"""

import importlib.util
from pathlib import Path

import pytest

from evaluators.kernels import NO_GPU
from evaluators.kernels.static_checks import check_source

_spec = importlib.util.spec_from_file_location(
    "adversarial_cases", Path(__file__).with_name("adversarial.py"))
cases = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(cases)


def test_the_honest_kernel_passes_correctness(kernel_eval):
    res = kernel_eval("softmax", cases.CORRECT)
    assert res.state.value == "PRUNED" and res.reason == NO_GPU, res.reason
    assert "cpu-fp32-7x33" in res.artifacts["validation.md"]


@pytest.mark.parametrize("name,state,phrase,source", cases.CASES, ids=[c[0] for c in cases.CASES])
def test_adversarial_kernel_is_caught(kernel_eval, name, state, phrase, source):
    res = kernel_eval("softmax", source)
    assert res.state.value == state, f"{name}: {res.state.value}: {res.reason}"
    assert phrase.lower() in res.reason.lower(), f"{name}: {res.reason}"


def test_there_are_at_least_fifteen_distinct_attacks():
    assert len({c[0] for c in cases.CASES}) >= 15
    runtime = [c for c in cases.CASES if c[1] == "INVALID"]
    assert len(runtime) >= 8  # caught by running, not only by reading the source


@pytest.mark.parametrize("name,state,phrase,source", cases.AUDIT_CASES,
                         ids=[c[0] for c in cases.AUDIT_CASES])
def test_torch_compute_hidden_from_the_static_check_is_caught_at_run_time(
        kernel_eval, name, state, phrase, source):
    # Two layers: the static check now refuses the by-name attribute reads these cases hide
    # behind; the runtime audit must catch them too, so it is run past the static check.
    assert all(f.rule == "forbidden" for f in check_source(source)), name
    res = kernel_eval("softmax", source, runtime_only=True)
    assert res.state.value == state, f"{name}: {res.state.value}: {res.reason}"
    assert phrase.lower() in res.reason.lower(), f"{name}: {res.reason}"
    assert res.stage == "correctness"


_RUNTIME = [c for c in cases.CASES if c[1] == "INVALID"] + list(cases.AUDIT_CASES)


@pytest.mark.parametrize("name,state,phrase,source", _RUNTIME, ids=[c[0] for c in _RUNTIME])
def test_kernels_caught_by_running_are_caught_in_a_session_too(kernel_eval, name, state,
                                                               phrase, source):
    # on a GPU an evaluation's calls share one process (a session): the checks that run
    # the kernel must judge alike there (poisoned allocations, trip wires, the audit)
    res = kernel_eval("softmax", source, runtime_only=True, in_session=True)
    assert res.state.value == state, f"{name}: {res.state.value}: {res.reason}"
    assert phrase.lower() in res.reason.lower(), f"{name}: {res.reason}"


def test_the_honest_kernel_passes_in_a_session(kernel_eval):
    res = kernel_eval("softmax", cases.CORRECT, in_session=True)
    assert res.state.value == "PRUNED" and res.reason == NO_GPU, res.reason
    assert "cpu-fp32-7x33" in res.artifacts["validation.md"]
    # where the check's time went: the process's start, and the child's own phases
    assert res.metrics["cost_s/check_start"] > 0
    assert res.metrics["cost_s/check_first_call"] > 0
    assert res.metrics["cost_s/check_first_call"] <= res.metrics["cost_s/check_call"]


def test_a_kernel_that_switches_poisoning_off_is_still_caught_by_running(kernel_eval):
    # past the static check (which refuses __closure__): the switch reached from the
    # candidate's forward leaves its unwritten column unpoisoned, and the comparison with
    # the float64 reference still fails it, in a session as in a plain call
    assert "cols < n_cols - 1" in cases.POISON_OFF
    for in_session in (False, True):
        res = kernel_eval("softmax", cases.POISON_OFF, runtime_only=True,
                          in_session=in_session)
        assert res.state.value == "INVALID", f"{in_session}: {res.state.value}: {res.reason}"
