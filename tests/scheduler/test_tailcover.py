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


@st.composite
def _ranked_instances(
    draw: st.DrawFn, most: int = 8, workers: int = 5
) -> tuple[list[int], list[float], list[list[int]], list[np.ndarray], list[np.ndarray]]:
    """One or two kinds of workers in speed groups fastest first: each group's capacity per distinct
    length never rising with the length nor above the faster group's, nothing past what the group
    can run (its reach), and the groups' gaps free to rise or fall with the length."""
    top = draw(st.sampled_from([10, 30]))  # short: groups often unable to run the longest lengths
    lengths = draw(st.lists(st.integers(1, top), min_size=1, max_size=most))
    demand = draw(st.lists(st.floats(0.5, 20.0), min_size=len(lengths), max_size=len(lengths)))
    distinct = sorted(set(lengths), reverse=True)
    counts: list[list[int]] = []
    rows, reaches = [], []
    for _ in range(draw(st.integers(1, 2))):
        room = workers - sum(map(sum, counts))  # every order (placement) of them is tried
        if room < 1:
            break
        groups: list[int] = []
        for n in draw(st.lists(st.integers(1, 2), min_size=1, max_size=3)):
            if sum(groups) + n <= room:
                groups.append(n)
        groups = groups or [1]
        drawn = draw(st.lists(st.integers(0, top + 1), min_size=len(groups), max_size=len(groups)))
        reach = sorted(drawn, reverse=True)  # the faster group runs at least as far
        faster = [math.inf] * len(distinct)
        kind = []
        for g in range(len(groups)):
            row = [0.0] * len(distinct)
            for u in range(len(distinct) - 1, -1, -1):  # shortest first: never rising with the length
                ceiling = min(faster[u], row[u + 1] if u + 1 < len(distinct) else 50.0)
                row[u] = draw(st.floats(0.0, ceiling)) if distinct[u] <= reach[g] else 0.0
            kind.append(row)
            faster = row
        counts.append(groups)
        rows.append(np.array(kind))
        reaches.append(np.array(reach, dtype=np.float64))
    return lengths, demand, counts, rows, reaches


def _best_over_orders_of_workers(
    lengths: list[int],
    demand: list[float],
    counts: list[list[int]],
    rows: list[np.ndarray],
    reaches: list[np.ndarray] | None = None,
) -> float:
    """Reference: every order of the distinct workers, each credited at its own group's row at the
    first trajectory not yet covered (the per-worker programme, which ranks must never fall below).
    With ``reaches``, only the orders a schedule can give: no worker credited at a length longer
    than it can run (a worker's own longest is never shorter than the length it is credited at)."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    distinct = sorted(set(lengths), reverse=True)
    workers = [(c, g) for c, groups in enumerate(counts) for g, n in enumerate(groups) for _ in range(n)]
    best = -math.inf
    for sequence in set(itertools.permutations(workers)):
        covered, end, item = 0.0, 0.0, 0
        for kind, group in sequence:
            while item < len(order) and end + demand[order[item]] <= covered:
                end += demand[order[item]]
                item += 1
            longest = lengths[order[item]] if item < len(order) else distinct[-1]
            if reaches is not None and longest > reaches[kind][group]:
                break
            covered += float(rows[kind][group][distinct.index(longest)])
        else:
            best = max(best, covered)
    return best


def _ranked_cover(
    lengths: list[int], demand: list[float], counts: list[list[int]]
) -> tuple[FluidCover, np.ndarray]:
    laid = layout(np.array(lengths, dtype=np.int64))
    ranks = [np.repeat(np.arange(len(groups)), groups) for groups in counts]
    sizes = [sum(groups) for groups in counts]
    return FluidCover(laid, np.array(demand, dtype=np.float64), sizes, ranks), laid.lengths


@settings(max_examples=500, deadline=None)
@given(_ranked_instances())
def test_crediting_a_kinds_workers_by_speed_rank_never_covers_less_than_any_order_of_them(
    instance: tuple[list[int], list[float], list[list[int]], list[np.ndarray], list[np.ndarray]],
) -> None:
    lengths, demand, counts, rows, reaches = instance
    cover, _ = _ranked_cover(lengths, demand, counts)
    best = _best_over_orders_of_workers(lengths, demand, counts, rows)
    assert cover.shortfall(rows) <= 1.0 - best / sum(demand) + 1e-9
    best = _best_over_orders_of_workers(lengths, demand, counts, rows, reaches)
    assert cover.shortfall(rows, reaches) <= 1.0 - best / sum(demand) + 1e-9


@settings(max_examples=150, deadline=None)
@given(_ranked_instances(most=6, workers=4))
def test_no_placement_of_whole_trajectories_within_each_workers_reach_is_declared_short(
    instance: tuple[list[int], list[float], list[list[int]], list[np.ndarray], list[np.ndarray]],
) -> None:
    lengths, demand, counts, rows, reaches = instance
    cover, distinct = _ranked_cover(lengths, demand, counts)
    workers = [(c, g) for c, groups in enumerate(counts) for g, n in enumerate(groups) for _ in range(n)]
    for placement in itertools.product(range(len(workers)), repeat=len(lengths)):
        fits = True
        for worker, (kind, group) in enumerate(workers):
            mine = [i for i, w in enumerate(placement) if w == worker]
            if mine:
                longest = max(lengths[i] for i in mine)
                room = rows[kind][group][list(distinct).index(longest)]
                fits = fits and longest <= reaches[kind][group] and sum(demand[i] for i in mine) <= room
        if fits:  # a schedule fits: the ranked cover must not prove otherwise
            assert cover.shortfall(rows, reaches) <= 1e-9
            return


def test_one_speed_group_a_kind_is_the_cover_without_ranks() -> None:
    lengths, demand, sizes = [8, 6, 5, 3, 2, 1], [9.0, 7.0, 6.0, 5.0, 4.0, 3.0], [2, 3]
    caps = [np.array([3.0, 5.0, 6.0, 8.0, 9.0, 9.0]), np.array([1.0, 2.0, 7.0, 9.0, 9.0, 12.0])]
    plain = _cover(lengths, demand, sizes)[0].shortfall(caps)
    ranked, _ = _ranked_cover(lengths, demand, [[2], [3]])
    assert ranked.shortfall(caps) == plain
    assert ranked.shortfall([c[None, :] for c in caps]) == plain


def test_ranked_credits_cover_each_group_and_keep_the_faster_ahead_by_no_less_on_longer_lengths() -> None:
    rows = np.array([[4.0, 9.0, 10.0, 10.0], [1.0, 8.0, 8.5, 9.0], [0.0, 2.0, 8.0, 8.0]])
    credits = tailcover.ranked_credits(rows)
    assert (credits >= rows).all()
    gaps = credits[:-1] - credits[1:]
    assert (np.diff(gaps, axis=1) <= 0.0).all()  # columns longest first: gaps never grow shorter
    assert (np.diff(credits, axis=1) >= 0.0).all()  # never rising with the length


def test_where_the_slower_worker_first_covers_more_the_ranks_still_cover_as_much() -> None:
    # the faster worker is 4 ahead at the long length and 8 at the short one: the slower one first
    # (1 at the long, then the faster 10 at the short) covers 11, the faster first only 5 + 2
    lengths, demand, counts = [2, 1], [1.0, 30.0], [[1, 1]]
    rows = [np.array([[5.0, 10.0], [1.0, 2.0]])]
    assert _best_over_orders_of_workers(lengths, demand, counts, rows) == 11.0
    cover, _ = _ranked_cover(lengths, demand, counts)
    assert cover.shortfall(rows) <= 1.0 - 11.0 / 31.0


def _reference_credits(rows: list[list[float]], hosts: list[list[bool]]) -> list[list[float]]:
    """``ranked_credits`` element by element, as its doc states it: rows raised to the largest after
    them; each credit the previous less the running minimum of the gaps at hosted lengths (before
    the first hosted length, the gap there; none hosted: no gap)."""
    raised = [list(r) for r in rows]
    for g in range(len(raised) - 2, -1, -1):
        raised[g] = [max(a, b) for a, b in zip(raised[g], raised[g + 1], strict=True)]
    credits = [list(raised[0])]
    for g in range(1, len(raised)):
        gaps = [c - r if h else math.inf for c, r, h in zip(credits[-1], raised[g], hosts[g], strict=True)]
        running = list(itertools.accumulate(gaps, min))
        first = next((x for x in running if math.isfinite(x)), 0.0)
        credits.append(
            [
                c - max(first if not math.isfinite(x) else x, 0.0)
                for c, x in zip(credits[-1], running, strict=True)
            ]
        )
    return credits


@settings(max_examples=200, deadline=None)
@given(
    shape=st.tuples(st.integers(1, 6), st.integers(1, 12)),
    seed=st.integers(0, 10_000),
    contiguous=st.booleans(),
)
def test_ranked_credits_with_hosted_lengths_match_their_definition(
    shape: tuple[int, int], seed: int, contiguous: bool
) -> None:
    rng = np.random.default_rng(seed)
    rows = np.sort(rng.random(shape) * 100.0, axis=0)[::-1] + rng.random(shape) * (seed % 2)
    if contiguous:  # the cover's case: a group hosts every length from the longest it can run
        hosts = np.arange(shape[1])[None, :] >= rng.integers(0, shape[1] + 1, size=(shape[0], 1))
    else:
        hosts = rng.random(shape) < 0.6
    got = tailcover.ranked_credits(rows, hosts)
    assert got.tolist() == _reference_credits(rows.tolist(), hosts.tolist())


@settings(max_examples=200, deadline=None)
@given(
    sizes=st.tuples(st.integers(1, 9), st.integers(1, 9)),
    groups=st.tuples(st.integers(0, 3), st.integers(0, 3)),
    seed=st.integers(0, 10_000),
)
def test_the_two_kind_programme_is_the_general_ones_to_the_last_bit(
    sizes: tuple[int, int], groups: tuple[int, int], seed: int
) -> None:
    """``_two_kinds`` (a plane at a time, both kinds' gains over the whole plane) against the general
    programme's table (``_table``, per kind on its own slice), with and without speed groups (0: one
    row, read by position), lengths with ties, for every bench-like shape from 1 + 1 to 9 + 9."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, 40, size=int(rng.integers(1, 60)))
    laid = layout(lengths.astype(np.int64))
    grid = tailcover.knots(laid.lengths, 8)
    counts = [
        rng.multinomial(n - g, np.ones(g) / g) + 1 if 0 < g <= n else None
        for n, g in zip(sizes, groups, strict=True)
    ]
    ranks = [
        np.zeros(n, dtype=np.int64) if c is None else np.repeat(np.arange(c.size), c)
        for n, c in zip(sizes, counts, strict=True)
    ]
    cover = FluidCover(laid, rng.random(lengths.size) * 10.0, list(sizes), ranks, grid)
    capacities = [
        np.sort(rng.random(laid.lengths.size) * 8.0)
        if c is None
        else np.sort(rng.random((c.size, grid[0].size)) * 8.0, axis=1)[::-1]
        for c in counts
    ]
    merged = [cover._dimension(capacities, None, group) for group in cover.groups]
    assert len(merged) == 2
    assert cover._two_kinds(merged[0], merged[1]) == float(cover._table(merged)[-1])
    assert cover._two_kind_table(merged[0], merged[1]).tolist() == cover._table(merged).tolist()


@settings(max_examples=300, deadline=None)
@given(
    shape=st.tuples(st.integers(1, 10), st.integers(1, 40)),
    seed=st.integers(0, 10_000),
    reach=st.lists(
        st.one_of(st.floats(0.0, 50.0), st.sampled_from([math.inf, -math.inf, math.nan, 0.0])),
        min_size=10,
        max_size=10,
    ),
)
def test_a_groups_first_hosted_length_gives_the_credits_its_hosted_lengths_give_to_the_last_bit(
    shape: tuple[int, int], seed: int, reach: list[float]
) -> None:
    rng = np.random.default_rng(seed)
    rows = np.sort(rng.random(shape) * 100.0, axis=0)[::-1] + rng.random(shape) * (seed % 2)
    lengths = np.unique(rng.integers(1, 50, size=shape[1]).astype(np.float64))[::-1]  # longest first
    rows, reaches = rows[:, : lengths.size], np.array(reach[: shape[0]])
    hosts = lengths <= reaches[:, None]  # what the cover built for every probe
    firsts = np.searchsorted(-lengths, -reaches, side="left")  # what it builds now (review52d)
    expected = tailcover.ranked_credits(rows, hosts)
    assert np.array_equal(tailcover.ranked_credits(rows, firsts=firsts), expected)
