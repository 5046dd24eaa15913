"""cpsat's band rounds stop where no further round can change the plan: a round whose calibration or
placement repeats an earlier round's is not played on (every round after it would repeat one too),
and the last round is not ordered where a queue that runs at once already ends by the best plan's
makespan. The plan is the one every round played gives, to the bit."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import pytest

import scheduler.policies.bandround as bandround_module
import scheduler.policies.bandsearch as bandsearch
from scheduler import clock
from scheduler.benchgen import bench_request
from scheduler.planner import plan
from scheduler.policies.bandround import History
from scheduler.policies.lpt_assign import lpt_assignment
from scheduler.policies.ordering import Outdone, order_queues
from scheduler.policies.problem import build_problem
from scheduler.types import Plan, PlanRequest

# 1,024 x 16 seed 7: round 2, calibrated by round 1's play, places every unit where round 1 did
# (rounds 2-4 all end at round 1's makespan when played; seed 5 did so while the band edges lay every
# 1/16 of the longest length, and seeds 7, 10 and 13 do at 1/64). 4,096 x 32 seed 9: rounds 1-3 differ
# and end at one makespan, decided by a queue that runs at once, which round 4's placement keeps.
REPEATING = bench_request(1_024, 16, seed=7)
OUTDONE = bench_request(4_096, 32, seed=9)


class _Spy:
    """Records cpsat's band placements and the assignments its rounds order (and the bar given)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.placed: list[list[list[int]]] = []
        self.ordered: list[tuple[list[list[int]], float | None]] = []
        self.outdone = 0

        def placed(*args: Any, **kwargs: Any) -> list[list[int]]:
            banded = lpt_assignment(*args, **kwargs)
            self.placed.append(banded)
            return banded

        def ordered(*args: Any, **kwargs: Any) -> Any:
            self.ordered.append((args[1], kwargs.get("bar")))
            try:
                return order_queues(*args, **kwargs)
            except Outdone:
                self.outdone += 1
                raise

        monkeypatch.setattr(bandround_module, "lpt_assignment", placed)
        monkeypatch.setattr(bandround_module, "order_queues", ordered)


def _every_round_played(monkeypatch: pytest.MonkeyPatch) -> None:
    """cpsat as before the rule: every round played and ordered, whatever it repeats."""
    play = bandround_module.play_round

    def played(*args: Any) -> Any:
        return play(*args[:8])  # no history, no bar

    monkeypatch.setattr(bandsearch, "play_round", played)


def _frozen(request: PlanRequest) -> Plan:
    with clock.frozen():
        return plan(request, "cpsat")


def test_a_round_that_places_every_unit_where_an_earlier_round_did_is_not_ordered_and_ends_the_rounds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    spy = _Spy(monkeypatch)
    _frozen(REPEATING)
    assert len(spy.placed) == 2
    assert spy.placed[1] == spy.placed[0]
    assert [a for a, _ in spy.ordered] == [spy.placed[0]]  # round 2 not ordered, rounds 3-4 not placed


def test_every_round_played_repeats_that_placement_and_ends_at_the_same_makespan(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _every_round_played(monkeypatch)
    spy = _Spy(monkeypatch)
    _frozen(REPEATING)
    assert len(spy.ordered) == bandsearch.ROUNDS + bandsearch.EXTRA_ROUNDS
    assert all(a == spy.placed[0] for a in spy.placed)


def test_the_last_round_is_not_ordered_where_a_queue_run_at_once_ends_by_the_best_makespan(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    spy = _Spy(monkeypatch)
    _frozen(OUTDONE)
    last = bandsearch.ROUNDS + bandsearch.EXTRA_ROUNDS
    assert len(spy.ordered) == last
    assert [bar is not None for _, bar in spy.ordered] == [False] * (last - 1) + [True]
    assert spy.outdone == 1


def test_ordering_with_a_bar_stops_before_any_play_only_where_a_queue_run_at_once_reaches_it() -> None:
    problem = build_problem(OUTDONE)
    assignment = lpt_assignment(problem)
    queues, finishes = order_queues(problem, assignment, False)
    at_once = max(finishes)  # every queue of this lpt plan runs at once
    with pytest.raises(Outdone):
        order_queues(problem, assignment, False, bar=at_once)
    assert order_queues(problem, assignment, False, bar=at_once * (1 + 1e-9)) == (queues, finishes)


def test_a_round_whose_calibration_was_played_is_not_placed_again(monkeypatch: pytest.MonkeyPatch) -> None:
    problem = build_problem(REPEATING)
    tiers, band = [0] * len(problem.costs), [0] * len(problem.units)
    spy = _Spy(monkeypatch)
    history = History()
    scale = [1.1] * len(problem.costs)
    ends = (math.inf, math.inf)  # stop, deadline
    assert bandround_module.play_round(problem, False, tiers, band, scale, 400.0, *ends, history) is not None
    assert bandround_module.play_round(problem, False, tiers, band, scale, 400.0, *ends, history) is None
    assert len(spy.placed) == 1


def test_the_history_knows_a_calibration_or_a_placement_only_once_it_was_played() -> None:
    history = History()
    assert not history.repeats_calibration(None, None)
    assert not history.repeats_calibration([1.0, 1.2], 400.0)
    assert history.repeats_calibration(None, None)
    assert history.repeats_calibration([1.0, 1.2], 400.0)
    assert not history.repeats_calibration([1.0, 1.2], 401.0)
    assert not history.repeats_placement([[0, 2], [1]])
    assert history.repeats_placement([[0, 2], [1]])
    assert not history.repeats_placement([[0], [1, 2]])


_SAME_PLAN_CASES = {
    **{f"1024x16-s{seed}": bench_request(1_024, 16, seed) for seed in range(12)},
    "1024x16-s8-kv-admission": dataclasses.replace(bench_request(1_024, 16, 8), kv_admission=True),
    "4096x32-s9": OUTDONE,
}


def _content(result: Plan) -> tuple[object, ...]:
    """A plan less its wall time: every queue and finish, the makespan and the status."""
    return (
        tuple((w.worker_id, w.items, w.predicted_finish_s) for w in result.workers),
        result.predicted_makespan_s,
        result.status,
    )


@pytest.mark.parametrize("name", sorted(_SAME_PLAN_CASES))
def test_the_plan_is_the_one_every_round_played_gives(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    request = _SAME_PLAN_CASES[name]
    stopped = _content(_frozen(request))
    _every_round_played(monkeypatch)
    assert _content(_frozen(request)) == stopped
