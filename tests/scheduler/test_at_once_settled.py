"""Which plan lpt's late stages settle on, and which plan cpsat returns, for each verdict of the at-once
hedge (``lpt.settled``, ``cpsat._stands``, ``cpsat._lpts_own``, ``cpsat._judging_kept``).

The verdicts here are scripted (a stand-in for ``at_once_judged`` that answers what the test says, on
a fake clock that moves only where the test says): each case is one branch of what a verdict decides,
which the end-to-end tests (``test_at_once_judged.py``, ``test_cpsat_at_once.py``) reach only on the
batches they happen to plan. Found by mutation testing (mutants13, docs/experiments.md): each test
fails on a one-line change of the code it names.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from scheduler import clock
from scheduler.policies import bandsearch, blindbar, cpsat, lpt, robust_fast
from scheduler.policies.base import Placement
from scheduler.policies.outlier_draws import LazyDraws
from scheduler.policies.problem import build_problem
from scheduler.policies.robust_fast import FASTEST, KEPT, UNJUDGED, Candidate, Judged
from tests.scheduler.fake_clock import ManualClock, slow_lpt_phase
from tests.scheduler.mixed_requests import grouped_request

HEDGED = Placement(((0, 1), (2,), (3,)), "HEURISTIC")  # lpt's plan, hedged
PLACED = Placement(((0,), (1, 2), (3,)), "HEURISTIC")  # placed again by kind
FAST = ((0, 1, 2, 3), (), ())  # the fastest-kind-first candidate's queues
NO_DRAWS = LazyDraws((np.ones(4), np.zeros(4), np.full(4, 8.0)), 0)  # never drawn from here


def _candidate(name: float) -> Candidate:
    """A candidate told apart by its ``draw_s`` (the tests compare which one was passed on)."""
    return Candidate(NO_DRAWS, FAST, (1.0, 0.0, 0.0), np.zeros(0), name)


class Script:
    """``lpt.at_once_judged`` and ``lpt.calibrated`` answering as scripted, each judgment taking its
    seconds on the fake clock; what each judgment was given as a candidate."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, verdicts: list[tuple[str, float]], placed: Placement):
        self.fake = ManualClock()
        self.verdicts: Iterator[tuple[str, float]] = iter(verdicts)
        self.given: list[Candidate | None] = []
        self.made: list[Candidate] = []
        monkeypatch.setattr(clock, "now", self.fake.now)
        monkeypatch.setattr(lpt, "at_once_judged", self.judged)
        monkeypatch.setattr(lpt, "calibrated", lambda *args: placed)

    def judged(self, problem: Any, request: Any, placement: Placement, *rest: Any) -> Judged:
        verdict, seconds = next(self.verdicts)
        given = rest[3] if len(rest) > 3 else None
        self.given.append(given)
        self.fake.seconds += seconds
        made = _candidate(float(len(self.made)))
        self.made.append(made)
        if verdict == FASTEST:
            return Judged(Placement(FAST, placement.status, at_once=FASTEST), made)
        if verdict == "no candidate":  # the plan does not run at once: not asked, no candidate
            return Judged(placement, None)
        return Judged(dataclasses.replace(placement, at_once=verdict), given or made)


def _settled(script: Script) -> lpt.Settled:
    return lpt.settled(build_problem(grouped_request()), grouped_request(), HEDGED, None, 100.0, 1.0)


def test_placing_again_that_makes_lpts_plan_beat_the_candidate_keeps_the_plan_placed_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    script = Script(monkeypatch, [(FASTEST, 0.0), (KEPT, 0.0)], PLACED)
    late = _settled(script)
    assert late.final.queues == PLACED.queues
    assert late.final.at_once == KEPT


def test_a_second_judgment_out_of_time_leaves_the_candidate_the_first_took(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    script = Script(monkeypatch, [(FASTEST, 0.0), (UNJUDGED, 0.0)], PLACED)
    late = _settled(script)
    assert late.final.queues == FAST
    assert late.final.at_once == FASTEST
    assert late.placed is PLACED


def test_a_second_judgment_out_of_time_after_lpts_plan_was_kept_leaves_lpts_judged_plan(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # one rule with cpsat's ``_stands`` (review50a): a plan the judgment had no time for never
    # replaces one it judged; the plan placed again went out unjudged here before
    script = Script(monkeypatch, [(KEPT, 0.0), (UNJUDGED, 0.0)], PLACED)
    late = _settled(script)
    assert late.final.queues == HEDGED.queues
    assert late.final.at_once == KEPT
    assert late.placed is PLACED  # placed again, only not returned


def test_the_plan_placed_again_goes_on_unjudged_where_neither_judgment_had_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    script = Script(monkeypatch, [(UNJUDGED, 0.0), (UNJUDGED, 0.0)], PLACED)
    late = _settled(script)
    assert (late.final.queues, late.final.at_once) == (PLACED.queues, UNJUDGED)


@pytest.mark.parametrize("first", [KEPT, FASTEST])
def test_lpt_and_cpsat_follow_one_rule_an_unjudged_plan_never_replaces_a_judged_one(
    monkeypatch: pytest.MonkeyPatch, first: str
) -> None:
    late = _settled(Script(monkeypatch, [(first, 0.0), (UNJUDGED, 0.0)], PLACED))
    searched = Placement(((3,), (0, 1), (2,)), "OPTIMAL", at_once=UNJUDGED)
    assert late.final.at_once == first  # lpt: its judged plan, not the plan placed again
    assert not cpsat._stands(searched, late.final)  # cpsat: lpt's judged plan, not the search's


def test_the_plan_placed_again_is_judged_against_the_first_judgments_candidate(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    script = Script(monkeypatch, [(FASTEST, 0.0), (KEPT, 0.0)], PLACED)
    _settled(script)
    assert script.given == [None, script.made[0]]


def test_a_second_judgment_with_no_candidate_of_its_own_passes_the_first_ones_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    script = Script(monkeypatch, [(KEPT, 0.0), ("no candidate", 0.0)], PLACED)
    late = _settled(script)
    assert late.candidate is script.made[0]


def test_what_the_judgments_took_is_their_sum(monkeypatch: pytest.MonkeyPatch) -> None:
    script = Script(monkeypatch, [(KEPT, 2.0), (KEPT, 3.0)], PLACED)
    assert _settled(script).judging_s == 5.0


def test_what_one_judgment_took_is_told_where_nothing_was_placed_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    script = Script(monkeypatch, [(KEPT, 2.0)], HEDGED)
    late = _settled(script)
    assert late.judging_s == 2.0
    assert late.final.at_once == KEPT


def _placement(queues: tuple[tuple[int, ...], ...], verdict: str) -> Placement:
    return Placement(queues, "OPTIMAL", at_once=verdict)


@pytest.mark.parametrize(
    ("searched", "lpts", "stands"),
    [
        (KEPT, KEPT, True),  # both judged, the candidate beat neither: the searched plan goes on
        (UNJUDGED, UNJUDGED, True),  # neither judged: the searched plan goes on, as before the hedge
        (UNJUDGED, "", True),  # lpt's not asked either
        (UNJUDGED, KEPT, False),  # not over lpt's judged plan
        (UNJUDGED, FASTEST, False),
        (FASTEST, KEPT, False),  # the candidate beat it: lpt's own plan instead
        ("", "", True),  # not asked (no quantiles, one kind)
    ],
)
def test_a_searched_plan_stands_over_lpts_own_by_the_verdicts_of_both(
    searched: str, lpts: str, stands: bool
) -> None:
    assert cpsat._stands(_placement(HEDGED.queues, searched), _placement(PLACED.queues, lpts)) is stands


def test_a_searched_plan_that_is_lpts_own_does_not_stand_apart_from_it() -> None:
    assert not cpsat._stands(_placement(PLACED.queues, KEPT), _placement(PLACED.queues, UNJUDGED))


@pytest.mark.parametrize(("verdict", "kept_s"), [(KEPT, 4.0), (FASTEST, 4.0), (UNJUDGED, 0.0), ("", 0.0)])
def test_the_search_keeps_the_time_of_lpts_judgment_only_where_it_judged(verdict: str, kept_s: float) -> None:
    late = lpt.Settled(PLACED, _placement(PLACED.queues, verdict), None, 4.0)
    assert cpsat._judging_kept(late) == kept_s


def test_lpts_own_plan_returned_by_cpsat_says_the_status_the_search_gave_it() -> None:
    # the robust stage kept the lpt plan over the searched one (ROBUST_LPT): that is what it says
    fast = dataclasses.replace(PLACED, status="FALLBACK_LPT", at_once=KEPT)
    final, _ = cpsat._lpts_own("ROBUST_LPT", HEDGED, PLACED, fast)
    assert final.status == "ROBUST_LPT"
    assert final.at_once == KEPT
    assert final.queues == PLACED.queues


def test_the_searched_plan_is_judged_against_the_candidate_lpts_judgment_built(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake = slow_lpt_phase(monkeypatch, lpt)
    built: list[Candidate | None] = []
    given: list[Candidate | None] = []
    original = robust_fast.at_once_judged

    def lpts(problem: Any, request: Any, placement: Placement, *rest: Any) -> Judged:
        result = original(problem, request, placement, *rest)
        built.append(result.candidate)
        fake.seconds += 5.0
        return result

    def searched(problem: Any, request: Any, placement: Placement, *rest: Any) -> Judged:
        given.append(rest[3] if len(rest) > 3 else None)
        return original(problem, request, placement, *rest)

    def greedy(problem: Any, request: Any, best: Placement, *rest: Any, **kwargs: Any) -> Any:
        result = bandsearch_rounds(problem, request, best, *rest, **kwargs)
        fake.seconds = max(fake.seconds, rest[2])
        return result

    bandsearch_rounds = bandsearch.rounds
    monkeypatch.setattr(lpt, "at_once_judged", lpts)
    monkeypatch.setattr(cpsat, "at_once_judged", searched)
    monkeypatch.setattr(bandsearch, "rounds", greedy)
    cpsat.CpSatPolicy().plan(dataclasses.replace(grouped_request(), time_budget_s=100.0))
    assert len(given) == 1
    assert given[0] is not None
    assert given[0] is built[-1]  # not a candidate built and played again


def test_a_plan_the_bar_replaces_with_a_blind_one_still_says_what_the_at_once_hedge_did() -> None:
    request = dataclasses.replace(grouped_request(), time_budget_s=100.0)
    problem = build_problem(request)
    start = lpt.opening(request, problem, "HEURISTIC")
    blind = lpt.bar_plans(problem, request, start.blind, start.assignment, start.spread, float("inf"))
    assert blind is not None
    # every unit on the last Ascend: later on the predictions than the blind plan
    piled = tuple([() for _ in problem.costs[1:]] + [tuple(range(len(problem.units)))])
    judged = Placement(piled, "HEURISTIC", at_once=KEPT)
    with clock.frozen():
        chosen = blindbar.barred(problem, request, judged, blind, "BASELINE", None, float("inf"))
    assert chosen.queues == blind.queues  # the bar's blind plan
    assert chosen.at_once == KEPT


def test_the_bar_may_give_back_the_plan_before_placing_again_only_where_that_plan_is_sent() -> None:
    # the candidate won: the bar is not handed lpt's hedged plan to weigh against its blind plans
    assert lpt.placed_from(HEDGED, PLACED, Placement(FAST, "HEURISTIC", at_once=FASTEST)) is None
    assert lpt.placed_from(HEDGED, PLACED, dataclasses.replace(PLACED, at_once=KEPT)) is HEDGED
