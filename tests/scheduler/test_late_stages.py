"""Stages that start only where they fit do not start, or stop, once the policy's deadline has
passed: the length-blind plans are not dealt and the bar plays no draws
(``scheduler.policies.blindbar``), and cpsat's repair stops building a move's model
(``scheduler.policies.exchange``).

On a starved host each ran past the deadline, 50-160 ms and up to 330 ms (docs/experiments.md,
budget47). The planning clock here moves only where the test says: one stage takes the whole
budget and ten seconds more, so what follows it finds the deadline passed.
"""

from __future__ import annotations

from typing import Any

import pytest

from scheduler import clock
from scheduler.benchgen import bench_request
from scheduler.planner import plan
from scheduler.policies import blindbar, exchange, lpt, sat
from scheduler.policies.problem import build_problem
from scheduler.policies.round_robin import RoundRobinPolicy
from tests.scheduler.fake_clock import ManualClock, count_calls, slow_stage
from tests.scheduler.mixed_requests import one_wide_prompt_request


@pytest.mark.parametrize("policy", ["lpt", "cpsat"])
def test_the_bar_asks_the_draws_only_while_the_deadline_has_not_passed(
    monkeypatch: pytest.MonkeyPatch, policy: str
) -> None:
    asked = count_calls(monkeypatch, blindbar, "outlived")
    with clock.frozen():
        plan(one_wide_prompt_request(), policy)
    assert asked  # with time left, the bar asks the draws of this plan
    asked.clear()
    # the last stage before the bar ends past the deadline
    slow_stage(monkeypatch, lpt, "at_once_judged", 10.0)  # lpt.settled: cpsat judges lpt's plan there too
    result = plan(one_wide_prompt_request(), policy)
    assert not asked
    assert result.workers  # still a plan: the one the bar was given


@pytest.mark.parametrize("policy", ["lpt", "cpsat"])
def test_the_blind_plans_are_not_dealt_once_the_deadline_has_passed(
    monkeypatch: pytest.MonkeyPatch, policy: str
) -> None:
    dealt = count_calls(monkeypatch, RoundRobinPolicy, "plan")
    with clock.frozen():
        plan(one_wide_prompt_request(), policy)
    assert dealt  # with time left, round robin's plan is dealt for the bar
    dealt.clear()
    slow_stage(monkeypatch, lpt, "lpt_start", 10.0)
    result = plan(one_wide_prompt_request(), policy)
    assert not dealt
    assert result.workers


def test_a_repair_move_whose_model_is_still_being_built_at_the_deadline_is_abandoned(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    problem = build_problem(bench_request(1_024, 16, seed=1))
    with clock.frozen():
        assignment, _, finishes = lpt.lpt_start(problem, False, 1.0, True)
    # one worker's constraints take the whole budget and more
    fake = slow_stage(monkeypatch, exchange, "_worker_constraints", 10.0)
    solved = count_calls(monkeypatch, exchange, "solve")
    by_finish = sorted(problem.active, key=lambda w: (finishes[w], w))
    group = [by_finish[-1], *by_finish[:3]]  # the slowest worker and the three fastest, as a 1+3 move
    assert exchange._resolve(problem, assignment, finishes, group, 1.0, seed=1) is None
    assert fake.seconds == 10.0  # one worker's constraints built, then the move abandoned
    assert not solved


@pytest.mark.parametrize("solved_until_s", [10.0, 1.0], ids=["past-the-deadline", "to-the-deadline-itself"])
def test_a_repair_move_solved_up_to_the_deadline_is_not_ordered_after_it(
    monkeypatch: pytest.MonkeyPatch, solved_until_s: float
) -> None:
    """The move's solve ends at the deadline (its wall limit), past it or to the instant (a deadline
    reached has passed): its workers' queues are not ordered past it (``best_order``, each a play of
    candidate orders), and the move is dropped."""
    problem = build_problem(bench_request(1_024, 16, seed=1))
    with clock.frozen():
        assignment, _, _ = lpt.lpt_start(problem, False, 1.0, True)
    first, last = problem.active[0], problem.active[-1]
    assignment[first], assignment[last] = assignment[first] + assignment[last], []  # one worker trails
    queues = tuple(tuple(i for u in units for i in problem.units[u].members) for units in assignment)
    finishes = tuple(problem.finishes(queues, False))
    fake = ManualClock()
    monkeypatch.setattr(clock, "now", fake.now)
    resolve = exchange._resolve

    def solved_to_the_deadline(*args: Any) -> Any:
        moved = resolve(*args)
        fake.seconds = solved_until_s
        return moved

    monkeypatch.setattr(exchange, "_resolve", solved_to_the_deadline)
    ordered = count_calls(monkeypatch, exchange, "best_order")
    solved = count_calls(monkeypatch, exchange, "solve")
    result = exchange.improve(problem, assignment, queues, finishes, False, 1.0, seed=1)
    assert solved  # a move was solved, to the deadline
    assert result is None
    assert not ordered


def test_a_repair_move_is_not_solved_with_less_time_left_than_its_model_took_to_build(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each worker's constraints take 0.1 s: the 1+3 move's model is built by 0.4 s and, with
    0.1 s left of 0.5, not handed to the solver, which loads a copy as large before its limits run;
    with 0.5 s left of 0.9 it is."""
    problem = build_problem(bench_request(1_024, 16, seed=1))
    with clock.frozen():
        assignment, _, finishes = lpt.lpt_start(problem, False, 1.0, True)
    fake = slow_stage(monkeypatch, exchange, "_worker_constraints", 0.1)
    solved = count_calls(monkeypatch, exchange, "solve")
    by_finish = sorted(problem.active, key=lambda w: (finishes[w], w))
    group = [by_finish[-1], *by_finish[:3]]
    assert exchange._resolve(problem, assignment, finishes, group, 0.5, seed=1) is None
    assert not solved
    fake.seconds = 0.0
    exchange._resolve(problem, assignment, finishes, group, 0.9, seed=1)
    assert solved


def test_a_repair_move_is_priced_from_its_first_booleans_and_not_built_on_where_it_would_not_fit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The first move has no earlier one to be priced by: its model is priced from the pace its
    booleans are made at, every ``PRICE_EVERY`` units (0.1 s each here), the rest of the model at
    ``AFTER_BOOLEANS`` times the booleans. Priced past the deadline after its first units, no more
    booleans are made, no worker's constraints built, nothing solved; priced within it, it goes on."""
    problem = build_problem(bench_request(1_024, 16, seed=1))
    with clock.frozen():
        assignment, _, finishes = lpt.lpt_start(problem, False, 1.0, True)
    fake = slow_stage(monkeypatch, exchange, "_booleans", 0.1)
    made: list[int] = []  # the units each call makes booleans for
    booleans = exchange._booleans

    def counted(*args: Any) -> Any:
        made.append(len(args[2]))
        return booleans(*args)

    monkeypatch.setattr(exchange, "_booleans", counted)
    constrained = count_calls(monkeypatch, exchange, "_worker_constraints")
    solved = count_calls(monkeypatch, exchange, "solve")
    by_finish = sorted(problem.active, key=lambda w: (finishes[w], w))
    group = [by_finish[-1], by_finish[0]]  # the slowest worker and the fastest, as the first move
    parts = -(-sum(len(assignment[w]) for w in group) // exchange.PRICE_EVERY)
    priced = 0.1 * parts * (1.0 + exchange.AFTER_BOOLEANS)
    assert parts > 1
    assert exchange._resolve(problem, assignment, finishes, group, 0.9 * priced, seed=1) is None
    assert (made, constrained, solved) == ([exchange.PRICE_EVERY], [], [])
    fake.seconds = 0.0
    exchange._resolve(problem, assignment, finishes, group, 2.0 * priced + 1.0, seed=1)
    assert len(made) == 1 + parts
    assert constrained
    assert solved


def test_a_repair_solve_is_given_the_time_left_less_the_solvers_own_start_and_stop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """CP-SAT returns past its wall limit by its own start and stop (``SOLVE_STOP_S``): the limit
    it is given is what is left less that, and with no more than that left it is not solved."""
    problem = build_problem(bench_request(1_024, 16, seed=1))
    with clock.frozen():
        assignment, _, finishes = lpt.lpt_start(problem, False, 1.0, True)
    monkeypatch.setattr(clock, "now", ManualClock().now)  # the build takes no time on it
    limits: list[float] = []
    solve = sat.solve  # what exchange solves with

    def limit_read(solver: Any, *args: Any) -> Any:
        limits.append(solver.parameters.max_time_in_seconds)
        return solve(solver, *args)

    monkeypatch.setattr(exchange, "solve", limit_read)
    by_finish = sorted(problem.active, key=lambda w: (finishes[w], w))
    group = [by_finish[-1], by_finish[0]]
    exchange._resolve(problem, assignment, finishes, group, 0.05, seed=1)
    assert limits == [pytest.approx(0.05 - exchange.SOLVE_STOP_S)]
    exchange._resolve(problem, assignment, finishes, group, exchange.SOLVE_STOP_S, seed=1)
    assert len(limits) == 1  # no solve with only the solver's start and stop left


@pytest.mark.parametrize(("deadline_s", "handed"), [(0.8, False), (0.9, True)])
def test_a_repair_move_left_exactly_its_build_time_is_not_solved(
    monkeypatch: pytest.MonkeyPatch, deadline_s: float, handed: bool
) -> None:
    """The 1+3 move's model is built by 0.4 s (0.1 s a worker): 0.4 s left, what it took, is too
    little; 0.5 s is enough."""
    problem = build_problem(bench_request(1_024, 16, seed=1))
    with clock.frozen():
        assignment, _, finishes = lpt.lpt_start(problem, False, 1.0, True)
    slow_stage(monkeypatch, exchange, "_worker_constraints", 0.1)
    solved = count_calls(monkeypatch, exchange, "solve")
    by_finish = sorted(problem.active, key=lambda w: (finishes[w], w))
    group = [by_finish[-1], *by_finish[:3]]
    exchange._resolve(problem, assignment, finishes, group, deadline_s, seed=1)
    assert bool(solved) == handed


def test_a_repair_move_with_less_than_5_ms_left_builds_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    problem = build_problem(bench_request(1_024, 16, seed=1))
    with clock.frozen():
        assignment, _, finishes = lpt.lpt_start(problem, False, 1.0, True)
    slow_stage(monkeypatch, exchange, "_worker_constraints", 0.0)
    built = count_calls(monkeypatch, exchange, "_worker_constraints")
    by_finish = sorted(problem.active, key=lambda w: (finishes[w], w))
    group = [by_finish[-1], *by_finish[:3]]
    assert exchange._resolve(problem, assignment, finishes, group, 0.004, seed=1) is None
    assert not built
