"""Levelling: workers that do not decide the makespan end up balanced, and the makespan never moves."""

from __future__ import annotations

from scheduler.devices import device_profile, model_preset
from scheduler.policies.balance import level_below
from scheduler.policies.problem import build_problem
from scheduler.types import Inventory, PlanRequest, Trajectory, Worker


def _request() -> PlanRequest:
    workers = tuple(Worker(f"w{i}", device_profile("H100"), max_num_seqs=64) for i in range(4))
    long = [Trajectory("long", i, 100, 8_000, 8_000.0) for i in range(2)]
    short = [Trajectory(f"s{i}", 0, 100, 8_000, 500.0) for i in range(60)]
    return PlanRequest(tuple(long + short), Inventory(workers, model_preset("7b")))


def test_idle_workers_take_over_work_from_a_crowded_one_below_the_makespan() -> None:
    problem = build_problem(_request())
    queues = ((0, 1), tuple(range(2, 62)), (), ())  # the long pair decides; one worker runs every short one
    finishes = problem.finishes(queues, reserve=False)
    new_queues, new_finishes = level_below(problem, queues, finishes, reserve=False)
    assert new_queues[0] == queues[0]  # the critical worker is untouched
    assert new_finishes[0] == finishes[0]
    assert max(new_finishes) == max(finishes)
    assert new_finishes[1] == new_finishes[2] == new_finishes[3] < finishes[1]
    assert sorted(i for q in new_queues for i in q) == list(range(62))


def test_a_plan_whose_other_workers_are_already_even_is_left_as_it_is() -> None:
    problem = build_problem(_request())
    queues = ((0, 1), tuple(range(2, 22)), tuple(range(22, 42)), tuple(range(42, 62)))
    finishes = problem.finishes(queues, reserve=False)
    assert level_below(problem, queues, finishes, reserve=False) == (queues, tuple(finishes))
