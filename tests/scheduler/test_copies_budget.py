"""Where no full band round fits what is left of a plan's budget, cpsat copies a sub-plan instead
of returning the lpt plan; where one fits, nothing changes.

The planning clock is a ``ManualClock`` on which the lpt start takes a second and nothing else any
time (``fake_clock.slow_lpt_phase``): what is left after it reads in lpt phases. 1,024 x 32 bench
batches split in two (sub-pools of 16 workers, ``replicate.SUB_WORKERS``), as 4,096 x 32 does.
"""

from __future__ import annotations

import dataclasses
import gc
from typing import Any

import pytest

import scheduler.policies.bandsearch as bandsearch
import scheduler.policies.cpsat as cpsat_module
import scheduler.policies.lpt as lpt_module
from scheduler.benchgen import bench_request
from scheduler.planner import REPORT_SHARE, plan
from scheduler.policies import copybudget, replicate
from scheduler.policies.problem import Problem
from scheduler.types import Plan, PlanRequest
from tests.scheduler.fake_clock import count_calls, slow_lpt_phase


def _request(left: float, trajectories: int = 1_024) -> PlanRequest:
    """A bench batch whose budget leaves cpsat's search ``left`` lpt phases after its lpt start."""
    budget = (left + 1.0) / (1.0 - REPORT_SHARE)
    return dataclasses.replace(bench_request(trajectories, 32, seed=3), time_budget_s=budget)


def _keys(planned: Plan) -> list[str]:
    return sorted(key for wp in planned.workers for key in wp.items)


@pytest.mark.parametrize("left", [2.9, 3.2])
def test_where_round_one_would_not_fit_a_smaller_batch_gets_copies_not_the_lpt_plan(
    monkeypatch: pytest.MonkeyPatch, left: float
) -> None:
    """2.9 lpt phases left: a full round (``ROUND_FIXED_S`` + 3 phases) does not start, and the lpt
    plan (1.2x the bound at 4,096 x 32) was returned; at 3.2 it started and, on a host that slow,
    was cut short (``FIRST_ROUND``). A K = 2 sub-plan's round (1.5 phases) and the copies
    (``LEAN_RESERVE``) fit, and its copies beat the lpt plan."""
    request = _request(left=left)
    slow_lpt_phase(monkeypatch, lpt_module)
    spread = count_calls(monkeypatch, replicate, "spread_out")
    copied = plan(request, "cpsat")
    lpt = plan(request, "lpt")
    assert spread == [1]
    assert copied.status in {"OPTIMAL", "FEASIBLE"}
    assert copied.predicted_makespan_s < lpt.predicted_makespan_s
    assert _keys(copied) == sorted(t.key for t in request.trajectories)


def test_the_sub_plan_is_its_rounds_alone_where_its_lpt_start_would_not_fit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The sub-plan's own lpt start (half a phase here) and round would not fit before the copies'
    reserve: its rounds run alone, barred by the whole batch's lpt plan, and no second plan runs."""
    slow_lpt_phase(monkeypatch, lpt_module)
    plans = count_calls(monkeypatch, cpsat_module.CpSatPolicy, "plan")
    spread = count_calls(monkeypatch, replicate, "spread_out")
    plan(_request(left=2.9), "cpsat")
    assert spread == [1]
    assert plans == [1]


def test_where_round_one_fits_the_rounds_run_on_the_whole_batch_as_before(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    slow_lpt_phase(monkeypatch, lpt_module)
    copies = count_calls(monkeypatch, cpsat_module.CpSatPolicy, "_copied")
    rounds = count_calls(monkeypatch, bandsearch, "rounds")
    planned = plan(_request(left=copybudget.FIRST_ROUND + 0.5), "cpsat")
    assert copies == []
    assert rounds == [1]
    assert planned.status in {"OPTIMAL", "FEASIBLE"}


def test_where_neither_a_round_nor_a_sub_plan_fits_the_lpt_plan_stands(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """1.5 phases left: copies would start, but the sub-plan's round (ROUND_FIXED_S + 1.5 phases)
    does not fit before the copies' reserve; the lpt plan is returned, as it was."""
    request = _request(left=1.5)
    slow_lpt_phase(monkeypatch, lpt_module)
    spread = count_calls(monkeypatch, replicate, "spread_out")
    fallback = plan(request, "cpsat")
    assert spread == []
    assert fallback.status == "FALLBACK_LPT"
    assert fallback.predicted_makespan_s <= plan(request, "lpt").predicted_makespan_s


def test_a_large_batch_with_too_little_left_for_a_whole_sub_plan_gets_the_sub_plans_rounds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """At ``MIN_UNITS`` or more, 1.9 lpt phases (under 2, once ``COPY_RESERVE``) no longer rule copies out:
    the sub-plan's rounds (a K-th of a phase each) fit, and their copies beat the lpt plan."""
    monkeypatch.setattr(replicate, "MIN_UNITS", 512)
    monkeypatch.setattr(replicate, "SUB_WORKERS", 8)  # K = 4: rounds of 0.02 s + 0.75 phases
    request = _request(left=1.9)
    slow_lpt_phase(monkeypatch, lpt_module)
    copied = plan(request, "cpsat")
    assert copied.status in {"OPTIMAL", "FEASIBLE"}
    assert copied.predicted_makespan_s < plan(request, "lpt").predicted_makespan_s


def test_the_copies_are_dealt_and_played_with_the_cycle_collector_held(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Dealing and playing the copies (~20 ms at 4,096 x 32) comes after the sub-plan's last budget
    check: a full collection landing there (~23 ms, every few plans) ended plans 20% past their
    budget on a slow host. Nothing they build forms a cycle (``scheduler.gcpause``)."""
    slow_lpt_phase(monkeypatch, lpt_module)
    enabled: list[bool] = []
    deal, play = replicate.spread_out, Problem.finishes

    def dealt(*args: Any) -> Any:
        enabled.append(gc.isenabled())
        return deal(*args)

    def played(self: Problem, *args: Any) -> Any:
        if len(enabled) == 1:  # the first play after the dealing: the copies'
            enabled.append(gc.isenabled())
        return play(self, *args)

    monkeypatch.setattr(replicate, "spread_out", dealt)
    monkeypatch.setattr(Problem, "finishes", played)
    assert gc.isenabled()
    plan(_request(left=2.9), "cpsat")
    assert enabled == [False, False]  # the copies' dealing, then their play
    assert gc.isenabled()
