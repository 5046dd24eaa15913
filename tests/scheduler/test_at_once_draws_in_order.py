"""The at-once judgment plays each plan on the request's draws in order, each draw once: the first
``TIMED`` it times the pace on, then the next ones as the comparison asks (``robust_fast._timed``,
``_more``), and the candidate it hands on keeps the means of its first draws
(``Candidate.means``), which a later judgment of the same batch extends.

Why: the verdict is a paired comparison of the two plans draw by draw, and a later judgment (lpt's
plan placed again, cpsat's searched plan) reuses the candidate's means as they are. A plan played on
shifted draws, or on the first draws again, is weighed against the other plan on different lengths,
and the candidate's means would not be those of the draws the next judgment plays its own side on.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from scheduler import clock
from scheduler.policies import lpt, robust_fast
from scheduler.policies.base import Placement
from scheduler.policies.outlier_draws import Draws, outlier_draws, outlier_means
from scheduler.policies.problem import build_problem
from scheduler.policies.robust import SAMPLES, spreads
from tests.scheduler.mixed_requests import grouped_request

Played = dict[tuple[tuple[int, ...], ...], list[npt.NDArray[np.int64]]]


def _recorded(monkeypatch: pytest.MonkeyPatch) -> Played:
    """The draws each plan (its queues) is played on, call by call, as the judgment asks."""
    played: Played = {}
    original = outlier_means

    def recording(problem: Any, queues: Any, draws: Draws, reserve: bool) -> Any:
        key = tuple(tuple(queue) for queue in queues)
        played.setdefault(key, []).append(np.array(draws.steps))
        return original(problem, queues, draws, reserve)

    monkeypatch.setattr(robust_fast, "outlier_means", recording)
    return played


def _swapped(placement: Placement, queues: tuple[tuple[int, ...], ...]) -> Placement:
    """``placement`` carrying ``queues`` with the first two queues' first trajectories swapped."""
    moved = [list(queue) for queue in queues]
    moved[0][0], moved[1][0] = moved[1][0], moved[0][0]
    return dataclasses.replace(placement, queues=tuple(tuple(queue) for queue in moved), at_once="")


def test_each_plan_is_played_on_the_draws_in_order_each_draw_once(monkeypatch: pytest.MonkeyPatch) -> None:
    request = grouped_request()
    problem, spread = build_problem(request), spreads(request.trajectories)
    assert spread is not None
    placement = lpt.opening(request, problem, "HEURISTIC").placement
    played = _recorded(monkeypatch)
    with clock.frozen():
        judged = robust_fast.at_once_judged(problem, request, placement, spread, float("inf"))
    assert judged.candidate is not None  # a candidate was built and weighed
    whole = outlier_draws(spread, request.seed).steps
    assert len(played) == 2  # the plan and the candidate
    assert sum(len(calls) for calls in played.values()) >= 3  # the plan's timed block, then more
    for calls in played.values():
        rows = np.concatenate(calls)
        assert np.array_equal(rows, whole[: len(rows)])


def test_the_candidate_handed_on_keeps_its_means_on_the_first_draws(monkeypatch: pytest.MonkeyPatch) -> None:
    request = grouped_request()
    problem, spread = build_problem(request), spreads(request.trajectories)
    assert spread is not None
    placement = lpt.opening(request, problem, "HEURISTIC").placement
    with clock.frozen():
        first = robust_fast.at_once_judged(problem, request, placement, spread, float("inf"))
        candidate = first.candidate
        assert candidate is not None
        # a second judgment of the same batch, of the candidate's plan with two trajectories swapped
        # between its H100s: too close to tell apart on the candidate's draws, so they are extended
        other = _swapped(placement, candidate.queues)
        played = _recorded(monkeypatch)
        again = robust_fast.at_once_judged(problem, request, other, spread, float("inf"), candidate=candidate)
    whole = outlier_draws(spread, request.seed)
    assert again.candidate is not None
    assert len(candidate.means) < len(again.candidate.means)  # the candidate's draws extended
    for kept in (candidate, again.candidate):
        assert kept is not None
        count = len(kept.means)
        assert 0 < count <= SAMPLES
        first_draws = Draws(whole.steps[:count], whole.stretch)
        expected = outlier_means(problem, kept.queues, first_draws, request.kv_admission)
        assert np.array_equal(kept.means, expected)
    assert played  # the second judgment played its own side
    for queues, calls in played.items():  # from its first draw; the candidate's from its next one
        start = len(candidate.means) if queues == candidate.queues else 0
        rows = np.concatenate(calls)
        assert np.array_equal(rows, whole.steps[start : start + len(rows)])
