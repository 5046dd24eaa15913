"""Tier-aware list scheduling: the ordered scan and the fused loop are shortcuts, never a different choice."""

from __future__ import annotations

import dataclasses
import random

import pytest

from scheduler.benchgen import bench_request, heavy_tailed_batch, mixed_inventory, with_speed_spread
from scheduler.devices import device_profile, model_preset
from scheduler.policies import listrun, listsched
from scheduler.policies.levels import LevelPlan, band_of, bands_of, solve_levels
from scheduler.policies.lpt_assign import lpt_assignment
from scheduler.policies.problem import Problem, Unit, build_problem, longest_first, worker_kinds
from scheduler.types import Inventory, PlanRequest, Trajectory, Worker

# Built once a module, by the identity of what they are built from (kept here, so no id is reused):
# each case's problem and band model serve its ten scan and loop tests (five rounds each) and the
# tests of one bench request, which built the same problem and solved its bands again in every test
# and for both of each test's placements. No placement writes to them (no memo of ``Problem``'s is
# read or written by the list scheduling).
_PROBLEMS: dict[int, tuple[PlanRequest, Problem]] = {}
_BANDS: dict[int, tuple[Problem, tuple[LevelPlan, list[int], list[int]]]] = {}


def _problem(request: PlanRequest) -> Problem:
    """``build_problem(request)``, once a module for each request (a problem is only read by the
    placements: both placements of a test already shared one)."""
    held = _PROBLEMS.get(id(request))
    if held is None or held[0] is not request:
        held = _PROBLEMS[id(request)] = (request, build_problem(request))
    return held[1]


def _banded(problem: Problem) -> tuple[LevelPlan, list[int], list[int]]:
    """The band model of ``problem`` as cpsat's rounds start from it: its levels, each worker's tier
    and each unit's band (solved once a module for each problem; the lists are only read)."""
    held = _BANDS.get(id(problem))
    if held is None or held[0] is not problem:
        kinds = worker_kinds(problem.costs, problem.active)
        levels = solve_levels(problem.units, [(problem.costs[m[0]], len(m)) for m in kinds], 2_000.0, 5.0, 0)
        assert levels is not None
        model = levels, levels.tiers(kinds, len(problem.costs)), bands_of(problem.units, levels.edges)
        held = _BANDS[id(problem)] = (problem, model)
    return held[1]


def _tiered(problem: Problem, scaled: bool, capped: bool = False, waves: bool = False) -> list[list[int]]:
    """A band round's placement: scaled like cpsat's second round, and with its cap when ``capped``
    (low enough that many short units wait), and with ``waves`` a larger scale past a worker's slots
    for every third worker (``calibrate.in_waves``)."""
    levels, tiers, bands = _banded(problem)
    scale = [1.0 + 0.01 * (w % 7) for w in range(len(problem.costs))] if scaled else None
    cap_s = 0.9 * levels.makespan_s if capped else None
    past = [s * (1.1 if w % 3 == 0 else 1.0) for w, s in enumerate(scale or [1.0] * len(problem.costs))]
    return lpt_assignment(problem, tiers, bands, scale, cap_s=cap_s, waves=past if waves else None)


def _pinned_groups(affinity: bool) -> PlanRequest:
    pinned = {"p3": "h100-1", "p7": "a910b-40"}
    batch = heavy_tailed_batch(2_048, seed=5)
    batch = tuple(dataclasses.replace(t, pinned_worker=pinned.get(t.prompt_id)) for t in batch)
    return PlanRequest(batch, mixed_inventory(64), prefix_affinity=affinity,
                       excluded_workers=frozenset({"h100-0"}))  # fmt: skip


CASES = {
    "4096x32-s0": bench_request(4_096, 32, seed=0),
    "4096x32-s1": bench_request(4_096, 32, seed=1),
    "2048x64-s2": bench_request(2_048, 64, seed=2),
    "pins": _pinned_groups(affinity=False),
    "pins-affinity": _pinned_groups(affinity=True),
}
WIDER = {
    **CASES,
    "4096x32-s2-spread": with_speed_spread(bench_request(4_096, 32, seed=2), 0.1, 2),
    "16384x128-s0": bench_request(16_384, 128, seed=0),
}


ROUNDS = {  # the placements of cpsat's rounds: (scaled, capped, waves)
    "round-1": (False, False, False),
    "scaled": (True, False, False),
    "round-2": (True, True, False),
    "waves": (True, True, True),
    "waves-uncapped": (True, False, True),
}


@pytest.mark.parametrize("request_", CASES.values(), ids=CASES.keys())
@pytest.mark.parametrize("variant", ROUNDS.values(), ids=ROUNDS.keys())
def test_the_ordered_scan_places_every_unit_where_scanning_every_heap_would(
    request_: PlanRequest, variant: tuple[bool, bool, bool], monkeypatch: pytest.MonkeyPatch
) -> None:
    """In every round, the capped ones too: there the units set aside come in a second pass,
    longest first again, so bands rise once and the scan's heaps must follow them up."""
    problem = _problem(request_)
    ordered = _tiered(problem, *variant)
    monkeypatch.setattr(listsched, "ORDERED_SCAN", False)
    assert ordered == _tiered(problem, *variant)


def test_a_parked_worker_is_one_the_unit_being_placed_could_not_fit(monkeypatch: pytest.MonkeyPatch) -> None:
    """Parking hides workers from the scan; it must only ever hide workers the scan would pass over."""
    problem = _problem(WIDER["16384x128-s0"])  # bench_request(16_384, 128, seed=0)
    hidden: list[int] = []
    best_worker = listsched.ListState.best_worker

    def checked(state: listsched.ListState, unit: Unit, band: int) -> tuple[int, float | None]:
        answer = best_worker(state, unit, band)  # un-parks first: what stays parked is hidden from it
        for _, w in state.parked:
            assert not state.kv.fits(w, unit)
            hidden.append(w)
        return answer

    monkeypatch.setattr(listsched.ListState, "best_worker", checked)
    monkeypatch.setattr(listrun, "FUSED", False)  # every unit through the spied method
    _tiered(problem, scaled=False)
    assert len(hidden) > 10_000  # it does hide many, at this size


def test_when_no_worker_fits_a_unit_at_once_it_still_goes_to_the_least_loaded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Small caches, long units: every worker soon parks, and the scan's fallback places the rest
    exactly where the heap scan without parking does."""
    workers = tuple(
        Worker(f"w{i}", device_profile("H100"), max_num_seqs=64, kv_capacity_tokens=40_000) for i in range(12)
    )
    batch = tuple(Trajectory(f"p{i}", 0, 100 + i % 7, 8_000, 4_000.0 - i) for i in range(200))
    problem = build_problem(PlanRequest(batch, Inventory(workers, model_preset("7b"))))
    parking = lpt_assignment(problem, [0] * 12, lambda unit: 0)
    monkeypatch.setattr(listsched.ListState, "_park", lambda state, w, steps, after: False)
    monkeypatch.setattr(listrun, "FUSED", False)  # parks inline otherwise
    assert parking == lpt_assignment(problem, [0] * 12, lambda unit: 0)
    assert sorted(u for units in parking for u in units) == list(range(200))


def test_in_a_small_pool_a_unit_goes_to_a_worker_that_still_runs_at_once() -> None:
    """Pools of 8 or fewer are scanned rather than kept in heaps; they yield like the heaps do.
    w1 holds three 13k-step units (its at-once KV peak near the 40k cache) and w0 one 20k-step
    unit: a 12k-step unit would finish soonest on w1 by the estimate, but there it could no longer
    run at once (preemption), so it goes to w0."""
    workers = tuple(
        Worker(f"w{i}", device_profile("H100"), max_num_seqs=64, kv_capacity_tokens=40_000) for i in range(2)
    )
    lengths = [20_000.0, 13_000.0, 13_000.0, 13_000.0, 12_000.0]
    batch = tuple(Trajectory(f"p{i}", 0, 100, 24_000, n) for i, n in enumerate(lengths))
    problem = build_problem(PlanRequest(batch, Inventory(workers, model_preset("7b"))))
    assert lpt_assignment(problem, [0, 0], lambda unit: 0) == [[0, 4], [1, 2, 3]]


def test_with_a_cap_the_short_units_that_would_pass_it_are_placed_after_all_others(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """cpsat's second round: a unit shorter than half the longest waits when its best worker would
    end past the cap; every unit placed in turn keeps its worker under it (or is long)."""
    problem = _problem(CASES["4096x32-s0"])  # bench_request(4_096, 32, seed=0)
    levels, tiers, band = _banded(problem)
    cap_s = levels.makespan_s * 0.9  # low enough that long units pass it too (they never wait)
    placed: list[tuple[int, float]] = []
    place = listsched.ListState.place

    def recorded(state: listsched.ListState, worker: int, u: int, after: float | None) -> None:
        place(state, worker, u, after)
        placed.append((u, state.current[worker]))

    monkeypatch.setattr(listsched.ListState, "place", recorded)
    monkeypatch.setattr(listrun, "FUSED", False)  # every unit through the spied method
    lpt_assignment(problem, tiers, band, cap_s=cap_s)
    natural = sorted(
        range(len(problem.units)), key=lambda u: (-problem.units[u].steps, -problem.units[u].kv_steps, u)
    )
    rank = {u: i for i, u in enumerate(natural)}
    order = [u for u, _ in placed]
    split = next(k for k in range(1, len(order)) if rank[order[k]] < rank[order[k - 1]])  # pass 2 starts
    short = max(problem.steps) // 2
    assert sorted(order) == list(range(len(problem.units)))  # each unit placed once
    assert all(problem.units[u].steps < short for u in order[split:])  # only short units waited
    assert [rank[u] for u in order[split:]] == sorted(rank[u] for u in order[split:])  # longest first
    assert all(after <= cap_s for u, after in placed[:split] if problem.units[u].steps < short)


@pytest.mark.parametrize("request_", CASES.values(), ids=CASES.keys())
def test_a_problem_ranks_its_units_longest_first_and_knows_when_none_is_restricted(
    request_: PlanRequest,
) -> None:
    problem = _problem(request_)
    assert list(problem.ranked) == longest_first(problem.units)
    assert problem.unrestricted == all(len(u.allowed) == len(problem.active) for u in problem.units)
    # a problem built without them (a sub-problem) places exactly as one built with them
    bare = Problem(problem.costs, problem.prompts, problem.steps, problem.units, problem.active)
    assert lpt_assignment(bare) == lpt_assignment(problem)


def test_the_scan_reads_each_joined_heaps_live_top_once_sorted(monkeypatch: pytest.MonkeyPatch) -> None:
    """The scan walks ``meta`` without popping or skipping, so after every placement it must hold
    exactly one entry per joined heap with a live top, that top, sorted."""
    problem = _problem(CASES["4096x32-s0"])  # bench_request(4_096, 32, seed=0)
    checked: list[int] = []
    place = listsched.ListState.place

    def checking(state: listsched.ListState, worker: int, u: int, after: float | None) -> None:
        place(state, worker, u, after)
        live = [(h, state._live_top(heap)) for h, heap in enumerate(state.heaps) if state.joined[h]]
        assert state.meta == sorted((top[0], top[1], h) for h, top in live if top is not None)
        checked.append(len(state.meta))

    monkeypatch.setattr(listsched.ListState, "place", checking)
    monkeypatch.setattr(listrun, "FUSED", False)  # every unit through the spied method
    _tiered(problem, scaled=False)
    assert len(checked) == len(problem.units)
    assert max(checked) > 1


@pytest.mark.parametrize("request_", WIDER.values(), ids=WIDER.keys())
@pytest.mark.parametrize("variant", ROUNDS.values(), ids=ROUNDS.keys())
def test_the_fused_loop_places_every_unit_where_the_methods_would(
    request_: PlanRequest, variant: tuple[bool, bool, bool], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``listrun``'s inline step (ordered scan, lowest band, placement, parking) is the methods'
    computation written out: the same worker for every unit, in every round cpsat runs."""
    problem = _problem(request_)
    fused = _tiered(problem, *variant)
    monkeypatch.setattr(listrun, "FUSED", False)
    assert fused == _tiered(problem, *variant)


def test_the_fused_loop_parks_and_falls_back_where_the_methods_do(monkeypatch: pytest.MonkeyPatch) -> None:
    """Small caches: every worker parks in turn, and the fallback places what no worker fits."""
    workers = tuple(
        Worker(f"w{i}", device_profile("H100"), max_num_seqs=64, kv_capacity_tokens=40_000) for i in range(12)
    )
    batch = tuple(Trajectory(f"p{i}", 0, 100 + i % 7, 8_000, 4_000.0 - i) for i in range(200))
    problem = build_problem(PlanRequest(batch, Inventory(workers, model_preset("7b"))))
    tiers, bands = [w % 3 for w in range(12)], [u % 3 for u in range(200)]
    fused = lpt_assignment(problem, tiers, bands), lpt_assignment(problem, tiers, bands, cap_s=30.0)
    monkeypatch.setattr(listrun, "FUSED", False)
    assert fused == (lpt_assignment(problem, tiers, bands), lpt_assignment(problem, tiers, bands, cap_s=30.0))


HOLDS_EVERY_UNIT = 50_000  # tokens: the longest prompt and the cap (``_prompt_bound``)


def _prompt_bound(
    seed: int, trajectories: int, slots: int, cache: int
) -> tuple[Problem, list[int], list[int]]:
    """Twelve workers of two kinds in eight (kind, tier) heaps, prompts of 50 or 20,000 tokens: a
    worker's room for a unit then depends on its prompt, so the heaps' tops often do not fit and
    the lowest band's look-up takes each of its ways (a top, one further in, none of a kind, too few).

    A cache of 30,000 holds no unit alone (50,000 tokens at most): no validated request makes that
    problem, and ``build_problem`` refuses it (edges59). It is built at a cache that holds every unit
    and then given ``cache``: the problem ``build_problem`` made before, every unit allowed every worker."""
    rng = random.Random(seed)
    workers = tuple(
        Worker(
            f"w{i}",
            device_profile("H100" if i % 2 else "A100"),
            max_num_seqs=slots,
            kv_capacity_tokens=max(cache, HOLDS_EVERY_UNIT),
        )
        for i in range(12)
    )
    batch = tuple(
        Trajectory(f"p{i}", 0, rng.choice((50, 20_000)), 30_000, float(rng.randint(200, 6_000)))
        for i in range(trajectories)
    )
    held = build_problem(PlanRequest(batch, Inventory(workers, model_preset("7b"))))
    costs = tuple(dataclasses.replace(cost, kv_capacity_tokens=cache) for cost in held.costs)
    problem = dataclasses.replace(held, costs=costs)
    return (
        problem,
        [1 + (w // 2) % 4 for w in range(12)],
        [min(4, unit.steps // 1_200) for unit in problem.units],
    )


@pytest.mark.parametrize("trajectories", [100, 160, 240])
@pytest.mark.parametrize("slots", [16, 32, 64])
def test_the_fused_loop_chooses_as_the_methods_do_where_tops_do_not_fit(
    trajectories: int, slots: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    cases = [
        _prompt_bound(seed, trajectories, slots, cache)
        for seed in range(2)
        for cache in (30_000, 60_000, 120_000)
    ]
    fused = [lpt_assignment(*case, cap_s=cap_s) for case in cases for cap_s in (None, 5.0)]
    monkeypatch.setattr(listrun, "FUSED", False)
    assert fused == [lpt_assignment(*case, cap_s=cap_s) for case in cases for cap_s in (None, 5.0)]


@pytest.mark.parametrize("request_", CASES.values(), ids=CASES.keys())
def test_each_units_band_is_band_of_its_steps(request_: PlanRequest) -> None:
    problem = _problem(request_)
    edges = (0, 2_000, 9_000, 9_001, 20_000)  # the longest units past the last edge: the last band
    assert bands_of(problem.units, edges) == [band_of(unit.steps, edges) for unit in problem.units]


def test_in_a_capped_round_no_unit_set_aside_goes_below_its_band() -> None:
    """The units the cap sets aside are placed last, longest first again: each still goes to a worker
    at its band or above, like every other unit (2,048 x 64 seed 2 put 44 of them a tier too low)."""
    problem = _problem(CASES["2048x64-s2"])  # bench_request(2_048, 64, seed=2)
    levels, tiers, bands = _banded(problem)
    assert max(bands) <= max(tiers)  # a worker at or above every unit's band exists
    queues = lpt_assignment(problem, tiers, bands, cap_s=0.9 * levels.makespan_s)
    assert [(u, w) for w, queue in enumerate(queues) for u in queue if tiers[w] < bands[u]] == []


Round = tuple[Problem, list[int], list[int], list[float] | None, float | None, list[float] | None]


def _random_round(seed: int) -> Round:
    """A small random problem and a band round on it: 9-20 workers of three kinds (past 8, so the
    heaps and the ordered scan are used), random tiers, and bands drawn per unit, not by length, so
    they rise and fall anywhere (a cap's set-aside pass only makes them rise once); a scale, a cap
    and a scale past the slots each present or not."""
    rng = random.Random(seed)
    kinds = [
        (device, rng.choice((4, 8, 16)), rng.choice((40_000, 80_000, 200_000)))
        for device in ("H100", "A100", "910B")
    ]
    workers = tuple(
        Worker(f"w{i}", device_profile(device), max_num_seqs=slots, kv_capacity_tokens=cache)
        for i, (device, slots, cache) in enumerate(rng.choice(kinds) for _ in range(rng.randint(9, 20)))
    )
    batch = tuple(
        Trajectory(f"p{i}", 0, rng.choice((50, 500, 5_000)), 8_192, float(rng.randint(100, 8_000)))
        for i in range(rng.randint(100, 300))
    )
    problem = build_problem(PlanRequest(batch, Inventory(workers, model_preset("7b"))))
    top = rng.randint(1, 4)
    tiers = [rng.randint(0, top) for _ in workers]
    bands = [rng.randint(0, top) for _ in problem.units]
    scale = [1.0 + 0.1 * rng.random() for _ in workers] if rng.random() < 0.7 else None
    past = [s * (1.0 + 0.2 * rng.random()) for s in scale or [1.0] * len(workers)]
    cap_s = rng.uniform(5.0, 300.0) if rng.random() < 0.6 else None
    return problem, tiers, bands, scale, cap_s, past if rng.random() < 0.6 else None


def test_on_random_problems_the_ordered_scan_and_the_fused_loop_place_as_the_full_scan(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The shortcuts against the reference on problems no bench batch is like: bands in any order
    (where they rise, the heaps below must leave the scan), capped or not, with and without a scale
    past the slots. Before the heaps followed rising bands (tierfix), 41 of these 60 placed differently."""
    rounds = [_random_round(seed) for seed in range(60)]

    def placed() -> list[list[list[int]]]:
        return [
            lpt_assignment(problem, tiers, bands, scale, cap_s=cap_s, waves=waves)
            for problem, tiers, bands, scale, cap_s, waves in rounds
        ]

    fast = placed()
    monkeypatch.setattr(listrun, "FUSED", False)
    monkeypatch.setattr(listsched, "ORDERED_SCAN", False)
    assert fast == placed()
