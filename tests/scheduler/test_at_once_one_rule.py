"""One rule for the at-once hedge's verdicts in ``lpt`` and ``cpsat``: a plan the judgment had no
time for never replaces one it judged (review50a).

``lpt.settled`` judges lpt's hedged plan, places it again by kind, then judges the plan placed again.
Where the first judgment kept the hedged plan and the second ran out of time, the plan placed again
went out ``unjudged`` (mutants13's finding), while ``cpsat._stands`` refused an unjudged searched plan
over lpt's judged one. Both now keep the judged plan. The verdicts are scripted on a fake clock (a
stand-in for ``at_once_judged`` answering what the test says), so each case is the one branch.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest

from scheduler import clock
from scheduler.policies import cpsat, lpt
from scheduler.policies.base import Placement
from scheduler.policies.outlier_draws import LazyDraws
from scheduler.policies.problem import build_problem
from scheduler.policies.robust_fast import FASTEST, KEPT, UNJUDGED, Candidate, Judged
from tests.scheduler.fake_clock import ManualClock
from tests.scheduler.test_robust_fast import _request

HEDGED = Placement(((0, 1), (2,), (3,)), "HEURISTIC")  # lpt's plan, hedged
PLACED = Placement(((0,), (1, 2), (3,)), "HEURISTIC")  # placed again by kind
FAST = ((0, 1, 2, 3), (), ())  # the fastest-kind-first candidate's queues
CANDIDATE = Candidate(
    LazyDraws((np.ones(4), np.zeros(4), np.full(4, 8.0)), 0), FAST, (1.0, 0.0, 0.0), np.zeros(0), 0.0
)


def _settled(monkeypatch: pytest.MonkeyPatch, verdicts: list[str]) -> lpt.Settled:
    """``lpt.settled`` with its two judgments answering ``verdicts`` in turn."""
    answers = iter(verdicts)

    def judged(problem: Any, request: Any, placement: Placement, *rest: Any) -> Judged:
        verdict = next(answers)
        if verdict == FASTEST:
            return Judged(Placement(FAST, placement.status, at_once=FASTEST), CANDIDATE)
        return Judged(dataclasses.replace(placement, at_once=verdict), CANDIDATE)

    monkeypatch.setattr(clock, "now", ManualClock().now)
    monkeypatch.setattr(lpt, "at_once_judged", judged)
    monkeypatch.setattr(lpt, "calibrated", lambda *args: PLACED)
    return lpt.settled(build_problem(_request()), _request(), HEDGED, None, 100.0, 1.0)


def test_lpt_keeps_its_judged_hedged_plan_over_a_plan_placed_again_the_judgment_had_no_time_for(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    late = _settled(monkeypatch, [KEPT, UNJUDGED])
    assert late.final.queues == HEDGED.queues
    assert late.final.at_once == KEPT
    assert late.placed is PLACED  # placing again happened; it is only not returned


def test_lpt_keeps_the_candidate_the_first_judgment_took_over_an_unjudged_plan_placed_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    late = _settled(monkeypatch, [FASTEST, UNJUDGED])
    assert (late.final.queues, late.final.at_once) == (FAST, FASTEST)


def test_lpt_returns_the_plan_placed_again_where_its_own_judgment_kept_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    late = _settled(monkeypatch, [KEPT, KEPT])
    assert (late.final.queues, late.final.at_once) == (PLACED.queues, KEPT)


def test_lpt_returns_the_plan_placed_again_unjudged_where_neither_judgment_had_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    late = _settled(monkeypatch, [UNJUDGED, UNJUDGED])
    assert (late.final.queues, late.final.at_once) == (PLACED.queues, UNJUDGED)


@pytest.mark.parametrize("first", [KEPT, FASTEST])
def test_lpt_and_cpsat_follow_one_rule_an_unjudged_plan_never_replaces_a_judged_one(
    monkeypatch: pytest.MonkeyPatch, first: str
) -> None:
    late = _settled(monkeypatch, [first, UNJUDGED])
    unjudged_searched = Placement(((3,), (0, 1), (2,)), "OPTIMAL", at_once=UNJUDGED)
    assert late.final.at_once == first  # lpt: the judged plan, not the plan placed again
    assert not cpsat._stands(unjudged_searched, late.final)  # cpsat: lpt's judged plan, not the search's
