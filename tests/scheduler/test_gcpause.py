"""Holding the cycle collector during preparation leaves it as it was, whatever happens inside."""

from __future__ import annotations

import dataclasses
import gc

import pytest

from scheduler.benchgen import bench_request
from scheduler.errors import InvalidInputError
from scheduler.gcpause import collector_paused
from scheduler.policies.problem import build_problem
from scheduler.validation import validate_request


def test_the_collector_is_held_inside_and_enabled_again_after() -> None:
    assert gc.isenabled()
    with collector_paused():
        assert not gc.isenabled()
    assert gc.isenabled()


def test_a_collector_disabled_by_the_caller_stays_disabled() -> None:
    gc.disable()
    try:
        with collector_paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_a_rejected_request_leaves_the_collector_enabled() -> None:
    request = dataclasses.replace(bench_request(64, 4, 0), time_budget_s=float("nan"))
    with pytest.raises(InvalidInputError):
        validate_request(request)
    assert gc.isenabled()
    build_problem(bench_request(64, 4, 0))
    assert gc.isenabled()
