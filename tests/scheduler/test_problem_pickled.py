"""A ``Problem`` pickles, copies and deep-copies as its fields, with fresh memos, even after a plan
has asked its draws and plays.

Why. A problem holds locks (``Problem.seeding``, each kept ``SeededDraws``'), which cannot be
pickled: with ``seeding`` (sched53) no problem could be pickled or deep-copied at all, and before
it none whose draws had been asked. Nothing ships a problem to a process today (the replay's pool
ships batches as columns and each worker builds its own problem), but a ``Problem`` is a frozen
value and reads as one that a pool may carry; its memos are one plan's caches, rebuilt as asked.
"""

from __future__ import annotations

import copy
import pickle
from collections.abc import Callable

import numpy as np
import pytest

from scheduler.benchgen import bench_request
from scheduler.policies.plan_draws import Spread
from scheduler.policies.problem import Problem, build_problem

COPIES: dict[str, Callable[[Problem], Problem]] = {
    "pickle": lambda p: pickle.loads(pickle.dumps(p)),
    "copy": copy.copy,
    "deepcopy": copy.deepcopy,
}


def _used_problem() -> tuple[Problem, Spread]:
    """A problem whose memos a plan has filled: its draws asked, a queue played."""
    problem = build_problem(bench_request(64, 2, 0))
    units = len(problem.units)
    spread = (np.full(units, 500.0), np.full(units, 0.5), np.full(units, 4_096.0))
    problem.draws(spread, 0).rows(4)
    problem.played(problem.costs[0], tuple(range(8)), False)
    assert (len(problem.seeded), len(problem.plays)) == (1, 1)
    return problem, spread


@pytest.mark.parametrize("how", sorted(COPIES))
def test_a_used_problem_copies_as_its_fields_with_fresh_memos(how: str) -> None:
    problem, spread = _used_problem()
    copied = COPIES[how](problem)
    assert copied == problem
    assert (copied.plays, copied.at_once, copied.seeded) == ({}, {}, {})
    assert copied.seeding is not problem.seeding
    assert np.array_equal(copied.draws(spread, 0).rows(4), problem.draws(spread, 0).rows(4))
