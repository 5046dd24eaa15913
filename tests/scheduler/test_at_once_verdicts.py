"""What one at-once judgment (``robust_fast.at_once_judged``) says and plays: the verdict on a plan that
is the candidate itself, a candidate given by an earlier judgment of the batch played on from where
it was left, and a candidate not built once the draws would not fit after it.

Found by mutation testing (mutants13, docs/experiments.md): each test fails on a one-line change of
``at_once_judged`` that every other test let pass.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest

from scheduler import clock
from scheduler.policies import robust_fast
from scheduler.policies.base import Placement
from scheduler.policies.ordering import order_queues
from scheduler.policies.outlier_draws import Draws, outlier_means
from scheduler.policies.problem import build_problem
from scheduler.policies.robust import spreads
from tests.scheduler.fake_clock import ManualClock
from tests.scheduler.mixed_requests import grouped_request

QUEUES = tuple(tuple(range(w, 64, 4)) for w in range(4))  # every kind a share: not the candidate
Queues = tuple[tuple[int, ...], ...]


def _played(monkeypatch: pytest.MonkeyPatch, queues: Queues | None = None) -> list[int]:
    """The draws of each play the judgment makes (of ``queues`` alone where given), in order."""
    played: list[int] = []

    def counted(problem: Any, plan: Any, draws: Draws, reserve: bool) -> Any:
        if queues is None or tuple(map(tuple, plan)) == queues:
            played.append(len(draws.steps))
        return outlier_means(problem, plan, draws, reserve)

    monkeypatch.setattr(robust_fast, "outlier_means", counted)
    return played


def _draws_take_a_second(monkeypatch: pytest.MonkeyPatch) -> None:
    """A planning clock that moves only as the judgment plays: a second a draw played."""
    fake = ManualClock()
    monkeypatch.setattr(clock, "now", fake.now)

    def slow(problem: Any, plan: Any, draws: Draws, reserve: bool) -> Any:
        fake.seconds += len(draws.steps)
        return outlier_means(problem, plan, draws, reserve)

    monkeypatch.setattr(robust_fast, "outlier_means", slow)


def _given(request: Any, problem: Any, spread: Any) -> robust_fast.Candidate:
    """A candidate as the first judgment of the batch (of ``QUEUES``) leaves it."""
    first_plan = Placement(QUEUES, "HEURISTIC", finish_s=tuple(problem.finishes(QUEUES, True)))
    with clock.frozen():
        first = robust_fast.at_once_judged(problem, request, first_plan, spread, 60.0)
    assert first.candidate is not None
    return first.candidate


def _other(problem: Any) -> Placement:
    """Another plan than ``QUEUES``, still at once: the Ascends' shares on the H100s."""
    other = tuple(reversed(QUEUES))
    return Placement(other, "HEURISTIC", finish_s=tuple(problem.finishes(other, True)))


def test_a_plan_that_is_the_candidate_itself_is_judged_kept() -> None:
    request = grouped_request()
    problem = build_problem(request)
    assignment = robust_fast.fastest_first(problem)
    assert assignment is not None
    queues, finishes = order_queues(problem, assignment, request.kv_admission)
    placement = Placement(queues, "HEURISTIC", finish_s=tuple(finishes))
    with clock.frozen():
        judged = robust_fast.at_once_judged(problem, request, placement, spreads(request.trajectories), 60.0)
    assert judged.placement.queues == placement.queues
    assert judged.placement.at_once == robust_fast.KEPT


def test_a_candidate_given_is_played_on_from_the_draws_it_was_played_on_already(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    request = grouped_request()
    problem, spread = build_problem(request), spreads(request.trajectories)
    first = _given(request, problem, spread)
    played = _played(monkeypatch, first.queues)  # draws of the candidate's queues the second judgment played
    with clock.frozen():
        second = robust_fast.at_once_judged(problem, request, _other(problem), spread, 60.0, 0.0, first)
    assert second.candidate is not None
    before = len(first.means)
    assert np.array_equal(second.candidate.means[:before], first.means)
    assert sum(played) == len(second.candidate.means) - before  # none of the first's played again


def test_the_candidate_must_be_built_and_ordered_by_when_the_least_plays_must_start(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A draw of a plan seems to take a second: with 19 s to the deadline, the 4 timed draws end at
    4 s, and the 12 plays a verdict needs at the least (``CLEAR``, 8 a side, the 4 aside) must start
    by 7 s; building the candidate is given that, not the deadline itself, and so is ordering it."""
    request = grouped_request()
    problem = build_problem(request)
    placement = Placement(QUEUES, "HEURISTIC", finish_s=tuple(problem.finishes(QUEUES, True)))
    _draws_take_a_second(monkeypatch)
    built_by: list[float] = []
    fastest = robust_fast._fastest

    def building(problem: Any, deadline: float) -> Any:
        built_by.append(deadline)
        return fastest(problem, deadline)

    monkeypatch.setattr(robust_fast, "_fastest", building)
    robust_fast.at_once_judged(problem, request, placement, spreads(request.trajectories), 19.0)
    assert built_by == [7.0]


def test_a_plan_that_is_the_candidate_given_is_kept_without_a_draw_played(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    request = grouped_request()
    problem, spread = build_problem(request), spreads(request.trajectories)
    candidate = _given(request, problem, spread)
    played = _played(monkeypatch)
    same = Placement(candidate.queues, "HEURISTIC", finish_s=candidate.finishes)
    with clock.frozen():
        judged = robust_fast.at_once_judged(problem, request, same, spread, 60.0, 0.0, candidate)
    assert judged.placement.at_once == robust_fast.KEPT
    assert played == []


@pytest.mark.parametrize(
    ("deadline", "verdicts"), [(15.9, {robust_fast.UNJUDGED}), (16.0, set(robust_fast.JUDGED))]
)
def test_a_judgment_with_a_candidate_given_starts_only_plays_that_end_by_the_deadline(
    monkeypatch: pytest.MonkeyPatch, deadline: float, verdicts: set[str]
) -> None:
    """The candidate given says a draw takes a second and has none played: the least a verdict
    needs (``CLEAR``, 8 draws of each plan) ends 16 s from now. On a clock that then stands still,
    a deadline 16 s away is met, one 15.9 s away is not, and nothing is played for it."""
    request = grouped_request()
    problem, spread = build_problem(request), spreads(request.trajectories)
    candidate = _given(request, problem, spread)._replace(means=np.zeros(0), draw_s=1.0)
    monkeypatch.setattr(clock, "now", ManualClock().now)
    played = _played(monkeypatch)
    judged = robust_fast.at_once_judged(problem, request, _other(problem), spread, deadline, 0.0, candidate)
    assert judged.placement.at_once in verdicts
    assert bool(played) == (deadline == 16.0)


def test_a_plan_is_first_played_on_every_draw_the_candidate_given_was_played_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    request = grouped_request()
    problem, spread = build_problem(request), spreads(request.trajectories)
    given = _given(request, problem, spread)
    on_16 = outlier_means(problem, given.queues, given.draws.block(0, 16), True)
    candidate = given._replace(means=on_16)
    mine = _other(problem)
    played = _played(monkeypatch, mine.queues)
    with clock.frozen():
        robust_fast.at_once_judged(problem, request, mine, spread, 60.0, 0.0, candidate)
    assert played[0] == 16


def test_the_candidate_handed_on_says_the_pace_its_plays_were_measured_at(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The candidate given says a draw is free; each draw played then takes a second."""
    request = grouped_request()
    problem, spread = build_problem(request), spreads(request.trajectories)
    candidate = _given(request, problem, spread)._replace(means=np.zeros(0), draw_s=0.0)
    _draws_take_a_second(monkeypatch)
    judged = robust_fast.at_once_judged(problem, request, _other(problem), spread, 1_000.0, 0.0, candidate)
    assert judged.candidate is not None
    assert judged.candidate.draw_s == 1.0


NOISE = np.array([0.01, -0.01, 0.02, -0.02, 0.0, 0.01, -0.01, 0.0])  # paired gaps' scatter, 8 draws


@pytest.mark.parametrize(
    ("gap", "draws", "clear"),
    [
        (1.0, 8, True),  # the plan ends a second later on every draw: the candidate, at CLEAR draws
        (-1.0, 8, False),  # a second sooner: the plan
        (1.0, 7, None),  # fewer than CLEAR draws: no verdict yet
        (0.0, 8, None),  # the same on every draw: never clear
        (0.01, 8, None),  # about 2 standard errors of the mean gap: within CLEAR_Z (3)
        (-0.01, 8, None),
    ],
)
def test_a_difference_is_clear_from_clear_draws_beyond_clear_z_standard_errors(
    gap: float, draws: int, clear: bool | None
) -> None:
    theirs = np.full(draws, 10.0)
    mine = theirs + gap + (NOISE[:draws] if gap else 0.0)
    assert robust_fast._clear(mine, theirs) is clear


def test_a_candidate_given_up_at_its_pace_is_none_to_its_public_callers() -> None:
    with clock.frozen():  # a deadline already passed: given up at the first unit
        assert robust_fast.fastest_first(build_problem(grouped_request()), deadline=-1.0) is None


def test_the_next_kind_shares_the_rest_of_the_batch_once_the_fastest_is_full() -> None:
    """One H100 of 24 slots takes the 24 longest; the two Ascends then share the other 40 by their
    load, each back among its own kind after a unit (mutants13: among the fastest kind's, one
    Ascend took units until its slots ran out). Through the general path (a problem with a
    restriction: the service's own takes ``fastest_plain``), here by saying it has one."""
    problem = dataclasses.replace(
        build_problem(grouped_request(h100s=1, ascends=2, slots=24)), unrestricted=False
    )
    assignment = robust_fast.fastest_first(problem)
    assert assignment is not None
    assert [len(queue) for queue in assignment] == [24, 20, 20]
