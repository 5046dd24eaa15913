"""The plateau pass: moves and swaps off the latest worker, kept only where plays say both end sooner."""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator
from dataclasses import replace

import pytest

from scheduler import clock
from scheduler.costmodel import WorkerCost
from scheduler.devices import device_profile, model_preset
from scheduler.policies import plateau
from scheduler.policies.ordering import best_order
from scheduler.policies.plateau import lower
from scheduler.policies.problem import Problem, build_problem
from scheduler.types import Inventory, PlanRequest, Trajectory, Worker


def _request(prefix_affinity: bool = False) -> PlanRequest:
    workers = tuple(Worker(f"w{i}", device_profile("H100"), max_num_seqs=64) for i in range(4))
    units = [Trajectory(f"p{i // 2}", i % 2, 100, 8_000, 2_000.0) for i in range(120)]
    return PlanRequest(tuple(units), Inventory(workers, model_preset("7b")), prefix_affinity=prefix_affinity)


def _crowded(problem: Problem) -> tuple[tuple[tuple[int, ...], ...], list[float]]:
    """Worker 0 runs 60 of the 120 equal units, the others 20 each: worker 0 alone decides the makespan."""
    queues = (tuple(range(60)), tuple(range(60, 80)), tuple(range(80, 100)), tuple(range(100, 120)))
    return queues, problem.finishes(queues, reserve=False)


def test_the_latest_worker_gives_units_away_until_the_makespan_falls_and_every_finish_is_a_play() -> None:
    problem = build_problem(_request())
    queues, finishes = _crowded(problem)
    lowered = lower(problem, queues, finishes, False, math.inf)
    assert lowered is not None
    new_queues, new_finishes = lowered
    assert max(new_finishes) < max(finishes)
    assert sorted(i for q in new_queues for i in q) == list(range(120))  # each unit placed once
    assert list(new_finishes) == pytest.approx(problem.finishes(new_queues, reserve=False))


def test_no_worker_ends_later_than_the_latest_did() -> None:
    problem = build_problem(_request())
    queues, finishes = _crowded(problem)
    lowered = lower(problem, queues, finishes, False, math.inf)
    assert lowered is not None
    assert all(f < max(finishes) for f in lowered[1])


def test_the_pass_stops_at_its_plays(monkeypatch: pytest.MonkeyPatch) -> None:
    problem = build_problem(_request())
    queues, finishes = _crowded(problem)
    monkeypatch.setattr(plateau, "MAX_PLAYS", 2)  # one try: one kept move at most
    monkeypatch.setattr(plateau, "PLAYS_PER_S", 0)  # however much time is left
    lowered = lower(problem, queues, finishes, False, math.inf)
    assert lowered is not None
    assert sorted(len(queue) for queue in lowered[0]) == [20, 20, 21, 59]


def _counted(monkeypatch: pytest.MonkeyPatch, now: Iterator[float] | None = None) -> list[float]:
    """The clock's reading at each play of the pass (its start), the clock ``now`` where given."""
    starts: list[float] = []
    played = plateau._Pass.play

    def play(self: plateau._Pass, w: int, items: list[int], late: float) -> tuple[list[int], float]:
        starts.append(clock.now())
        return played(self, w, items, late)

    monkeypatch.setattr(plateau._Pass, "play", play)
    if now is not None:
        monkeypatch.setattr(clock, "now", lambda: next(now))
    return starts


def test_with_a_second_left_the_pass_goes_on_past_its_plays_and_lowers_further(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    problem = build_problem(_request())
    queues, finishes = _crowded(problem)
    starts = _counted(monkeypatch)
    with clock.frozen():  # counts alone: a quarter of a second left allows MAX_PLAYS, a second more
        quarter = lower(problem, queues, finishes, False, plateau.MAX_PLAYS / plateau.PLAYS_PER_S)
        assert len(starts) == plateau.MAX_PLAYS
        starts.clear()
        second = lower(problem, queues, finishes, False, 1.0)
    assert quarter is not None
    assert second is not None
    assert plateau.MAX_PLAYS < len(starts) <= plateau.PLAYS_PER_S
    assert max(second[1]) < max(quarter[1])


def test_plays_past_max_plays_start_only_in_the_extra_share_of_the_time_left(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    problem = build_problem(_request())
    queues, finishes = _crowded(problem)
    starts = _counted(monkeypatch, itertools.count(0.0, 0.004))  # 4 ms a reading, ~20 ms a try
    lowered = lower(problem, queues, finishes, False, 0.7)  # read first at 0.0: the extra end at 0.35
    assert lowered is not None
    assert len(starts) > plateau.MAX_PLAYS  # it went on past them
    assert max(starts[plateau.MAX_PLAYS :]) < plateau.EXTRA_SHARE * 0.7
    assert len(starts) < 40  # with time to spare it plays 40 (frozen): the share cut it, not the deadline


def test_with_time_left_a_stuck_latest_worker_lets_the_next_latest_come_down() -> None:
    workers = tuple(Worker(f"w{i}", device_profile("H100"), max_num_seqs=64) for i in range(4))
    units = [Trajectory("long", 0, 100, 8_000, 7_900.0)]
    units += [Trajectory(f"p{i}", 0, 100, 8_000, 1_000.0) for i in range(100)]
    problem = build_problem(PlanRequest(tuple(units), Inventory(workers, model_preset("7b"))))
    queues = ((0,), tuple(range(1, 101)), (), ())  # worker 0's one unit ends last wherever it goes
    finishes = problem.finishes(queues, reserve=False)
    with clock.frozen():
        quarter = lower(problem, queues, finishes, False, plateau.MAX_PLAYS / plateau.PLAYS_PER_S)
        second = lower(problem, queues, finishes, False, 1.0)
    assert quarter is None  # the latest keeps no move: the pass stops there
    assert second is not None
    assert second[0][0] == (0,)
    assert second[1][0] == finishes[0]
    assert max(second[1][1:]) < finishes[1]  # worker 1 gave units to the idle ones


def test_nothing_is_tried_past_the_deadline() -> None:
    problem = build_problem(_request())
    queues, finishes = _crowded(problem)
    assert lower(problem, queues, finishes, False, 0.0) is None  # the clock is past 0.0 already


def test_units_of_several_trajectories_are_left_alone() -> None:
    problem = build_problem(_request(prefix_affinity=True))
    assert any(len(unit.members) > 1 for unit in problem.units)
    queues, finishes = _crowded(problem)
    assert lower(problem, queues, finishes, False, math.inf) is None


def test_a_level_plan_is_returned_as_none() -> None:
    problem = build_problem(replace(_request(), trajectories=_request().trajectories[:8]))
    queues = ((0, 1), (2, 3), (4, 5), (6, 7))  # equal units, two each: no move or swap ends sooner
    assert lower(problem, queues, problem.finishes(queues, reserve=False), False, math.inf) is None


def test_plays_stopped_at_the_latest_finish_keep_the_moves_of_plays_in_full(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # each play of a try stops where it cannot end before the latest worker (``best_order``'s
    # limit): the move is refused there anyway. The 910Bs' small caches crowd, so their plays are
    # played, not closed forms, and some end past the limit; the pass keeps what full plays keep
    workers = (
        Worker("h", device_profile("H100"), max_num_seqs=64),
        *(
            Worker(f"a{i}", device_profile("Ascend910B"), max_num_seqs=32, kv_capacity_tokens=40_000)
            for i in range(3)
        ),
    )
    units = [Trajectory(f"p{i}", 0, 200 + 53 * i % 400, 9_000, 1_000.0 + 97 * i % 6_000) for i in range(120)]
    problem = build_problem(PlanRequest(tuple(units), Inventory(workers, model_preset("7b"))))
    queues = (tuple(range(80)), tuple(range(80, 93)), tuple(range(93, 106)), tuple(range(106, 120)))
    finishes = problem.finishes(queues, reserve=False)
    limits: list[tuple[float, float]] = []

    def spied(
        problem: Problem, items: list[int], cost: WorkerCost, reserve: bool, limit: float = math.inf
    ) -> tuple[list[int], float]:
        order, finish = best_order(problem, items, cost, reserve, limit)
        limits.append((finish, limit))
        return order, finish

    monkeypatch.setattr(plateau, "best_order", spied)
    stopped = lower(problem, queues, finishes, False, math.inf)
    assert any(finish >= limit for finish, limit in limits)  # some tries were refused at the limit

    def in_full(
        problem: Problem, items: list[int], cost: WorkerCost, reserve: bool, limit: float = math.inf
    ) -> tuple[list[int], float]:
        return best_order(replace(problem), items, cost, reserve)

    monkeypatch.setattr(plateau, "best_order", in_full)
    assert stopped is not None
    assert lower(replace(problem), queues, finishes, False, math.inf) == stopped


def test_a_problem_without_its_kv_steps_lowers_as_the_derived_one_does() -> None:
    """``Problem.kv_steps`` is () where not derived (a problem built by hand, as ``balance`` builds its
    sub-problem): the pass reads the units' own then. review67 took that fallback for dead code, as
    ``lower`` only runs where units and trajectories are as many; it is not (nits67)."""
    problem = build_problem(_request())
    queues, finishes = _crowded(problem)
    bare = replace(problem, kv_steps=())
    assert lower(bare, queues, finishes, False, math.inf) == lower(problem, queues, finishes, False, math.inf)
