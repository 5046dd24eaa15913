"""The steps that draw the plan's rows first are priced at what is left to draw (``plan_draws.priced``):
cpsat's baseline (``cpsat.BASELINE_COST``) and the at-once hedge's check (``robust_fast.CHECK_COST``),
as the bar's draws are (``blindbar.draws_price``).

Why. The plan's draws are drawn once and shared (``Problem.draws``): cpsat's baseline reads the 32
rows after the at-once hedge drew its first 8 to 32, and the hedge's second judgment reads the rows
its first drew; each was priced as if it drew them all, and skipped in plans that had the time for
what was left (docs/experiments.md, review52b). Here only what the test names takes time on a fake
clock, with an lpt phase of a second, so prices read as lpt phases.
"""

from __future__ import annotations

import dataclasses
from types import ModuleType
from typing import Any

import pytest

from scheduler import clock
from scheduler.policies import cpsat, lpt, robust, robust_fast
from scheduler.policies.blindbar import DRAWS_COST
from scheduler.policies.cpsat import BASELINE_COST
from scheduler.policies.plan_draws import DRAWING, SAMPLES, priced
from scheduler.policies.problem import build_problem
from scheduler.policies.robust import Spread, spreads
from scheduler.policies.robust_fast import CHECK_COST, TIMED
from scheduler.policies.round_robin import RoundRobinPolicy
from scheduler.types import PlanRequest
from tests.scheduler.fake_clock import ManualClock, count_calls
from tests.scheduler.mixed_requests import grouped_request

PHASE_S = 1.0  # the lpt start's time on the fake clock: prices read as lpt phases
MARGIN = 0.01  # of an lpt phase: either side of a price


def _spread_of(request: PlanRequest) -> Spread:
    spread = spreads(request.trajectories)
    assert spread is not None
    return spread


@pytest.mark.parametrize("cost", [BASELINE_COST, CHECK_COST, DRAWS_COST], ids=["baseline", "check", "bar"])
@pytest.mark.parametrize("stop", [TIMED, SAMPLES], ids=["timed", "all"])
def test_a_price_lies_between_its_cost_less_its_rows_drawing_and_its_cost(cost: float, stop: int) -> None:
    """Never above what the step cost before rows were shared, never below what is left once its
    rows are in hand (positive: the plays after the drawing are charged in any case), and lower
    the more of its own rows the plan holds."""
    request = grouped_request()
    draws = build_problem(request).draws(_spread_of(request), request.seed)
    prices = []
    for held in range(SAMPLES + 1):
        draws.rows(held)
        prices.append(priced(cost, draws, stop, PHASE_S))
    assert prices[0] == cost * PHASE_S
    assert prices == sorted(prices, reverse=True)
    assert min(prices) == (cost - DRAWING * stop / SAMPLES) * PHASE_S > 0


def test_a_price_is_naught_on_a_frozen_clock_whatever_is_in_hand() -> None:
    """The replay's plans do not move: every price reads 0 with an lpt phase of 0, as before."""
    request = grouped_request()
    draws = build_problem(request).draws(_spread_of(request), request.seed)
    draws.rows(TIMED)
    assert priced(BASELINE_COST, draws, SAMPLES, 0.0) == priced(CHECK_COST, draws, TIMED, 0.0) == 0.0


def _check_started(monkeypatch: pytest.MonkeyPatch, held: int, deadline: float) -> bool:
    """Whether the at-once hedge started its check (``_runs_at_once``) of a plan whose whole batch
    fits at once, with ``deadline`` left on a clock standing at 0, the plan holding ``held`` rows."""
    request = grouped_request()
    problem, spread = build_problem(request), _spread_of(request)
    placement = RoundRobinPolicy().plan(request, problem)
    problem.draws(spread, request.seed).rows(held)
    monkeypatch.setattr(clock, "now", ManualClock().now)
    checked = count_calls(monkeypatch, robust_fast, "_runs_at_once")
    robust_fast.at_once_judged(problem, request, placement, spread, deadline, PHASE_S)
    return bool(checked)


OWN_HELD_S = (CHECK_COST - DRAWING * TIMED / SAMPLES) * PHASE_S  # its first TIMED rows in hand


def test_the_at_once_check_holding_its_first_rows_starts_where_drawing_them_would_not_have_fitted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert _check_started(monkeypatch, TIMED, OWN_HELD_S + MARGIN)
    assert not _check_started(monkeypatch, 0, OWN_HELD_S + MARGIN)  # the same time left, none held


def test_the_at_once_check_is_credited_only_the_rows_it_draws_before_its_pace_is_known(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Rows past its first ``TIMED`` are drawn (or not) after its pace is known: holding all 32
    saves it no more than holding its own."""
    assert not _check_started(monkeypatch, SAMPLES, OWN_HELD_S - MARGIN)


def _slow(
    monkeypatch: pytest.MonkeyPatch, fake: ManualClock, module: ModuleType, name: str, s: float
) -> None:
    """``module.name`` taking ``s`` seconds of ``fake`` before it runs."""
    original = getattr(module, name)

    def slow(*args: Any, **kwargs: Any) -> Any:
        fake.seconds += s
        return original(*args, **kwargs)

    monkeypatch.setattr(module, name, slow)


def _baseline_played(monkeypatch: pytest.MonkeyPatch, request: PlanRequest, left: float) -> tuple[bool, int]:
    """Whether cpsat played its lpt plan's baseline (``robust.baseline``) where ``left`` lpt phases
    were left when it was priced, and the rows the plan held then: the lpt start takes a phase,
    placing again (``lpt.calibrated``, after the at-once hedge's judgment) the time that leaves
    ``left``, too little for it to place anything, and nothing else takes any time."""
    fake = ManualClock()
    monkeypatch.setattr(clock, "now", fake.now)
    budget = 3 * PHASE_S  # the hedge is reached with two phases left: its check and draws fit
    _slow(monkeypatch, fake, lpt, "lpt_start", PHASE_S)
    _slow(monkeypatch, fake, lpt, "calibrated", budget - PHASE_S - left * PHASE_S)
    held: list[int] = []
    original = robust.baseline

    def played(problem: Any, queues: Any, spread: Spread, *args: Any) -> Any:
        held.append(problem.draws(spread, request.seed).drawn)  # as priced: nothing drawn since
        return original(problem, queues, spread, *args)

    monkeypatch.setattr(cpsat, "baseline", played)
    problem = build_problem(request)
    cpsat.CpSatPolicy().plan(dataclasses.replace(request, time_budget_s=budget), problem)
    return bool(held), (held or [0])[0]


def test_cpsats_baseline_holding_the_hedges_rows_plays_with_less_than_its_whole_price_left(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    played, held = _baseline_played(monkeypatch, grouped_request(), BASELINE_COST - MARGIN)
    assert played
    assert held >= TIMED  # the at-once hedge's rows, read for nothing
    least = BASELINE_COST - DRAWING * held / SAMPLES  # its price with those rows in hand
    assert not _baseline_played(monkeypatch, grouped_request(), least - MARGIN)[0]


def test_cpsats_baseline_holding_no_rows_still_needs_its_whole_price_left(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One device kind: the at-once hedge is not asked, no row is drawn before the baseline."""
    one_kind = grouped_request(h100s=4, ascends=0)
    assert not _baseline_played(monkeypatch, one_kind, BASELINE_COST - MARGIN)[0]
    assert _baseline_played(monkeypatch, one_kind, BASELINE_COST + MARGIN) == (True, 0)
