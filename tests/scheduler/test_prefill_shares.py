"""Limit (d) at blends of prefill and ramp-up (``scheduler.prefill_shares``): where long prompts and a
filling cache both bind it proves more than either end, never more than a play, never less than before."""

from __future__ import annotations

import functools
import itertools
import random
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import scheduler.tailbound as tailbound
from scheduler.devices import device_profile, model_preset
from scheduler.lowerbound import lower_bound
from scheduler.planner import plan
from scheduler.prefill_shares import BLEND_STEPS, PREFILL_SHARES, shares_bound
from scheduler.simulator import SimOptions, simulate
from scheduler.types import Inventory, Plan, PlanRequest, Trajectory, Worker, WorkerPlan

MODEL = model_preset("7b")
KINDS = ("H100", "910B")


def _long_cot(n: int, seed: int, prompt_max: int = 3_000, cap: int = 16_384) -> tuple[Trajectory, ...]:
    """Groups of 16 with prompts up to ``prompt_max`` and log-normal outputs up to ``cap``: the
    headline's shape (long prompts, long chains of thought) at a smaller size."""
    rng = random.Random(seed)
    return tuple(
        Trajectory(f"q{i // 16}", i % 16, rng.randint(200, prompt_max), cap,
                   float(min(cap, int(rng.lognormvariate(9.0, 0.6)))))
        for i in range(n)
    )  # fmt: skip


def _pool(count: int, seqs: int = 256, cap: int | None = None) -> Inventory:
    workers = (
        Worker(f"w{i}", device_profile(KINDS[i % 2]), max_num_seqs=seqs, kv_capacity_tokens=cap)
        for i in range(count)
    )
    return Inventory(tuple(workers), MODEL)


def _tail_at(shares: tuple[float, ...], batch: tuple[Trajectory, ...], inventory: Inventory) -> float:
    """Limit (d) with the fluid cover trying only ``shares`` (the band cover as it is)."""

    def only(search: Callable[[float, float], float], known_s: float) -> float:
        return functools.reduce(lambda low, share: search(share, low), shares, known_s)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(tailbound, "shares_bound", only)
        return lower_bound(batch, inventory).tail_s


def _random_plan(batch: tuple[Trajectory, ...], inventory: Inventory, rng: random.Random) -> Plan:
    """Any placement in any order: a play no policy needs to have chosen."""
    queues: dict[str, list[str]] = {w.worker_id: [] for w in inventory.workers}
    for t in rng.sample(batch, len(batch)):
        queues[rng.choice(inventory.workers).worker_id].append(t.key)
    workers = tuple(WorkerPlan(w, tuple(q), 0.0) for w, q in queues.items())
    return Plan("random", workers, 0.0, 0.0, "TEST", 0.0)


def _makespans(batch: tuple[Trajectory, ...], inventory: Inventory, plans: list[Plan]) -> list[float]:
    """Each plan played on the exact lengths: vLLM V0's rules and V1's (no watermark, evictions keep
    their output, stealing on: the most room the engine allows), and projected-peak admission."""
    actual = {t.key: int(t.predicted_tokens) for t in batch}
    options = [
        SimOptions(),
        SimOptions(steal=True, watermark=0.0, resume_preempted=True),
        SimOptions(kv_admission=True),
        SimOptions(steal=True, kv_admission=True, resume_preempted=True),
    ]
    return [simulate(p, batch, actual, inventory, o).makespan_s for p in plans for o in options]


def test_the_ends_come_first_then_the_blends_bisect_for_the_cliff() -> None:
    tried: list[float] = []

    def search(share: float, low: float) -> float:  # rises with the share up to a cliff at 0.3
        tried.append(share)
        return max(low, 100.0 + 10.0 * share) if share < 0.3 else low

    assert shares_bound(search, 50.0) == 100.0 + 10.0 * 0.25
    assert tried == [1.0, 0.0, 0.5, 0.25, 0.375, 0.3125]
    assert len(tried) == len(PREFILL_SHARES) + BLEND_STEPS


def test_each_search_starts_where_the_bound_so_far_stands() -> None:
    lows: list[float] = []

    def search(share: float, low: float) -> float:  # the same cliff at 0.3; prefill alone proves 60
        lows.append(low)
        if share == 1.0:
            return max(low, 60.0)
        return max(low, 100.0 + 10.0 * share) if share < 0.3 else low

    assert shares_bound(search, 50.0) == 102.5
    assert lows == [50.0, 60.0, 100.0, 100.0, 102.5, 102.5]  # not the known limits' 50 each time


def test_no_blend_lowers_what_the_ends_or_the_known_limits_proved() -> None:
    assert shares_bound(lambda share, low: low, 7.0) == 7.0
    assert shares_bound(lambda share, low: max(low, 9.0) if share == 0.0 else low, 7.0) == 9.0


def test_a_blend_proves_more_than_prefill_or_ramp_up_alone_on_long_prompts_and_long_chains() -> None:
    batch, inventory = _long_cot(512, seed=1), _pool(2)
    ends = max(_tail_at((1.0,), batch, inventory), _tail_at((0.0,), batch, inventory))
    blended = lower_bound(batch, inventory)
    assert blended.tail_s == blended.value_s > 1.02 * ends  # 671.2 s against 653.7 s


def test_no_play_of_the_long_chains_beats_the_blended_bound() -> None:
    batch, inventory = _long_cot(512, seed=1), _pool(2)
    bound = lower_bound(batch, inventory).value_s
    rng = random.Random(4)
    plans = [plan(PlanRequest(batch, inventory, time_budget_s=0.2, kv_admission=kv), policy)
             for policy in ("round_robin", "lpt", "cpsat") for kv in (False, True)]  # fmt: skip
    plans += [_random_plan(batch, inventory, rng) for _ in range(2)]
    assert min(_makespans(batch, inventory, plans)) >= bound


@settings(max_examples=30, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    n=st.integers(16, 128),
    workers=st.integers(1, 3),
    seqs=st.sampled_from([32, 64]),
    cap=st.integers(40_000, 150_000),
    prompt_max=st.sampled_from([3_000, 6_000]),
)
def test_no_play_beats_the_bound_and_it_never_falls_below_the_ends_alone(
    seed: int, n: int, workers: int, seqs: int, cap: int, prompt_max: int
) -> None:
    """Many slots, a large cache and long prompts: where the blends raise the bound (a quarter of
    these draws, by 0.05-10%, median 3%)."""
    rng = random.Random(seed)
    batch = tuple(
        Trajectory(f"q{i // 4}", i % 4, rng.randint(1, prompt_max), 4_000, float(rng.randint(1_000, 4_000)))
        for i in range(n)
    )
    inventory = _pool(workers, seqs, cap)
    bound = lower_bound(batch, inventory)
    assert bound.tail_s >= _tail_at(PREFILL_SHARES, batch, inventory)
    plans = [plan(PlanRequest(batch, inventory, time_budget_s=0.05, kv_admission=kv), policy)
             for policy in ("least_loaded", "lpt", "cpsat") for kv in (False, True)]  # fmt: skip
    plans.append(_random_plan(batch, inventory, rng))
    assert min(_makespans(batch, inventory, plans)) >= bound.value_s * (1.0 - 1e-12)


def _every_plan(batch: tuple[Trajectory, ...], inventory: Inventory) -> list[Plan]:
    """Every placement of ``batch`` on ``inventory`` in every queue order, each once: an order of the
    whole batch and a worker for each trajectory give the same queues as every other order that
    keeps each worker's own order (4 trajectories on 2 workers: 384 pairs, 120 plans), and a plan
    played again plays alike."""
    ids = [w.worker_id for w in inventory.workers]
    every: dict[tuple[tuple[str, tuple[str, ...]], ...], None] = {}  # insertion-ordered: plays in turn
    for order in itertools.permutations(batch):
        for where in itertools.product(ids, repeat=len(batch)):
            queues = tuple(
                (w, tuple(t.key for t, at in zip(order, where, strict=True) if at == w)) for w in ids
            )
            every[queues] = None
    return [
        Plan("all", tuple(WorkerPlan(w, q, 0.0) for w, q in queues), 0.0, 0.0, "T", 0.0) for queues in every
    ]


@settings(max_examples=15, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    n=st.integers(1, 4),
    workers=st.integers(1, 2),
    seqs=st.sampled_from([1, 2, 4]),
    cap=st.integers(5_000, 12_000),
)
def test_the_bound_is_at_most_the_best_play_of_a_tiny_batch(
    seed: int, n: int, workers: int, seqs: int, cap: int
) -> None:
    rng = random.Random(seed)
    batch = tuple(
        Trajectory(f"q{i // 2}", i % 2, rng.randint(500, 2_500), 2_000, float(rng.randint(1, 2_000)))
        for i in range(n)
    )
    inventory = _pool(workers, seqs, cap)
    optimum = min(_makespans(batch, inventory, _every_plan(batch, inventory)))
    assert lower_bound(batch, inventory).value_s <= optimum * (1.0 + 1e-12)
