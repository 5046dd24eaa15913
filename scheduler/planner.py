"""The planning entry point: request in, plan out, whatever the policy.

    plan(request, policy) = prepare (validate -> problem -> lower bound)
                            -> place and order (the policy)
                            -> predicted finish per worker (scheduler.finish) -> Plan

``request.time_budget_s`` bounds the whole call for search policies: ``cpsat`` gets what validation
and the bound left of it, less ``REPORT_SHARE`` of it, kept for the final bookkeeping (each worker's
predicted finish and the plan's report) after the policy returns.

The service and the replay CLI plan only through this module. Everything a plan reports besides placement
is computed here, the same way for every policy, so plans of different policies compare fairly: the
predicted makespan of each is the engine model played on its queues with the predicted lengths.

Planning one request with several policies (the service plans the requested one and the
``round_robin`` baseline) shares the preparation: ``prepare(request)`` once, then
``plan(request, policy, prepared=...)`` per policy. Validation and the bound are more than half of a
heuristic plan's time, and the budget then bounds all of it, counted from the preparation's start.

The budget is read on ``scheduler.clock``: the wall clock, or, inside ``clock.frozen()`` (the
replay), one that never moves, so that a plan depends on its request and not on the host's load.
Reported wall times always read the wall clock.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass

from scheduler import clock, giveup
from scheduler.gcpause import collector_paused
from scheduler.lowerbound import LowerBound, lower_bound
from scheduler.policies import get_policy
from scheduler.policies.base import Policy
from scheduler.policies.problem import Problem, problem_and_bound_columns
from scheduler.types import Plan, PlanRequest, WorkerPlan, trajectory_keys
from scheduler.validation import validate_request

DEFAULT_POLICY = "cpsat"
MIN_SEARCH_S = 0.001  # a search policy always gets a positive budget (it then keeps its lpt plan)
BOUND_SHARE = 0.25  # of what validation and the problem left of the budget (``bound_deadlines``), after
# which the bound's whole-trajectory check stops probing (``lowerbound.lower_bound``'s ``deadline``):
# the service's 1,024 x 16 batches (one predicted length per prompt) took ~50-70 ms of its 80 ms
# there, leaving the plan ~1 ms, too little even to hedge it. The bound it reports is then what was
# proven by that time.
FLUID_SHARE = 0.5  # of the same, after which the bound's fluid search stops too: it takes a few
# milliseconds for a few worker kinds, but 14-16 kinds took 0.3 s whatever the budget
FLOOR_RATIO = 2.0  # the policy's floor (its lpt start, then the report) as a multiple of what validation
# and the problem took on the same host: 1.5-3.6 at 1,024 x 16 and 4,096 x 32 (quiet, sched55), the low
# end so that the bound keeps its shares wherever the plan can still fit (``bound_deadlines``). One
# figure, not one a policy: the service plans round robin and the asked policy from one preparation,
# 1.5-2.8 x together where queues run at once (quiet host; lpt or cpsat alone 1.1-2.1, round robin
# 0.3-0.7), and queues in waves make every policy's floor 3-7.6 x, round robin's too (its report plays
# them): the regime, not the policy, sets it (docs/experiments.md, sched56)
REPORT_SHARE = 0.02  # of the budget, kept for building the plan's report after the policy returns
# (1.5-2 ms at 4,096 x 32, 9-12 ms at 32,768 x 256): a search policy spends all it is given


@dataclass(frozen=True, slots=True)
class Prepared:
    """What every policy's plan of one request shares, computed once by ``prepare``."""

    request: PlanRequest  # the validated request these belong to
    problem: Problem  # the numeric view every length-aware policy reads
    bound: LowerBound  # the physical lower bound, reported with every plan
    started: float  # ``clock.now()`` when preparation began: the budget counts from here
    spent_s: float  # wall seconds the preparation took (part of every plan's reported wall time)
    keys: tuple[str, ...]  # each trajectory's key, by position


def prepare(request: PlanRequest) -> Prepared:
    """Validate ``request`` and compute its problem and lower bound, for one or more ``plan`` calls.

    Raises ``InvalidInputError`` naming the bad field, exactly as ``plan`` would, and
    ``DeadlinePassedError`` naming the stage where ``request.hard_deadline`` passed (``scheduler.giveup``).
    """
    started, wall_started = clock.now(), time.perf_counter()
    with collector_paused(), giveup.giving_up_at(_hard_deadline(request)):  # gc: see scheduler.gcpause
        with giveup.stage("validation"):
            validate_request(request)
        with giveup.stage("problem"):
            problem, columns = problem_and_bound_columns(request)
        with giveup.stage("bound"):
            deadline, fluid_deadline = bound_deadlines(started, request.time_budget_s)
            bound = lower_bound(
                request.trajectories,
                request.inventory,
                request.excluded_workers,
                request.prefix_affinity,
                deadline=deadline,
                fluid_deadline=fluid_deadline,
                columns=columns,
            )
        with giveup.stage("keys"):  # apart from the collection at the pause's end (deadline49)
            keys = trajectory_keys(request.trajectories)
    return Prepared(request, problem, bound, started, time.perf_counter() - wall_started, keys)


def bound_deadlines(started: float, budget_s: float) -> tuple[float, float]:
    """The bound's two deadlines (whole-trajectory probes, fluid search) on ``scheduler.clock``:
    ``BOUND_SHARE`` and ``FLUID_SHARE`` of what is left of ``budget_s`` (counted from ``started``)
    once validation and the problem are built, from now; neither later than the moment that leaves
    the policy's floor (``FLOOR_RATIO`` times what validation and the problem took) the rest of the
    budget; now itself where nothing is left.

    Why of what is left. The shares were of the whole budget from ``started``, sized for a host
    where validation and the problem take a few ms of the 80 ms default. On a loaded host they take
    the wall time of a descheduled process, not their CPU: 27-49 ms at 4,096 x 32 (7 ms of CPU, load
    27), so every bound started past its 20 ms share and reported its limits (a)-(c) alone, while the
    policy got all that was left. Counted from what is left, the bound and the policy divide the
    time the host gives them in the proportion they were sized for (docs/experiments.md, sched54).

    Why the floor. What no budget cuts (the policy's lpt start, the report) takes about twice what
    validation and the problem took, on the same host at the same load. Where that no longer fits
    in what is left, the plan overruns whatever the bound does, and every ms the bound spends is
    added to the overrun: at 4,096 x 32 and 80 ms on a loaded host the shares of what was left cost
    the bench's lpt p50 116 -> 157 ms (review54b). There the bound stops at its limits (a)-(c) and
    what (d) proved by then, as before sched54: an answer on time is worth more than a complete
    bound figure. On a quiet host, and on a frozen clock (the replay), the floor leaves the shares
    as they were (docs/experiments.md, sched55)."""
    now = clock.now()
    left = max(0.0, started + budget_s - now)
    latest = max(now, started + budget_s - FLOOR_RATIO * (now - started))
    return min(now + BOUND_SHARE * left, latest), min(now + FLUID_SHARE * left, latest)


def plan(request: PlanRequest, policy: str = DEFAULT_POLICY, *, prepared: Prepared | None = None) -> Plan:
    """Plan ``request`` with the policy named ``policy``.

    With ``prepared`` (from ``prepare(request)``) validation and the bound are not redone, and the
    budget counts from the preparation's start, so it bounds every plan made from it together.
    Raises ``InvalidInputError`` (``UnknownNameError`` for an unknown policy) naming the bad field;
    a rejected request has no effect anywhere, since the core holds no state. Raises
    ``DeadlinePassedError`` naming the stage where ``request.hard_deadline`` passed (``scheduler.giveup``).
    """
    chosen = get_policy(policy)
    if prepared is None:
        prepared = prepare(request)
    elif prepared.request is not request:
        raise ValueError("prepared belongs to another request: call prepare(request) for this one")
    with giveup.giving_up_at(_hard_deadline(request)):
        return _planned(request, chosen, prepared)


def _planned(request: PlanRequest, chosen: Policy, prepared: Prepared) -> Plan:
    """``plan``'s work once the request is prepared: the policy's placement, then the report."""
    started, problem = prepared.started, prepared.problem
    # The budget is the whole call's: a search policy gets what preparation (and earlier plans) left.
    spent = clock.now() - started
    left = max(MIN_SEARCH_S, request.time_budget_s * (1.0 - REPORT_SHARE) - spent)
    mark = time.perf_counter()
    placement = chosen.plan(dataclasses.replace(request, time_budget_s=left), problem)
    with giveup.stage("report"):
        finishes = placement.finish_s or tuple(problem.finishes(placement.queues, request.kv_admission))
    keys = prepared.keys
    workers = tuple(
        WorkerPlan(
            worker_id=worker.worker_id,
            items=tuple([keys[i] for i in queue]),
            predicted_finish_s=finish,
        )
        for worker, queue, finish in zip(request.inventory.workers, placement.queues, finishes, strict=True)
    )
    return Plan(
        policy=chosen.name,
        workers=workers,
        predicted_makespan_s=max(finishes),
        lower_bound_s=prepared.bound.value_s,
        status=placement.status,
        wall_time_s=prepared.spent_s + (time.perf_counter() - mark),
        kv_admission=request.kv_admission,
        dispatch_order=tuple([keys[i] for i in placement.dispatch_order]),
        at_once=placement.at_once,
    )


def _hard_deadline(request: PlanRequest) -> float | None:
    """``request.hard_deadline`` once it is known to be one (``validate_request`` checks it first:
    until then, a bad value must fail as invalid input, not be compared)."""
    value = request.hard_deadline
    return value if isinstance(value, float | int) and not isinstance(value, bool) else None
