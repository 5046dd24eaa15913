"""Whether a plan's queues run at once is found once a plan (``Problem.runs_at_once``): the orders'
hedge asks it of lpt's plan and the at-once hedge asks it of the same queues next, 1.5-2.5 ms each at
4,096 x 32 before a judgment the service's 80 ms default had no time for (docs/experiments.md,
budget50). Kept, it is the verdict ``ends_at_once`` gives each queue.
Past the deadline no hedge reads it, and the lpt start's count of its trajectories in waves, which
asks it, is not made (1-2.4 ms at 1,024 x 16 to 4,096 x 32; docs/experiments.md, quant56).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np
import pytest

from scheduler import at_once, clock
from scheduler.policies import lpt, robust_fast, robust_order
from scheduler.policies import problem as problem_module
from scheduler.policies.problem import build_problem
from scheduler.policies.robust import spreads
from tests.scheduler.mixed_requests import grouped_request


@pytest.mark.parametrize("long_cot", [False, True])  # at once, and in waves
def test_each_queues_verdict_is_the_one_ends_at_once_gives_it_alone(long_cot: bool) -> None:
    request = grouped_request(long_cot=long_cot)
    problem = build_problem(request)
    rng = np.random.default_rng(4)
    for _ in range(5):
        owner = rng.integers(0, len(problem.costs), len(problem.steps))
        queues = [np.flatnonzero(owner == w).tolist() for w in range(len(problem.costs))] + [[]]
        alone = [
            not queue
            or at_once.ends_at_once([(problem.costs[w % 4], *problem.lengths(queue))], request.kv_admission)[
                0
            ]
            is not None
            for w, queue in enumerate(queues)
        ]
        kept = build_problem(request).runs_at_once(list(queues[:-1]), request.kv_admission)
        assert list(kept) == alone[:-1]


def test_the_same_queues_are_not_played_again() -> None:
    problem = build_problem(grouped_request())
    queues = tuple(tuple(range(w, 64, 4)) for w in range(4))
    first = problem.runs_at_once(queues, True)
    assert problem.runs_at_once([list(q) for q in queues], True) is first  # lists or tuples alike
    assert problem.runs_at_once(queues, False) is not first  # another admission: its own verdict


def test_the_orders_hedge_and_the_at_once_hedge_share_one_pass_over_lpts_queues(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    asked: list[int] = []
    for module in (problem_module, robust_order, robust_fast):  # wherever ends_at_once is looked up
        if hasattr(module, "ends_at_once"):
            monkeypatch.setattr(module, "ends_at_once", _counted(module.ends_at_once, asked))
    request = grouped_request()
    problem = build_problem(request)
    spread = spreads(request.trajectories)
    with clock.frozen():
        opened = lpt.opening(request, problem, "HEURISTIC")
        orders = robust_order.hedged(problem, request, opened.placement, spread, math.inf, opened.phase_s)
        judged = robust_fast.at_once_hedge(problem, request, orders, spread, math.inf, opened.phase_s)
    assert judged.at_once == robust_fast.FASTEST  # both hedges ran on lpt's plan
    assert len(asked) == 1  # one pass over its queues answered both


def _counted(original: Any, calls: list[int]) -> Any:
    def counted(*args: Any) -> Any:
        calls.append(1)
        return original(*args)

    return counted


def test_an_empty_queue_runs_at_once() -> None:
    problem = build_problem(grouped_request())
    queues = [list(range(64)), [], [], []]  # the short chains all on one H100: its cache holds them
    assert problem.runs_at_once(queues, True) == (True, True, True, True)
    assert robust_fast._runs_at_once(problem, queues, True)


def test_one_queue_in_waves_is_enough_for_the_plan_not_to_run_at_once() -> None:
    problem = build_problem(grouped_request(long_cot=True))
    n = len(problem.steps)
    queues = [list(range(n - 3)), [n - 3], [n - 2], [n - 1]]  # one long chain alone on each of three
    assert problem.runs_at_once(queues, True) == (False, True, True, True)
    assert not robust_fast._runs_at_once(problem, queues, True)


def test_an_lpt_start_past_its_deadline_leaves_its_queues_in_waves_uncounted() -> None:
    request = grouped_request(long_cot=True)  # lpt's queues run in waves: the count is not 0
    spread = spreads(request.trajectories)
    late = dataclasses.replace(request, time_budget_s=0.0)  # on the frozen clock: passed at the start
    problem = build_problem(late)
    with clock.frozen():
        counted = lpt.opening(request, build_problem(request), "HEURISTIC").waves  # the deadline ahead
        opened = lpt.opening(late, problem, "HEURISTIC")
        plan, end, phase_s = opened.placement, opened.deadline, opened.phase_s
        hedged = [robust_order.hedged(problem, late, plan, spread, end, phase_s, n) for n in (0, counted)]
    assert counted > 0
    assert opened.waves == 0  # not counted past the deadline: only a hedge before it reads the count
    assert hedged[0] is hedged[1] is opened.placement  # past it no hedge prices a plan, counted or not
