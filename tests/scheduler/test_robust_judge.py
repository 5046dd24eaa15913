"""The robust judge trusts an estimate of a play only where it has been checked against a play."""

from __future__ import annotations

import numpy as np
import pytest

from scheduler import clock
from scheduler.finish import worker_finish
from scheduler.finish_draws import estimated_finishes, longest_alone
from scheduler.policies.robust import SLACK, baseline, judged, least_expected, spreads
from tests.scheduler.long_and_short import CROWDED, EVEN, long_and_short, problem_of

SPREAD = 2.0  # the short ones' p90 over p50: some drawn short one runs ~5x its prediction


def test_a_queue_in_waves_ends_no_sooner_than_its_longest_drawn_item_alone_which_its_estimate_misses() -> (
    None
):
    # 396 short ones on one worker run in waves; its estimate scales the planned finish by the
    # drawn work, but the finish waits for the one that drew longest, run after the waves before it
    batch = long_and_short(SPREAD)
    problem, spread = problem_of(batch), spreads(batch)
    assert spread is not None
    draws = baseline(problem, EVEN, spread, True, 0, deadline=float("inf")).draws
    points = tuple(problem.finishes(CROWDED, True))
    values, approx = estimated_finishes(
        problem.costs, problem.prompts, CROWDED, draws, True, problem.steps, points
    )
    crowded = len(CROWDED) - 1
    assert approx[:, crowded].all()
    floors = longest_alone(problem.costs, problem.prompts, CROWDED, draws, [crowded])
    queue = CROWDED[crowded]
    plays = np.array(
        [
            worker_finish(
                problem.costs[crowded], [problem.prompts[i] for i in queue], [int(d[i]) for i in queue], True
            )
            for d in draws
        ]
    )
    assert (floors[:, crowded] <= plays).all()  # a lower bound of every play
    assert (floors[:, :crowded] == 0).all()  # only the workers asked for
    assert (floors[:, crowded] > values[:, crowded] * SLACK).any()  # shows some estimate wrong


@pytest.mark.parametrize("short_spread", [1.5, SPREAD])
def test_a_plan_whose_crowded_queue_ends_with_one_long_drawn_item_is_judged_as_its_plays_say(
    short_spread: float,
) -> None:
    # the estimates of the crowded queue are 1.1-2x short of its plays: at SPREAD, judged on them,
    # it looked the better bet on every seed while every play of it says the spread plan is; at
    # 1.5 it is the better bet, and still chosen
    batch = long_and_short(short_spread)
    problem, spread = problem_of(batch), spreads(batch)
    assert spread is not None
    points = tuple(problem.finishes(CROWDED, True))
    with clock.frozen():
        for seed in range(3):
            base = baseline(problem, EVEN, spread, True, seed, deadline=0.0)
            chosen = least_expected(problem, (CROWDED, EVEN), spread, True, seed, deadline=0.0)
            assert judged(problem, CROWDED, base, True, 0.0, points) is (chosen == 0)
