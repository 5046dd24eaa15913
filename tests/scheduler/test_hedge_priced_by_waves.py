"""The order hedge's price before its own pace is known follows what the lpt phase did: a trajectory the
lpt start ordered in waves weighs more in the phase (``robust_order.judge_item_s``), so a small batch
in waves is not priced out by a phase that already played its queues.

Every test plans on a fake clock (``tests.scheduler.fake_clock``): only the stages the test names take
time, so the budget decides the same way on any host."""

from __future__ import annotations

import dataclasses

import pytest

from scheduler import clock
from scheduler.benchgen import bench_request
from scheduler.planner import plan
from scheduler.policies import lpt as lpt_module
from scheduler.policies import robust_order
from scheduler.policies.ordering import best_order, shortest_first
from scheduler.policies.problem import build_problem
from scheduler.policies.robust import spreads
from scheduler.policies.robust_order import JUDGE_COST, WAVES_WEIGHT, judge_item_s, robust_orders
from scheduler.types import Inventory, PlanRequest, Trajectory
from tests.scheduler.fake_clock import ManualClock, count_calls, slow_stage
from tests.scheduler.small_cache import small_cache_request


def _one_h100() -> PlanRequest:
    """flaky53's batch: 128 items on one H100 whose cache runs them in waves, 10 s to plan."""
    return dataclasses.replace(small_cache_request(128, 1.6, 300_000, seed=7), time_budget_s=10.0)


@pytest.mark.parametrize("policy", ["lpt", "cpsat"])
def test_a_small_batch_in_waves_is_hedged_where_the_flat_price_skipped_it(
    monkeypatch: pytest.MonkeyPatch, policy: str
) -> None:
    """The lpt phase takes 0.3 s, 9.8 s left to the policy: priced flat at ``JUDGE_COST`` (40) lpt
    phases, 12 s, the hedge was skipped and both policies returned an unhedged order (flaky53); the
    lpt start ordered all 128 in waves, so the hedge is priced at 4 phases, 1.2 s, and both return
    the hedged order, shortest-first."""
    request = _one_h100()
    problem = build_problem(request)
    order, _ = best_order(problem, list(range(128)), problem.costs[0], True)
    hedged_keys = [request.trajectories[i].key for i in shortest_first(problem, order, problem.costs[0])]
    slow_stage(monkeypatch, lpt_module, "lpt_start", 0.3)
    assert list(plan(request, policy).workers[0].items) == hedged_keys


def test_a_start_in_waves_is_still_priced_whole_before_anything_is_judged(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The same batch with an lpt phase of 2.5 s: 4 phases are 10 s, past the 7.3 s the phase left
    of the policy's 9.8, and no queue is judged (the price fits only below a 1.96 s phase)."""
    request = _one_h100()
    slow_stage(monkeypatch, lpt_module, "lpt_start", 2.5)
    judged = count_calls(monkeypatch, robust_order, "_better_order")
    plan(request, "lpt")
    assert judged == []


@pytest.mark.parametrize(("lpt_waves", "drawn"), [(0, False), (128, True)])
def test_queues_the_lpt_start_ran_at_once_keep_the_flat_price(
    monkeypatch: pytest.MonkeyPatch, lpt_waves: int, drawn: bool
) -> None:
    """Two queues in waves to judge, 0.2 s left and a 10 ms lpt phase: where the lpt start ran every
    queue at once (a band plan's queues after the search) its phase did none of the hedge's kind of
    work, and the whole is priced at ``JUDGE_COST`` (40) phases, 0.4 s: nothing is drawn. Where
    the start ordered all 128 in waves, 4 phases, 40 ms: the hedge draws its lengths."""
    request = small_cache_request(128, 1.6, 40_000, seed=7)
    worker = request.inventory.workers[0]
    inventory = Inventory((worker, dataclasses.replace(worker, worker_id="h100-1")), request.inventory.model)
    problem = build_problem(dataclasses.replace(request, inventory=inventory))
    spread = spreads(request.trajectories)
    assert spread is not None
    queues = (tuple(range(32)), tuple(range(32, 128)))
    monkeypatch.setattr(clock, "now", ManualClock().now)
    finishes = tuple(problem.finishes(queues, True))
    robust_orders(problem, queues, finishes, spread, True, 0, 0.2, lpt_phase_s=0.01, lpt_waves=lpt_waves)
    assert bool(problem.draws(spread, 0).drawn) == drawn


@pytest.mark.parametrize("reserve", [False, True])
def test_a_trajectory_in_waves_weighs_one_plus_the_weight_of_one_placed_at_once(reserve: bool) -> None:
    at_once = judge_item_s(reserve, 1.0, 1_000, 0)
    assert at_once == JUDGE_COST[reserve] / 1_000
    assert judge_item_s(reserve, 1.0, 1_000, 1_000) == pytest.approx(at_once / (1 + WAVES_WEIGHT))
    assert judge_item_s(reserve, 1.0, 1_000, 500) < at_once  # the more in waves, the lower the price
    assert judge_item_s(reserve, 0.0, 1_000, 1_000) == 0.0  # a frozen clock's phase: nothing priced


def _two_kinds_in_waves() -> PlanRequest:
    """The bench's 256 x 4 (two device kinds, so the plan is placed again by kind) with p50 and p90
    1.6x its predictions under KV admission, on caches of 60,000 tokens: every queue of the lpt start
    runs in waves."""
    request = bench_request(256, 4, 0)

    def unsure(t: Trajectory) -> Trajectory:
        p90 = min(1.6 * t.predicted_tokens, float(t.max_new_tokens))
        return dataclasses.replace(t, quantiles={0.5: t.predicted_tokens, 0.9: p90})

    workers = tuple(dataclasses.replace(w, kv_capacity_tokens=60_000) for w in request.inventory.workers)
    return dataclasses.replace(
        request,
        trajectories=tuple(unsure(t) for t in request.trajectories),
        inventory=dataclasses.replace(request.inventory, workers=workers),
        kv_admission=True,
    )


@pytest.mark.parametrize(("policy", "hedges"), [("lpt", 2), ("cpsat", 3)])
def test_every_order_hedge_of_a_plan_is_priced_by_the_lpt_start_s_waves(
    monkeypatch: pytest.MonkeyPatch, policy: str, hedges: int
) -> None:
    """The lpt start's hedge, the plan placed again by kind (``lpt.calibrated``) and cpsat's searched
    plan are each hedged after the same lpt phase, so each is priced by what that phase did: all 256
    trajectories in waves. One that dropped the count was priced flat, 10 times over, and skipped
    where the others fit. On a frozen clock every hedge fits, so every one is priced."""
    priced = robust_order.judge_item_s
    waves: list[int] = []

    def recorded(reserve: bool, lpt_phase_s: float, trajectories: int, lpt_waves: int) -> float:
        waves.append(lpt_waves)
        return priced(reserve, lpt_phase_s, trajectories, lpt_waves)

    monkeypatch.setattr(robust_order, "judge_item_s", recorded)
    with clock.frozen():
        plan(_two_kinds_in_waves(), policy)
    assert waves == [256] * hedges
