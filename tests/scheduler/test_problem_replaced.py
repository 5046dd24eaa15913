"""A ``Problem`` replaced with another batch's fields (``dataclasses.replace``) is that batch's problem:
nothing a replace carries over still describes the first batch, and the lower bound's columns reach
the bound from the build itself, never from a problem.

Why. The bound's columns (``scheduler.batch_columns``) were a field of the problem (bound52): a
replace with other trajectories' prompts and steps kept the first batch's columns, and a bound read
from them would have been the first batch's (docs/experiments.md, review52d). Nothing replaces a
problem's batch today; the columns now come beside the problem (``problem_and_bound_columns``), so
no later replace can make them stale.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from scheduler import batch_columns
from scheduler.benchgen import bench_request
from scheduler.policies.problem import Problem, build_problem, problem_and_bound_columns

BATCH_FIELDS = ("prompts", "steps", "units", "ranked", "unrestricted", "kv_steps")  # per trajectory


def _same(mine: object, theirs: object) -> bool:
    """Equal values, arrays compared element by element, inside tuples too."""
    if isinstance(mine, np.ndarray) or isinstance(theirs, np.ndarray):
        return bool(np.array_equal(np.asarray(mine), np.asarray(theirs)))
    if isinstance(mine, tuple) and isinstance(theirs, tuple):
        return len(mine) == len(theirs) and all(_same(a, b) for a, b in zip(mine, theirs, strict=True))
    return mine == theirs


def test_a_problem_replaced_with_another_batchs_fields_carries_nothing_of_its_own_batch() -> None:
    first, second = build_problem(bench_request(256, 4, 0)), build_problem(bench_request(256, 4, 1))
    assert not _same(first.prompts, second.prompts)
    replaced = dataclasses.replace(first, **{name: getattr(second, name) for name in BATCH_FIELDS})
    carried = [field.name for field in dataclasses.fields(Problem) if field.init]
    assert [name for name in carried if not _same(getattr(replaced, name), getattr(second, name))] == []


def test_the_bound_columns_built_beside_a_problem_are_its_requests_own() -> None:
    for seed in range(2):
        request = bench_request(256, 4, seed)
        problem, columns = problem_and_bound_columns(request)
        assert _same(tuple(columns), tuple(batch_columns.from_trajectories(request.trajectories)))
        assert problem == build_problem(request)
