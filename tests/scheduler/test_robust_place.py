"""Placement for uncertain lengths: a device kind that runs late on draws is given less work."""

from __future__ import annotations

import dataclasses
import time

import numpy as np
import pytest

from scheduler.costmodel import WorkerCost
from scheduler.devices import device_profile, model_preset
from scheduler.planner import plan
from scheduler.policies import bandsearch, robust, robust_place
from scheduler.policies import cpsat as cpsat_module
from scheduler.policies import lpt as lpt_module
from scheduler.policies.base import Placement
from scheduler.policies.load import Load, time_with
from scheduler.policies.lpt import calibrated, ordered
from scheduler.policies.lpt_assign import lpt_assignment
from scheduler.policies.problem import Problem, build_problem, worker_kinds
from scheduler.policies.robust import draw_matrix, spreads
from scheduler.policies.robust_fast import at_once_hedge
from scheduler.policies.robust_order import drawn_finish, hedged
from scheduler.policies.robust_place import kind_scales
from scheduler.types import Inventory, PlanRequest, Trajectory, Worker
from tests.scheduler.fake_clock import SteppingClock, count_calls, slow_lpt_phase, slow_stage

CAP = 8_192
LATER = 60.0  # a deadline far enough away for everything here


def _request(spread: float, kinds: int = 2, quantiles: bool = True) -> PlanRequest:
    """256 items on 2 H100 (300k-token caches) and, with ``kinds`` 2, 2 Ascend 910B (200k): the
    Ascends' smaller, slower caches have less room for items that outrun their predictions."""
    rng = np.random.default_rng(7)
    batch = []
    for i in range(256):
        median = float(rng.uniform(0.2, 0.97)) * CAP
        spreads_ = {0.5: median, 0.9: min(float(CAP), median * spread)} if quantiles else {}
        batch.append(Trajectory(f"p{i}", 0, 200, CAP, median, spreads_))
    h100, ascend = device_profile("H100"), device_profile("Ascend910B")
    workers = [Worker(f"h100-{j}", h100, kv_capacity_tokens=300_000) for j in range(2)]
    if kinds == 2:
        workers += [Worker(f"a910b-{j}", ascend, kv_capacity_tokens=200_000) for j in range(2)]
    else:
        workers += [Worker(f"h100-{j}", h100, kv_capacity_tokens=300_000) for j in range(2, 4)]
    inventory = Inventory(tuple(workers), model_preset("7b"))
    return PlanRequest(tuple(batch), inventory, kv_admission=True, time_budget_s=LATER)


def _in_waves(request: PlanRequest) -> PlanRequest:
    """``request`` on workers of 16 slots: every lpt queue (29-99 items) runs past them, in waves."""
    workers = tuple(dataclasses.replace(w, max_num_seqs=16) for w in request.inventory.workers)
    return dataclasses.replace(request, inventory=dataclasses.replace(request.inventory, workers=workers))


def _hedged_lpt(request: PlanRequest) -> tuple[Problem, Placement]:
    """The lpt plan, hedged: what ``calibrated`` starts from."""
    problem = build_problem(request)
    queues, finishes = ordered(problem, lpt_assignment(problem), True, time.perf_counter() + LATER, False)
    start = Placement(queues, "HEURISTIC", finish_s=finishes)
    deadline = time.perf_counter() + LATER
    return problem, hedged(problem, request, start, spreads(request.trajectories), deadline)


def _tokens(problem: Problem, placement: Placement, workers: range) -> float:
    return sum(problem.steps[i] for w in workers for i in placement.queues[w])


def test_a_kind_that_runs_later_on_the_draws_than_planned_is_scaled_by_how_much() -> None:
    request = _request(1.6)
    problem, placement = _hedged_lpt(request)
    spread = spreads(request.trajectories)
    assert spread is not None
    scale = kind_scales(problem, placement, spread, True, 0, time.perf_counter() + LATER)
    assert scale is not None
    assert scale[0] == scale[1] == 1.0  # the H100s run earliest
    assert scale[2] == scale[3] > 1.1  # the Ascends run later, each kind by one factor


def test_with_no_spread_where_every_queue_runs_at_once_no_kind_is_scaled() -> None:
    # the draws are the predictions, and a queue run at once is played as its load estimate says, on
    # either kind; where the estimate misses (KV-bound queues), a kind is scaled with no spread too
    # (``test_each_kind_is_scaled_by_how_far_its_play_runs_past_its_load_estimate``)
    request = _request(1.0)
    problem, placement = _hedged_lpt(request)
    spread = spreads(request.trajectories)
    assert spread is not None
    assert kind_scales(problem, placement, spread, True, 0, time.perf_counter() + LATER) is None


def _kv_tight(h100_kv: int, ascend_kv: int) -> PlanRequest:
    """``_request`` with p90 = p50 (every draw is the predictions) on caches that bind on both kinds."""
    request = _request(1.0)
    workers = tuple(
        dataclasses.replace(w, kv_capacity_tokens=h100_kv if w.worker_id.startswith("h100") else ascend_kv)
        for w in request.inventory.workers
    )
    return dataclasses.replace(request, inventory=dataclasses.replace(request.inventory, workers=workers))


def _kind_gap(problem: Problem, placement: Placement, spread: robust.Spread) -> float:
    """How far apart the two kinds' last workers end, each worker at its mean over four draws."""
    rows: list[list[int]] = draw_matrix(spread, np.random.default_rng(5), 4).tolist()
    drawn = [
        drawn_finish(problem, problem.costs[w], list(q), rows, True) for w, q in enumerate(placement.queues)
    ]
    return abs(max(drawn[:2]) - max(drawn[2:]))


@pytest.mark.parametrize(("h100_kv", "ascend_kv"), [(150_000, 110_000), (200_000, 150_000)])
def test_each_kind_is_scaled_by_how_far_its_play_runs_past_its_load_estimate(
    h100_kv: int, ascend_kv: int
) -> None:
    """The draws here are the point predictions, so over the point finish (before calL63) every kind
    read 1.0, "agreed", and the plan stayed as it was, its kinds apart by what the load estimate
    misses on each (the drain after the last admission, not the same share of either kind's time).
    Over the estimate, what placing again balances, the kind whose play runs further past its
    estimate gets the larger scale, by that miss, and the plan placed again ends the kinds closer.
    At 150k/110k tokens the Ascends miss more (as on the long-cot headline); at 200k/150k the
    Ascends run at once, their estimate exact, and the H100s miss more."""
    request = _kv_tight(h100_kv, ascend_kv)
    problem, placement = _hedged_lpt(request)
    spread = spreads(request.trajectories)
    assert spread is not None
    load = [
        time_with(c, Load(*problem.item_totals(q)))
        for c, q in zip(problem.costs, placement.queues, strict=True)
    ]
    miss = [sum(placement.finish_s[w] / load[w] for w in kind) / 2 for kind in (range(2), range(2, 4))]
    assert abs(miss[1] / miss[0] - 1.0) > robust_place.AGREED  # the kinds' estimates miss by different shares
    scale = kind_scales(problem, placement, spread, True, 0, time.perf_counter() + LATER)
    assert scale is not None
    assert scale[0] == scale[1]
    assert scale[2] == scale[3]
    assert scale[2] / scale[0] == pytest.approx(miss[1] / miss[0], rel=1e-9)
    again = calibrated(problem, request, placement, spread, time.perf_counter() + LATER)
    assert again is not placement
    assert _kind_gap(problem, again, spread) < 0.5 * _kind_gap(problem, placement, spread)


def test_the_late_kind_is_given_less_work_and_the_new_plan_is_hedged() -> None:
    request = _request(1.6)
    problem, placement = _hedged_lpt(request)
    spread = spreads(request.trajectories)
    again = calibrated(problem, request, placement, spread, time.perf_counter() + LATER)
    assert again is not placement
    assert _tokens(problem, again, range(2, 4)) < _tokens(problem, placement, range(2, 4))
    assert sorted(i for queue in again.queues for i in queue) == list(range(256))
    assert hedged(problem, request, again, spread, time.perf_counter() + LATER).queues == again.queues


def test_without_quantiles_or_with_one_device_kind_the_plan_is_returned_as_it_is() -> None:
    for request in (_request(1.6, quantiles=False), _request(1.6, kinds=1)):
        problem, placement = _hedged_lpt(request)
        spread = spreads(request.trajectories)
        assert calibrated(problem, request, placement, spread, time.perf_counter() + LATER) is placement


def test_once_the_deadline_has_passed_the_plan_is_returned_as_it_is() -> None:
    request = _request(1.6)
    problem, placement = _hedged_lpt(request)
    spread = spreads(request.trajectories)
    assert calibrated(problem, request, placement, spread, time.perf_counter() - 1.0) is placement


def test_lpt_and_cpsat_both_return_the_calibrated_plan() -> None:
    request = _request(1.6)
    problem, placement = _hedged_lpt(request)
    spread = spreads(request.trajectories)
    again = calibrated(problem, request, placement, spread, time.perf_counter() + LATER)
    # this batch runs at once on the pool, so both then weigh it against the fastest kind first
    again = at_once_hedge(problem, request, again, spread, time.perf_counter() + LATER)
    keys = [[request.trajectories[i].key for i in queue] for queue in again.queues]
    for policy in ("lpt", "cpsat"):
        assert [list(w.items) for w in plan(request, policy).workers] == keys


def _one_by_one(problem: Problem, placement: Placement, spread: robust.Spread) -> list[float] | None:
    """``kind_scales`` as it was first written: every queue played by the event loop on each draw
    (each kind's lateness over the queues' load estimates, as since calL63)."""
    rng = np.random.default_rng(robust_place.SEED_OFFSET)  # request seed 0
    draws = [robust.draw_steps(spread, rng) for _ in range(robust_place.DRAWS)]
    kinds = worker_kinds(problem.costs, problem.active)
    ratios: list[list[float]] = [[] for _ in kinds]
    estimated = robust_place.estimates(problem, placement.queues)
    for k, w in robust_place._interleaved(kinds):
        if placement.queues[w] and estimated[w] > 0:
            queue = list(placement.queues[w])
            ratios[k].append(drawn_finish(problem, problem.costs[w], queue, draws, True) / estimated[w])
    return robust_place._scales(len(problem.costs), kinds, ratios)


Draws = list[list[int]]


def _counted_plays(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int]]:
    """(queue length, draws) of every event-loop play ``kind_scales`` makes from now on."""
    plays: list[tuple[int, int]] = []

    def counted(problem: Problem, cost: WorkerCost, order: list[int], draws: Draws, r: bool) -> float:
        plays.append((len(order), len(draws)))
        return drawn_finish(problem, cost, order, draws, r)

    monkeypatch.setattr(robust_place, "drawn_finish", counted)
    return plays


def test_queues_at_once_on_the_planned_lengths_take_their_draws_in_closed_form_to_the_last_bit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    request = _request(1.6)  # every lpt queue runs at once on the planned lengths
    problem, placement = _hedged_lpt(request)
    spread = spreads(request.trajectories)
    assert spread is not None
    expected = _one_by_one(problem, placement, spread)
    assert expected is not None
    plays = _counted_plays(monkeypatch)
    assert kind_scales(problem, placement, spread, True, 0, time.perf_counter() + LATER) == expected
    # the event loop only where a draw runs a queue past its cache (it preempts), one draw at a time
    assert plays
    assert all(draws == 1 for _, draws in plays)
    assert len(plays) < robust_place.DRAWS * len(placement.queues)


def test_a_queue_not_at_once_on_the_planned_lengths_is_still_played_by_the_event_loop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    request = _in_waves(_request(1.6))
    problem, placement = _hedged_lpt(request)
    spread = spreads(request.trajectories)
    assert spread is not None
    expected = _one_by_one(problem, placement, spread)
    plays = _counted_plays(monkeypatch)
    assert kind_scales(problem, placement, spread, True, 0, time.perf_counter() + LATER) == expected
    assert sorted(plays) == sorted((len(q), robust_place.DRAWS) for q in placement.queues)


def test_the_draws_give_up_after_one_worker_when_their_pace_cannot_leave_time_for_the_caller(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    request = _in_waves(_request(1.6))  # queues played one by one: those in closed form cost no pace
    problem, placement = _hedged_lpt(request)
    spread = spreads(request.trajectories)
    assert spread is not None
    played: list[int] = []

    def counted(*args: object, **kwargs: object) -> float:
        played.append(1)
        return drawn_finish(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(robust_place, "drawn_finish", counted)
    monkeypatch.setattr(robust_place, "clock", SteppingClock())
    # two seconds for the checks before any play (on entry, and before the at-once pass, which
    # finds no queue at once), four workers at a second each, then six plays of every queue (three
    # seconds a worker): ~18 s, far past a deadline 10 s away, which the plays alone (6 s) would
    # have met
    assert kind_scales(problem, placement, spread, True, 0, 10.0, after_plays=6) is None
    assert len(played) == 1
    monkeypatch.setattr(robust_place, "clock", SteppingClock())
    assert kind_scales(problem, placement, spread, True, 0, 10.0) is not None  # no caller's plays
    assert len(played) == 1 + 4


@pytest.mark.parametrize(
    ("slow", "deadline", "at_once_plays", "passes"),
    [
        ("estimates", 3.9, 0, 0),
        ("estimates", 4.1, 1, 1),
        ("ends_at_once", 7.9, 1, 0),
        ("ends_at_once", 8.1, 1, 1),
    ],
)
def test_the_at_once_pass_is_not_begun_where_the_callers_plays_could_not_follow_it(
    monkeypatch: pytest.MonkeyPatch, slow: str, deadline: float, at_once_plays: int, passes: int
) -> None:
    """Every queue runs at once, so the draws are one closed-form pass, and the caller then plays
    every queue six times, priced as ``calibrated`` prices them: the draws' time over ``DRAWS`` a
    play, three times the draws' time. With the estimates taking a second, 4 s are needed before
    the pass: 3.9 s leave no room, and neither the at-once play nor the pass starts. With the
    at-once play taking a second, it prices the pass at a second more: 2 s of draws and 6 s of
    plays, 8 s; 7.9 s leave the pass unplayed. Where they fit, the scales are the ones played with
    all the time in the world. Unpriced, the pass spent ~55 ms at 32,768 x 256 on scales
    ``calibrated`` then dropped."""
    request = _request(1.6)
    problem, placement = _hedged_lpt(request)
    spread = spreads(request.trajectories)
    assert spread is not None
    expected = kind_scales(problem, placement, spread, True, 0, time.perf_counter() + LATER, after_plays=6)
    assert expected is not None
    slow_stage(monkeypatch, robust_place, slow, 1.0)
    plays = count_calls(monkeypatch, robust_place, "ends_at_once")
    closed = count_calls(monkeypatch, robust_place, "closed_forms")
    scales = kind_scales(problem, placement, spread, True, 0, deadline, after_plays=6)
    assert (len(plays), len(closed)) == (at_once_plays, passes)
    assert scales == (expected if passes else None)


def test_cpsat_does_not_search_with_quantiles_when_the_robust_choice_could_not_judge_the_result(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    searched: list[int] = []
    rounds = bandsearch.rounds

    def counted(*args: object, **kwargs: object) -> object:
        searched.append(1)
        return rounds(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(bandsearch, "rounds", counted)
    plan(_request(1.6), "cpsat")  # a budget that fits the search and the choice after it
    assert searched == [1]
    measured = robust.baseline  # a choice whose plays would never fit
    monkeypatch.setattr(cpsat_module, "baseline", lambda *args: measured(*args)._replace(cost_s=1e9))
    kept = plan(_request(1.6), "cpsat")
    assert searched == [1]
    assert kept.status == "FALLBACK_LPT"
    # without quantiles there is no choice to make, so no time to keep for it
    plan(_request(1.6, quantiles=False), "cpsat")
    assert searched == [1, 1]


def _first_step(p90: float) -> PlanRequest:
    """A run's first step: no history, so every sample gets the same prior (p50 512, p90 ``p90``);
    64 of them fit one H100 at once, which finishes them faster than an Ascend 910B would."""
    h100, ascend = device_profile("H100"), device_profile("Ascend910B")
    workers = (Worker("h100-0", h100, max_num_seqs=64), Worker("a910b-0", ascend, max_num_seqs=64))
    prior = {0.5: 512.0, 0.9: p90}
    batch = tuple(Trajectory(f"p{i}", s, 50 + i, 2048, 512.0, prior) for i in range(16) for s in range(4))
    return PlanRequest(batch, Inventory(workers, model_preset("7b")), time_budget_s=LATER)


def test_a_kind_the_plan_left_empty_is_not_taken_for_one_that_runs_on_time() -> None:
    # the H100 runs late on draws (64 sequences at once end with the longest draw), and the
    # Ascend, given nothing, was never played: no comparison of kinds, so nothing moves
    request = _first_step(1_500.0)
    problem, placement = _hedged_lpt(request)
    spread = spreads(request.trajectories)
    assert spread is not None
    assert [len(q) for q in placement.queues] == [64, 0]
    assert kind_scales(problem, placement, spread, False, 0, time.perf_counter() + LATER) is None
    for policy in ("lpt", "cpsat"):
        planned = plan(request, policy)
        assert [len(w.items) for w in planned.workers] == [64, 0]
        assert planned.predicted_makespan_s < plan(request, "round_robin").predicted_makespan_s


def test_a_kind_left_empty_counts_as_late_as_the_latest_kind_played() -> None:
    kinds = [[0, 1], [2], [3]]
    late = 1.3 / 1.1  # the H100s' mean lateness over the least kind's
    assert robust_place._scales(4, kinds, [[1.2, 1.4], [1.1], []]) == pytest.approx([late, late, 1.0, late])
    assert robust_place._scales(4, kinds, [[1.2, 1.4], [], []]) is None  # one kind played: nothing to compare
    assert robust_place._scales(4, kinds, [[1.1], [1.105], []]) is None  # within AGREED


@pytest.mark.parametrize(("budget_s", "drawn"), [(2.9, False), (3.1, True)])
def test_the_kinds_are_not_played_on_draws_when_placing_again_could_not_follow_them(
    monkeypatch: pytest.MonkeyPatch, budget_s: float, drawn: bool
) -> None:
    """The lpt phase seems to take a second and nothing else any time: placing again is priced at
    ``PLACE_COST`` (2) lpt phases, so with less than that left after the lpt phase the draws are
    not played, and with more they are (the plan placed again is then kept only if its hedge,
    priced in turn, fits too). Only the draws' plays used to
    be projected: at 16,384 x 128 placing again took 70-80 ms of a 1 s plan unpriced, and on a
    loaded host 445 ms for a plan then dropped, past the budget."""
    request = dataclasses.replace(_request(1.6), time_budget_s=budget_s)
    slow_lpt_phase(monkeypatch, lpt_module)
    played = count_calls(monkeypatch, lpt_module, "kind_scales")
    lpt_module.LptPolicy().plan(request, build_problem(request))
    assert bool(played) == drawn
