"""The planning entry point: request in, plan out, whatever the policy.

    plan(request, policy) = validate -> lower bound -> place and order (the policy)
                            -> predicted finish per worker (scheduler.finish) -> Plan

``request.time_budget_s`` bounds the whole call for search policies: ``cpsat`` gets what validation
and the bound left of it (plus the final bookkeeping, a few milliseconds).

The service and the replay CLI call only this function. Everything a plan reports besides placement
is computed here, the same way for every policy, so plans of different policies compare fairly: the
predicted makespan of each is the engine model played on its queues with the predicted lengths.
"""

from __future__ import annotations

import dataclasses
import time

from scheduler.lowerbound import lower_bound
from scheduler.policies import get_policy
from scheduler.policies.problem import build_problem
from scheduler.types import Plan, PlanRequest, WorkerPlan
from scheduler.validation import validate_request

DEFAULT_POLICY = "cpsat"
MIN_SEARCH_S = 0.001  # a search policy always gets a positive budget (it then keeps its lpt plan)


def plan(request: PlanRequest, policy: str = DEFAULT_POLICY) -> Plan:
    """Plan ``request`` with the policy named ``policy``.

    Raises ``InvalidInputError`` (``UnknownNameError`` for an unknown policy) naming the bad field;
    a rejected request has no effect anywhere, since the core holds no state.
    """
    started = time.perf_counter()
    chosen = get_policy(policy)
    validate_request(request)
    problem = build_problem(request)
    bound = lower_bound(
        request.trajectories, request.inventory, request.excluded_workers, request.prefix_affinity
    )
    # The budget is the whole plan's: a search policy gets what validation and the bound left of it.
    left = max(MIN_SEARCH_S, request.time_budget_s - (time.perf_counter() - started))
    placement = chosen.plan(dataclasses.replace(request, time_budget_s=left), problem)
    finishes = placement.finish_s or tuple(problem.finishes(placement.queues, request.kv_admission))
    trajectories = request.trajectories
    workers = tuple(
        WorkerPlan(
            worker_id=worker.worker_id,
            items=tuple(trajectories[i].key for i in queue),
            predicted_finish_s=finish,
        )
        for worker, queue, finish in zip(request.inventory.workers, placement.queues, finishes, strict=True)
    )
    return Plan(
        policy=chosen.name,
        workers=workers,
        predicted_makespan_s=max(finishes),
        lower_bound_s=bound.value_s,
        status=placement.status,
        wall_time_s=time.perf_counter() - started,
        kv_admission=request.kv_admission,
        dispatch_order=tuple(trajectories[i].key for i in placement.dispatch_order),
    )
