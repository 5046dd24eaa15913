"""The bound's cheaper paths (bound52) give the floats the paths they replaced gave, to the last bit.

A kind's capacity at fixed lengths (``kindlimits.AtLengths``) keeps the makespan-free terms and finds
U and A's crossing in plain floats; the fluid searches of one bound share their lengths' layout, knots,
ranks and rows (``tailbound._FluidRows``); the planner's bound reads the problem's columns
(``batch_columns.from_arrays``). Each is checked here against what the bound computed before: the
capacity formula as it stood (numpy scalars, every term each call, copied below), a fresh set-up per
search, and the columns read from the trajectories.
"""

from __future__ import annotations

import dataclasses

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler import batch_columns, clock
from scheduler.benchgen import bench_request, with_speed_spread
from scheduler.costmodel import worker_cost
from scheduler.devices import device_profile, model_preset
from scheduler.kindlimits import AtLengths, KindLimits, _filling_root
from scheduler.lowerbound import RANK_TOLERANCE, _families, lower_bound
from scheduler.planner import prepare
from scheduler.stepsum import FloatArray
from scheduler.tailbound import _family, _FluidRows
from scheduler.types import Inventory, PlanRequest, Trajectory, Worker


def _crossing_before(lim: KindLimits, makespan_s: float) -> float:
    """``KindLimits._crossing(0, t)`` before bound52: the root through numpy's 0-d arrays."""
    slope = lim.step_s / lim.per_token_s
    budget = makespan_s / lim.per_token_s
    fill = max(0.0, (lim.capacity - lim.prompt_head) / lim.slots)
    b = lim.prompt_head - lim.slots / 2.0 + slope
    n = float(_filling_root(b, lim.slots, budget))
    if n > fill:
        n = (budget - lim.ramp(fill) + lim.capacity * fill) / (lim.capacity + slope)
    return max(0.0, n)


def _serves_before(
    lim: KindLimits,
    steps: FloatArray,
    makespan_s: float | FloatArray,
    crossing_n: float | FloatArray,
    rate: float,
) -> FloatArray:
    """``KindLimits._serves`` before bound52: every term, the ramp at each length included, each call."""
    alpha = rate * lim.per_token_s / lim.prefill_s
    chain = (makespan_s - lim.step_s * steps) / lim.per_token_s
    at_steps = alpha * chain + (1.0 - alpha) * np.minimum(lim._ramps(steps), chain)
    at_crossing = np.where(crossing_n > steps, lim._ramps(crossing_n), 0.0)
    out: FloatArray = np.maximum(0.0, np.maximum(at_steps, at_crossing))
    return out


limits = st.builds(
    KindLimits,
    step_s=st.floats(1e-4, 0.05),
    per_token_s=st.one_of(st.floats(1e-9, 1e-6), st.just(1e-19)),  # 1e-19: edge49's huge c / m
    prefill_s=st.floats(1e-6, 1e-3),
    capacity=st.floats(1.0, 4e6),
    slots=st.sampled_from([1, 2, 16, 256, 1024]),
    prompt_head=st.floats(0.0, 5e6),
)
lengths = st.lists(st.integers(1, 40_000), min_size=1, max_size=40).map(
    lambda xs: np.array(sorted(set(xs), reverse=True), dtype=np.float64)
)


@settings(max_examples=300, deadline=None)
@given(lim=limits, steps=lengths, makespans=st.lists(st.floats(1e-3, 2e3), min_size=1, max_size=6))
def test_a_kinds_capacity_at_fixed_lengths_is_the_formula_as_it_was_at_every_makespan_and_rate(
    lim: KindLimits, steps: FloatArray, makespans: list[float]
) -> None:
    at = AtLengths(lim, steps)
    for rate in (0.0, 0.5 * lim.prefill_s / lim.per_token_s, lim.prefill_s / lim.per_token_s):
        for t in makespans:  # one AtLengths asked again and again, as a search asks it
            assert lim.crossing(t) == _crossing_before(lim, t)
            before = _serves_before(lim, steps, t, _crossing_before(lim, t), rate)
            assert np.array_equal(at.serves(t, rate), before)
            assert np.array_equal(lim.serves_many(steps, t, rate), before)
        column = np.array(makespans)
        grid_before = _serves_before(lim, steps, column[:, None], lim._crossings(column[:, None]), rate)
        assert np.array_equal(at.serves_grid(column, rate), grid_before)
        assert np.array_equal(lim.serves_grid(steps, column, rate), grid_before)


@settings(max_examples=300, deadline=None)
@given(lim=limits, steps=lengths, makespans=st.lists(st.floats(1e-3, 2e3), min_size=1, max_size=6))
def test_a_kinds_capacity_at_many_makespans_at_once_is_its_capacity_at_each(
    lim: KindLimits, steps: FloatArray, makespans: list[float]
) -> None:
    """``serves_grid``'s row for a makespan is ``serves`` at that makespan, to the last bit: the grid
    finds U and A's crossing for the whole column at once (``_crossings``), past the cache's fill too."""
    at = AtLengths(lim, steps)
    column = np.array(makespans)
    assert np.array_equal(lim._crossings(column), [lim.crossing(t) for t in makespans])
    for rate in (0.0, 0.5 * lim.prefill_s / lim.per_token_s, lim.prefill_s / lim.per_token_s):
        grid = at.serves_grid(column, rate)
        for row, t in zip(grid, makespans, strict=True):
            assert np.array_equal(row, at.serves(t, rate))


def _rows_case(spread: float, seed: int) -> tuple[_FluidRows, FloatArray, FloatArray, float]:
    """A bench batch's fluid rows (speed groups where ``spread``), its demand, prompts and exchange."""
    request = with_speed_spread(bench_request(256, 8, seed), spread, seed)
    costs = [worker_cost(w, request.inventory.model) for w in request.inventory.workers]
    columns = batch_columns.from_trajectories(request.trajectories)
    outputs = columns.steps.astype(np.float64)
    work = columns.prompts * outputs + outputs * (outputs - 1.0) / 2.0
    heads = np.sort(columns.prompts)[::-1]
    families = [
        _family([(g[0], len(g)) for g in groups], heads) for groups in _families(costs, RANK_TOLERANCE)
    ]
    exchange = min(f.limits.prefill_s / f.limits.per_token_s for f in families)
    return _FluidRows(columns.steps, families), work, columns.prompts, exchange


@settings(max_examples=20, deadline=None)
@given(
    seed=st.integers(0, 1_000), spread=st.sampled_from([0.0, 0.1]), shares=st.permutations([0.0, 0.25, 1.0])
)
def test_rows_shared_by_a_bounds_searches_answer_as_rows_built_for_each_search(
    seed: int, spread: float, shares: list[float]
) -> None:
    shared, work, prompts, exchange = _rows_case(spread, seed)
    known = lower_bound(*_request_parts(seed, spread)).kv_s
    for share in shares:  # in any order: no search leaves anything behind for the next
        rate = share * exchange
        fresh = _rows_case(spread, seed)[0]
        for t in (0.8 * known, known, 1.3 * known):
            assert shared.gap(work + rate * prompts, rate)(t) == fresh.gap(work + rate * prompts, rate)(t)


def _request_parts(seed: int, spread: float) -> tuple[tuple[Trajectory, ...], Inventory]:
    request = with_speed_spread(bench_request(256, 8, seed), spread, seed)
    return request.trajectories, request.inventory


counts = st.one_of(st.integers(1, 2**62), st.integers(2**53 - 8, 2**53 + 8))  # past 2**53 a float rounds


@settings(max_examples=200, deadline=None)
@given(
    rows=st.lists(
        st.tuples(counts, counts, st.floats(0.0, 2**40)),
        min_size=1,
        max_size=30,
    )
)
def test_the_columns_from_the_problems_arrays_are_the_columns_read_from_the_trajectories(
    rows: list[tuple[int, int, float]],
) -> None:
    batch = [Trajectory(f"p{i}", 0, p, cap, q) for i, (p, cap, q) in enumerate(rows)]
    read = batch_columns.from_trajectories(batch)
    ints = [
        np.array(column, dtype=np.int64) for column in zip(*[(p, cap) for p, cap, _ in rows], strict=True)
    ]
    given_columns = batch_columns.from_arrays(ints[0], read.steps, ints[1])
    for mine, theirs in zip(given_columns, read, strict=True):
        assert mine.dtype == theirs.dtype
        assert np.array_equal(mine, theirs)


@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    n=st.integers(1, 120),
    workers=st.integers(1, 6),
    affinity=st.booleans(),
    pinned=st.booleans(),
)
def test_the_planners_bound_from_the_problems_columns_is_the_bound_from_the_trajectories(
    seed: int, n: int, workers: int, affinity: bool, pinned: bool
) -> None:
    rng = np.random.default_rng(seed)
    pool = tuple(
        Worker(f"w{i}", device_profile(("H100", "910B")[i % 2]), max_num_seqs=int(rng.choice([4, 64])))
        for i in range(workers)
    )
    batch = tuple(
        Trajectory(
            f"q{i // 4}",
            i % 4,
            int(rng.integers(1, 3_000)),
            8_000,
            float(rng.integers(1, 8_000)),
            pinned_worker="w0" if pinned and i % 5 == 0 else None,
        )
        for i in range(n)
    )
    request = PlanRequest(
        batch, Inventory(pool, model_preset("7b")), time_budget_s=0.1, prefix_affinity=affinity
    )
    with clock.frozen():  # no deadline cuts either bound short
        planned = prepare(request).bound
    assert planned == lower_bound(batch, request.inventory, prefix_affinity=affinity)


def test_a_bench_batchs_bound_is_the_same_through_the_planner_as_alone() -> None:
    for spread in (0.0, 0.1):
        request = dataclasses.replace(
            with_speed_spread(bench_request(1_024, 16, 3), spread, 3), time_budget_s=0.08
        )
        with clock.frozen():
            planned = prepare(request).bound
        assert planned == lower_bound(request.trajectories, request.inventory)
