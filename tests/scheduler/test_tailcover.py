"""The fluid cover: exact over every order of worker kinds, and never short where a schedule fits."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler import tailcover
from scheduler.tailcover import FluidCover, layout

Capacity = list[list[float]]  # per kind, per distinct length (longest first)


def _cover(lengths: list[int], demand: list[float], sizes: list[int]) -> tuple[FluidCover, np.ndarray]:
    steps = np.array(lengths, dtype=np.int64)
    laid = layout(steps)
    return FluidCover(laid, np.array(demand, dtype=np.float64), sizes), laid.lengths


def _falling(draw: st.DrawFn, distinct: int) -> list[float]:
    """A capacity per distinct length, never rising as the length grows (what ``serves`` gives)."""
    values = sorted(draw(st.lists(st.floats(0.0, 50.0), min_size=distinct, max_size=distinct)))
    return [float(v) for v in values]  # longest first: smallest capacity first


@st.composite
def _instances(
    draw: st.DrawFn, most: int = 6, kinds: int = 2
) -> tuple[list[int], list[float], list[int], Capacity]:
    lengths = draw(st.lists(st.integers(1, 30), min_size=1, max_size=most))
    demand = draw(st.lists(st.floats(0.5, 20.0), min_size=len(lengths), max_size=len(lengths)))
    sizes = draw(st.lists(st.integers(1, 2), min_size=1, max_size=kinds))
    distinct = len(set(lengths))
    return lengths, demand, sizes, [_falling(draw, distinct) for _ in sizes]


def _best_over_orders(lengths: list[int], demand: list[float], sizes: list[int], caps: Capacity) -> float:
    """Reference: each order of kinds, each worker credited at the first trajectory not yet covered."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    distinct = sorted(set(lengths), reverse=True)
    kinds = [c for c, n in enumerate(sizes) for _ in range(n)]
    best = 0.0
    for sequence in set(itertools.permutations(kinds)):
        covered, end, item = 0.0, 0.0, 0
        for kind in sequence:
            while item < len(order) and end + demand[order[item]] <= covered:
                end += demand[order[item]]
                item += 1
            longest = lengths[order[item]] if item < len(order) else distinct[-1]
            covered += caps[kind][distinct.index(longest)]
        best = max(best, covered)
    return best


@settings(max_examples=150, deadline=None)
@given(_instances(most=12, kinds=3))  # one, two (slices) and three kinds (planes)
def test_the_programme_finds_the_best_order_of_kinds(
    instance: tuple[list[int], list[float], list[int], Capacity],
) -> None:
    lengths, demand, sizes, caps = instance
    cover, _ = _cover(lengths, demand, sizes)
    best = _best_over_orders(lengths, demand, sizes, caps)
    expected = 1.0 - best / sum(demand)
    assert cover.shortfall([np.array(c) for c in caps]) == pytest.approx(expected, rel=1e-9, abs=1e-9)


@settings(max_examples=80, deadline=None)
@given(_instances())
def test_no_placement_of_whole_trajectories_within_capacity_is_declared_short(
    instance: tuple[list[int], list[float], list[int], Capacity],
) -> None:
    lengths, demand, sizes, caps = instance
    cover, distinct = _cover(lengths, demand, sizes)
    kinds = [c for c, n in enumerate(sizes) for _ in range(n)]
    for placement in itertools.product(range(len(kinds)), repeat=len(lengths)):
        fits = True
        for worker, kind in enumerate(kinds):
            mine = [i for i, w in enumerate(placement) if w == worker]
            if mine:
                longest = max(lengths[i] for i in mine)
                room = caps[kind][list(distinct).index(longest)]
                fits = fits and sum(demand[i] for i in mine) <= room
        if fits:  # a schedule fits: the cover must not prove otherwise
            assert cover.shortfall([np.array(c) for c in caps]) <= 1e-9
            return


def test_a_worker_hosting_the_longest_trajectory_is_credited_at_its_length() -> None:
    # one long trajectory (capacity 10 at its length) and three short ones (capacity 100)
    cover, _ = _cover([9, 1, 1, 1], [10.0, 30.0, 30.0, 30.0], [2])
    assert cover.shortfall([np.array([10.0, 100.0])]) <= 0.0  # the second worker takes the short ones
    cover, _ = _cover([9, 9, 1, 1], [10.0, 10.0, 30.0, 30.0], [2])
    assert cover.shortfall([np.array([10.0, 100.0])]) > 0.0  # both must run 9 steps: 20 of 80


def test_merging_kinds_to_fit_the_state_limit_only_loosens_the_cover(monkeypatch: pytest.MonkeyPatch) -> None:
    lengths, demand, sizes = [8, 6, 5, 3, 2, 1], [9.0, 7.0, 6.0, 5.0, 4.0, 3.0], [2, 2, 2]
    caps = [np.array(c) for c in ([3.0, 5.0, 6.0, 8.0, 9.0, 9.0], [1.0, 2.0, 7.0, 9.0, 9.0, 12.0],
                                  [4.0, 4.0, 4.0, 5.0, 5.0, 5.0])]  # fmt: skip
    exact = _cover(lengths, demand, sizes)[0].shortfall(caps)
    monkeypatch.setattr(tailcover, "MAX_STATES", 9)
    merged = _cover(lengths, demand, sizes)[0]
    assert len(merged.groups) < len(sizes)
    assert merged.shortfall(caps) <= exact
    assert math.prod(sum(sizes[c] for c in g) + 1 for g in merged.groups) <= 9


@settings(max_examples=150, deadline=None)
@given(_instances(most=12, kinds=3))
def test_the_chain_replays_the_best_cover_worker_by_worker(
    instance: tuple[list[int], list[float], list[int], Capacity],
) -> None:
    lengths, demand, sizes, caps = instance
    cover, distinct = _cover(lengths, demand, sizes)
    arrays = [np.array(c) for c in caps]
    chain = cover.chain(arrays)
    short = cover.shortfall(arrays)
    if short > 0.0:
        assert chain is None
        return
    assert chain is not None
    assert [sum(1 for kind, _ in chain if kind == c) for c in range(len(sizes))] == sizes
    longest_first = sorted(lengths, reverse=True)
    covered = 0.0
    for kind, before in chain:  # each worker starts where the last stopped, credited there
        assert before == covered
        first = int(cover.ends.searchsorted(covered, side="right"))
        longest = longest_first[min(first, len(lengths) - 1)]
        covered += caps[kind][list(distinct).index(longest)]
    assert covered == pytest.approx((1.0 - short) * sum(demand), rel=1e-9)


def test_the_chain_is_withheld_when_kinds_are_merged(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tailcover, "MAX_STATES", 9)
    cover, _ = _cover([3, 2, 1], [1.0, 1.0, 1.0], [2, 2, 2])
    assert cover.chain([np.array([9.0, 9.0, 9.0])] * 3) is None  # identities lost: no counts to give
