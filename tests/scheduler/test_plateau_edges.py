"""The plateau pass at its edges (``scheduler.policies.plateau``): which moves and swaps it offers, which
it keeps, and what bounds it. Found by mutation testing of round 66's code (docs/experiments.md,
"Mutation testing of round 66's new code"): test_plateau.py's crowded plan of equal units passed with
the candidates' fit, order and count changed, swaps dropped, the budget's checks loosened and a move
kept where the receiver ends as late as the latest did.

The offers are read on a pass given finishes of the test's own (``_Pass.offered`` reads only the
finishes and each worker's KV-token-steps), so each estimate is a figure the test chose.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any

import pytest

from scheduler.devices import device_profile, model_preset
from scheduler.policies import plateau
from scheduler.policies.ordering import best_order
from scheduler.policies.plateau import _Pass, lower
from scheduler.policies.problem import Problem, build_problem
from scheduler.types import Inventory, PlanRequest, Trajectory, Worker


@pytest.fixture(autouse=True)
def _count_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    """The pass as the 0.25 s budgets run it, bound by ``MAX_PLAYS`` alone: these tests give it an
    unbounded deadline, under which the time-bound extension (``PLAYS_PER_S``, reach67; its own tests
    are test_plateau.py's) would play on without a count."""
    monkeypatch.setattr(plateau, "PLAYS_PER_S", 0)


def _problem(
    items: Sequence[tuple[int, int]],
    workers: int = 2,
    caches: Sequence[int | None] = (),
    pins: dict[int, str] | None = None,
) -> Problem:
    """One trajectory (own prompt) per ``(prompt_tokens, steps)``, on ``workers`` H100s (``caches``:
    their KV capacities, where given; ``pins``: item -> the one worker it may run on)."""
    inventory = Inventory(
        tuple(
            Worker(
                f"w{w}",
                device_profile("H100"),
                max_num_seqs=64,
                kv_capacity_tokens=(list(caches) or [None] * workers)[w],
            )
            for w in range(workers)
        ),
        model_preset("7b"),
    )
    trajectories = tuple(
        Trajectory(f"p{i}", 0, prompt, 8_000, float(steps), pinned_worker=(pins or {}).get(i))
        for i, (prompt, steps) in enumerate(items)
    )
    return build_problem(PlanRequest(trajectories, inventory))


def _kv(steps: int, prompt: int = 100) -> float:
    """An item's KV-token-steps (``Problem.kv_steps``: p*L + L*(L-1)/2)."""
    return prompt * steps + steps * (steps - 1) / 2


# The latest worker (0) holds items of 4,000, 3,000, 2,000, 1,000 and 500 steps; the receiver (1) four
# of 1,000, ending at 30 s: its pace is 30 s over its KV-token-steps, and a move of a 2,000 is 27.5 s
# of it, a 3,000 60 s, a 4,000 105 s.
LATEST = (4_000, 3_000, 2_000, 1_000, 500)
RECEIVER = (1_000, 1_000, 1_000, 1_000)


def _offering(gap_s: float) -> tuple[_Pass, dict[int, int]]:
    """A pass over ``LATEST`` and ``RECEIVER`` with the receiver at 30 s and the latest ``gap_s``
    later; and each item's steps."""
    problem = _problem([(100, s) for s in LATEST + RECEIVER])
    queues = (tuple(range(len(LATEST))), tuple(range(len(LATEST), len(LATEST) + len(RECEIVER))))
    return _Pass(problem, queues, [30.0 + gap_s, 30.0], False), dict(enumerate(problem.steps))


def test_moves_are_offered_longest_first_three_at_most_within_nine_tenths_of_the_gap() -> None:
    """By the receiver's pace (30 s over its load), not the latest's: at a gap of 54 s (room 48.6 s)
    the 3,000 (60 s) does not fit, the 2,000 (27.5 s) and the shorter ones do, and three are tried."""
    state, steps = _offering(54.0)
    pace = 30.0 / (4 * _kv(1_000))
    assert pace * _kv(3_000) > 0.9 * 54.0 > pace * _kv(2_000)
    assert [steps[i] for i, j in state.offered(0, 1, swap=False)] == [2_000, 1_000, 500]
    assert all(j is None for _, j in state.offered(0, 1, swap=False))


def test_a_move_of_more_than_nine_tenths_of_the_gap_is_not_offered_nor_one_over_it() -> None:
    """At a gap of 31 s (room 27.9 s) the 2,000 (27.5 s) still fits; at 30 s (27 s) it does not."""
    state, steps = _offering(31.0)
    assert [steps[i] for i, _ in state.offered(0, 1, swap=False)] == [2_000, 1_000, 500]
    state, steps = _offering(30.0)
    assert [steps[i] for i, _ in state.offered(0, 1, swap=False)] == [1_000, 500]


def test_swaps_are_the_latest_s_shortest_for_a_strictly_shorter_item_closest_first_within_the_gap() -> None:
    """The latest (0) holds 3,000, 2,000 and 1,200 steps, the receiver 1,900, 1,000, 800 and 100:
    the 1,200 is offered for the 1,000 and the 800 (never the 1,900, no shorter), not for the 100,
    which passes the room, and the third swap is the 2,000's for the 1,900."""
    latest, receiver = (3_000, 2_000, 1_200), (1_900, 1_000, 800, 100)
    problem = _problem([(100, s) for s in latest + receiver])
    queues = ((0, 1, 2), (3, 4, 5, 6))
    pace = 20.0 / sum(map(_kv, receiver))
    room = pace * (_kv(1_200) - _kv(800)) * 1.05  # the 800 fits, the 100 does not
    assert pace * (_kv(1_200) - _kv(100)) > room > pace * (_kv(2_000) - _kv(1_900))
    state = _Pass(problem, queues, [20.0 + room / 0.9, 20.0], False)
    swaps = state.offered(0, 1, swap=True)
    assert [(problem.steps[i], problem.steps[j or 0]) for i, j in swaps] == [
        (1_200, 1_000),
        (1_200, 800),
        (2_000, 1_900),
    ]


def test_a_pinned_item_is_neither_offered_to_another_worker_nor_swapped_onto_one() -> None:
    """The latest's 2,000 pinned to it is not moved; the receiver's 1,000 pinned to it is not given
    back in a swap: its 800 is, the next shorter."""
    problem = _problem([(100, 2_000), (100, 1_200), (100, 1_000), (100, 800)], pins={0: "w0", 2: "w1"})
    state = _Pass(problem, ((0, 1), (2, 3)), [200.0, 20.0], False)
    assert [i for i, _ in state.offered(0, 1, swap=False)] == [1]
    assert state.offered(0, 1, swap=True) == [(1, 3)]


def test_where_caches_differ_the_smallest_cache_is_offered_no_unit_longer_than_its_own_longest() -> None:
    """Worker 1 (the small cache) holds a 1,000 at most: a 1,000 is offered to it (as long as its
    longest), a 1,500 is not; worker 2 (a large cache, as worker 0's) is offered both."""
    problem = _problem(
        [(100, 1_500), (100, 1_000), (100, 1_000), (100, 1_000)],
        workers=3,
        caches=(400_000, 200_000, 400_000),
    )
    state = _Pass(problem, ((0, 1), (2,), (3,)), [500.0, 10.0, 10.0], False)
    assert [i for i, _ in state.offered(0, 1, swap=False)] == [1]
    assert [i for i, _ in state.offered(0, 2, swap=False)] == [0, 1]


def test_where_every_cache_is_the_same_a_receiver_of_short_units_is_offered_a_long_one() -> None:
    problem = _problem([(100, 1_500), (100, 1_000), (100, 200)])
    state = _Pass(problem, ((0, 1), (2,)), [500.0, 10.0], False)
    assert [i for i, _ in state.offered(0, 1, swap=False)] == [0, 1]


def _equal(
    counts: Sequence[int], steps: int = 2_000
) -> tuple[Problem, tuple[tuple[int, ...], ...], list[float]]:
    """Equal units, ``counts[w]`` of them on worker ``w`` (in order), and the queues' finishes."""
    problem = _problem([(8_000, steps)] * sum(counts), workers=len(counts))
    starts = [sum(counts[:w]) for w in range(len(counts))]
    queues = tuple(tuple(range(s, s + c)) for s, c in zip(starts, counts, strict=True))
    return problem, queues, problem.finishes(queues, reserve=False)


def test_a_move_that_only_trades_places_with_the_latest_is_not_kept() -> None:
    """21 equal units and 20, the receiver's finish given as half its play (so a move's estimate fits
    the gap and is played): the receiver of one would end exactly as late as the latest did, so
    nothing is kept (both must end sooner), and the plan is returned as None."""
    problem, queues, finishes = _equal([21, 20])
    assert problem.finishes(((0,), queues[1] + (0,)), reserve=False)[1] == finishes[0]  # the same 21
    assert lower(problem, queues, [finishes[0], finishes[1] / 2], False, math.inf) is None


def _counted(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Every play's queue length, as the pass asks for it (``plateau.best_order``)."""
    played: list[int] = []

    def counting(problem: Problem, items: list[int], *rest: Any) -> Any:
        played.append(len(items))
        return best_order(problem, items, *rest)

    monkeypatch.setattr(plateau, "best_order", counting)
    return played


def test_a_level_plan_spends_no_play(monkeypatch: pytest.MonkeyPatch) -> None:
    """No worker ends before the latest: no receiver, so nothing is played."""
    problem, queues, finishes = _equal([20, 20, 20])
    played = _counted(monkeypatch)
    assert lower(problem, queues, finishes, False, math.inf) is None
    assert played == []


def test_only_workers_ending_before_the_latest_are_offered_anything(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two workers end last together and a third sooner: only the third is a receiver."""
    problem, queues, finishes = _equal([21, 21, 20])
    asked = _asked(monkeypatch)
    assert lower(problem, queues, finishes, False, math.inf) is None
    assert set(asked) == {2}


def test_a_move_is_tried_before_a_swap(monkeypatch: pytest.MonkeyPatch) -> None:
    """Thirty 2,000-step units and a 1,000 on worker 0, ten 500s on worker 1: a move (the 1,000) and
    swaps (a 2,000 for a 500) are both offered; the one try the budget allows is the move."""
    problem = _problem([(100, 2_000)] * 30 + [(100, 1_000)] + [(100, 500)] * 10)
    queues = (tuple(range(31)), tuple(range(31, 41)))
    finishes = problem.finishes(queues, reserve=False)
    state = _Pass(problem, queues, finishes, False)
    assert state.offered(0, 1, swap=False)
    assert state.offered(0, 1, swap=True)
    monkeypatch.setattr(plateau, "MAX_PLAYS", 2)
    lowered = lower(problem, queues, finishes, False, math.inf)
    assert lowered is not None
    assert len(lowered[0][1]) == 11  # took one
    assert set(range(31, 41)) <= set(lowered[0][1])  # gave none


def test_the_first_move_goes_to_the_worker_that_ends_earliest(monkeypatch: pytest.MonkeyPatch) -> None:
    problem, queues, finishes = _equal([60, 21, 19, 20])
    monkeypatch.setattr(plateau, "MAX_PLAYS", 2)  # one try
    lowered = lower(problem, queues, finishes, False, math.inf)
    assert lowered is not None
    assert [len(q) for q in lowered[0]] == [59, 21, 20, 20]


def test_of_two_workers_ending_together_the_first_gives_first(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ties broken by worker order, so a replay lowers the same worker."""
    problem, queues, finishes = _equal([30, 30, 20])
    monkeypatch.setattr(plateau, "MAX_PLAYS", 2)
    lowered = lower(problem, queues, finishes, False, math.inf)
    assert lowered is not None
    assert [len(q) for q in lowered[0]] == [29, 30, 21]


def test_the_default_budget_keeps_sixteen_moves_off_a_crowded_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    """60 equal units on one worker, 20 on three others: each kept move is two plays, so the pass's 32
    (``MAX_PLAYS``: what an idle host's 4,096 x 32 plan has left) keep 16, none played in vain."""
    problem, queues, finishes = _equal([60, 20, 20, 20])
    played = _counted(monkeypatch)
    lowered = lower(problem, queues, finishes, False, math.inf)
    assert lowered is not None
    assert sorted(len(q) for q in lowered[0]) == [25, 25, 26, 44]
    assert len(played) == plateau.MAX_PLAYS == 32


def test_an_odd_budget_is_never_overrun(monkeypatch: pytest.MonkeyPatch) -> None:
    """A try may need two plays: with 3 left after one, it is not started."""
    problem, queues, finishes = _equal([60, 20, 20, 20])
    monkeypatch.setattr(plateau, "MAX_PLAYS", 3)
    played = _counted(monkeypatch)
    assert lower(problem, queues, finishes, False, math.inf) is not None
    assert len(played) == 2


def _asked(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Every receiver the pass asks offers for (``_Pass.offered``)."""
    asked: list[int] = []
    offered = _Pass.offered

    def counting(self: _Pass, worst: int, r: int, swap: bool) -> list[tuple[int, int | None]]:
        asked.append(r)
        return offered(self, worst, r, swap)

    monkeypatch.setattr(_Pass, "offered", counting)
    return asked


def _slow_plays(monkeypatch: pytest.MonkeyPatch, each_s: float) -> list[float]:
    """A planning clock that moves only while a play runs, ``each_s`` a play."""
    now = [0.0]

    def slow(*args: Any) -> Any:
        now[0] += each_s
        return best_order(*args)

    monkeypatch.setattr(plateau, "clock", SimpleNamespace(now=lambda: now[0]))
    monkeypatch.setattr(plateau, "best_order", slow)
    return now


def test_a_try_that_would_end_past_the_deadline_at_the_pace_so_far_is_not_started(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Plays of 10 s and a deadline at 35 s: the first try (20 s) is kept; the second would start at
    20 s and, as long as the first, end at 40 s, past it: not started."""
    problem, queues, finishes = _equal([60, 20, 20, 20])
    now = _slow_plays(monkeypatch, 10.0)
    lowered = lower(problem, queues, finishes, False, 35.0)
    assert lowered is not None
    assert sorted(len(q) for q in lowered[0]) == [20, 20, 21, 59]
    assert now[0] == 20.0


def test_past_the_deadline_no_receiver_s_offers_are_even_made(monkeypatch: pytest.MonkeyPatch) -> None:
    """The clock checked before each receiver's offers, not only before a play: at 32,768 x 256 the
    offers of 255 receivers overran the deadline."""
    problem, queues, finishes = _equal([60, 20, 20, 20])
    _slow_plays(monkeypatch, 10.0)
    asked = _asked(monkeypatch)
    assert lower(problem, queues, finishes, False, 0.0) is None
    assert asked == []


# Two workers: 0 holds 200 and 500 steps, 1 holds 2,000 and 1,000 (the latest). No move off 1 fits the
# gap; a swap of its 1,000 for the 500 does, then the 500 moves on: 1 keeps its 2,000 alone.
SWAPPED = [(100, 200), (100, 500), (100, 2_000), (100, 1_000)]


def test_where_no_move_fits_a_swap_lowers_the_latest_worker() -> None:
    problem = _problem(SWAPPED)
    queues = ((0, 1), (2, 3))
    finishes = problem.finishes(queues, reserve=False)
    lowered = lower(problem, queues, finishes, False, math.inf)
    assert lowered is not None
    assert (sorted(lowered[0][0]), lowered[0][1]) == ([0, 1, 3], (2,))
    assert max(lowered[1]) < max(finishes)


def test_each_worker_s_load_follows_its_queue_through_moves_and_swaps() -> None:
    """The pace a candidate is judged by is a worker's finish over its KV-token-steps: after the swap
    and the move, each total is its queue's."""
    problem = _problem(SWAPPED)
    queues = ((0, 1), (2, 3))
    state = _Pass(problem, queues, problem.finishes(queues, reserve=False), False)
    while state.step(math.inf):
        pass
    assert state.total == [pytest.approx(sum(problem.kv_steps[i] for i in q)) for q in state.queues]


def test_each_worker_s_queue_by_length_follows_its_queue_through_kept_moves() -> None:
    """The sorted views a step offers from (``_Pass.sorted_queue``, kept between steps) hold what
    each queue holds once moves are kept, the receivers' as the givers'."""
    problem, queues, finishes = _equal([60, 20, 20, 20])
    state = _Pass(problem, queues, finishes, False)
    kept = 0
    while state.step(math.inf):
        kept += 1
        for w in problem.active:
            view = state.sorted_queue(w)
            assert sorted(view.down) == sorted(view.up) == sorted(state.queues[w])
    assert kept > 1


def test_a_swap_that_would_leave_the_latest_worker_later_is_not_kept() -> None:
    """The latest (0) holds 3,000 steps of a 100-token prompt, 2,000 of 12,000 and 3,000 of 6,000;
    the other (1) 2,000 steps of a 2,000-token prompt. A swap of the first for it ends the receiver
    sooner but gives the latest a heavier item (its prompt): it would end later, so it is not kept."""
    problem = _problem([(100, 3_000), (12_000, 2_000), (6_000, 3_000), (2_000, 2_000)])
    queues = ((0, 1, 2), (3,))
    finishes = problem.finishes(queues, reserve=False)
    assert lower(problem, queues, finishes, False, math.inf) is None
