"""The plays on draws after the search end by the budget's end: the bar's blind plans are played a
chunk of draws at a time at the pace measured so far, the plan's estimates over every draw are
priced before they start (``blind_draws.least_drawn``), and the robust choice's first play of a
cell is priced like the later ones (``robust.judged``); the bar's screen of the draws
(``blind_draws.outlived``) plays the rest of its draws only where they fit (review49c).

On a loaded host (cpsat at 250 ms, 1,024 x 16) the blind plans' first draw took ~0.5 ms, the 31
others 26 and 77 ms in one pass each, and the plan's estimates 44 ms unpriced: the bar ended its
plan 109 ms past the budget (docs/experiments.md, hedge49). The planning clock here moves only where
the test says, by the draws each call is given.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from scheduler import clock, finish_draws
from scheduler.policies import blind_draws, blindbar, robust
from scheduler.policies.base import Placement
from scheduler.policies.blindbar import Blind
from scheduler.policies.robust import baseline, judged
from scheduler.policies.round_robin import RoundRobinPolicy
from tests.scheduler.fake_clock import ManualClock
from tests.scheduler.quantiled_bench import REQUEST, lpt_plan, point_finishes


def _taking(
    monkeypatch: pytest.MonkeyPatch,
    fake: ManualClock,
    module: Any,
    name: str,
    seconds: Callable[[int], float],
) -> None:
    """``module.name`` (``makespans``, ``estimated_finishes`` or ``longest_alone``) taking
    ``seconds(draws)`` on ``fake`` for the number of draws it is given."""
    original = getattr(module, name)
    at = {"makespans": 2, "estimated_finishes": 3, "longest_alone": 3}[name]  # where its draws are

    def slow(*args: Any, **kwargs: Any) -> Any:
        fake.seconds += seconds(len(args[at]))
        return original(*args, **kwargs)

    monkeypatch.setattr(module, name, slow)


def _bar_case() -> tuple[Any, ...]:
    problem, spread, queues = lpt_plan(REQUEST)
    blinds = [RoundRobinPolicy().plan(REQUEST, problem).queues]
    draws = robust.draw_matrix(spread, np.random.default_rng(0), robust.SAMPLES)
    return problem, queues, point_finishes(problem, queues, False), blinds, draws


@pytest.mark.parametrize(("slower", "deadline"), [(False, 5.0), (True, 10.0)])
def test_the_bar_plays_what_fits_and_ends_by_the_deadline(
    monkeypatch: pytest.MonkeyPatch, slower: bool, deadline: float
) -> None:
    # a draw of a plan takes 0.1 s played alone, and played with others 0.1 s each: the first draw
    # projects 3.2 s for the blind plan's 32, which fits the 5 s, but with the plan's estimates
    # (3.2 s more) they do not. ``slower``: 1 s each played with others, 31 s for the rest of the
    # blind plan's draws; the first chunk of 8 shows the pace and the second is not started
    problem, queues, points, blinds, draws = _bar_case()
    fake = ManualClock()
    monkeypatch.setattr(clock, "now", fake.now)
    _taking(
        monkeypatch, fake, blind_draws, "makespans", lambda n: 0.1 * n if n == 1 or not slower else 1.0 * n
    )
    _taking(monkeypatch, fake, blind_draws, "estimated_finishes", lambda n: 0.1 * n)
    assert blind_draws.least_drawn(problem, queues, points, blinds, draws, False, deadline) is None
    assert fake.seconds <= deadline


def test_with_the_time_for_it_the_bar_judges_on_every_draw() -> None:
    problem, queues, points, blinds, draws = _bar_case()
    every = [robust.makespans(problem, q, draws, False) for q in (queues, *blinds)]
    chosen = blind_draws.least_drawn(problem, queues, points, blinds, draws, False, float("inf"))
    assert chosen == robust.least_mean(every)


def test_the_robust_choice_does_not_start_a_play_it_cannot_end_by_the_deadline(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # a plan in waves against itself: the estimates settle nothing, so cells are played, each 1 s,
    # a draw's share of the plan's plays (1 s over 32 draws) priced; the estimates leave 0.01 s
    request = dataclasses.replace(REQUEST, kv_admission=True)
    problem, spread, queues = lpt_plan(request)
    crowded = [[u for q in queues for u in q]] + [[] for _ in queues[1:]]
    with clock.frozen():
        base = baseline(problem, crowded, spread, True, 0, deadline=0.0)
    base = robust.completed(problem, base, True)._replace(cost_s=1.0, pending_s=0.0)
    fake = ManualClock()
    monkeypatch.setattr(clock, "now", fake.now)
    _taking(monkeypatch, fake, robust, "estimated_finishes", lambda n: 0.99)
    replayed = finish_draws.replay_cells

    def play(*args: Any) -> None:
        fake.seconds += 1.0
        replayed(*args)

    monkeypatch.setattr(robust, "replay_cells", play)
    assert judged(problem, crowded, base, True, 1.0, point_finishes(problem, crowded, True)) is None
    assert fake.seconds <= 1.0


def _screen_case() -> tuple[Any, ...]:
    """The bar's inputs for lpt's plan of ``REQUEST`` against round robin's, every blind plan built."""
    problem, spread, queues = lpt_plan(REQUEST)
    placement = Placement(queues, "FALLBACK_LPT", finish_s=point_finishes(problem, queues, False))
    dealt = RoundRobinPolicy().plan(REQUEST, problem).queues
    finishes = tuple(problem.finishes(dealt, False))
    return problem, spread, placement, Blind(dealt, finishes, ((dealt, finishes),))


def test_the_bars_screen_of_the_draws_ends_by_the_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    # the screen (``outlived``) takes 0.1 s a draw: its 32 draws in one pass would end at 3.2 s of
    # the 1 s left; its first 8 draws show the pace, and the other 24 are not started
    problem, spread, placement, blind = _screen_case()
    fake = ManualClock()
    monkeypatch.setattr(clock, "now", fake.now)
    _taking(monkeypatch, fake, blind_draws, "longest_alone", lambda n: 0.1 * n)
    request = dataclasses.replace(REQUEST, kv_admission=False)
    barred = blindbar.barred(problem, request, placement, blind, "BASELINE", spread, 1.0)
    assert barred.queues == placement.queues  # not judged on the draws: the plan stands
    assert fake.seconds <= 1.0


def test_with_the_time_for_it_the_screen_a_chunk_at_a_time_is_the_screen_in_one_pass() -> None:
    problem, spread, placement, _ = _screen_case()
    for scale in (0.01, 1.0, 100.0):  # predicted makespans below, near and above the floors' mean
        points = [scale * f for f in placement.finish_s]
        for seed in range(3):
            draws = robust.draw_matrix(spread, np.random.default_rng(seed), robust.SAMPLES)
            floors = finish_draws.longest_alone(
                problem.costs, problem.prompts, placement.queues, draws, range(len(points))
            )
            one_pass = float(floors.max(axis=1, initial=0.0).mean()) > max(points)
            assert blind_draws.outlived(problem, placement.queues, points, draws, float("inf")) is one_pass
