"""Giving up at the caller's hard deadline: the planner's checks between (and inside) its stages.

Why. ``request.time_budget_s`` is what the plan may spend: every stage that can be cut starts only
where it fits (docs/solver.md, "What the budget cannot cut"). The stages that cannot be cut run
whatever the budget, and on a CPU-starved host they are slow in wall time: a 1,024-trajectory cpsat
plan given ~100 ms ran ~600 ms at load 12-16, and the service answered its caller 504 long after the
caller had stopped waiting (docs/experiments.md, "A plan that overruns the caller's deadline"). A
plan finished after the caller's deadline is read by nobody, so past it the planner should stop, not
finish.

How. ``PlanRequest.hard_deadline`` (seconds on ``time.perf_counter``, the service's clock for the
caller's deadline; None: no deadline) is set here, for the plan's context, by ``giving_up_at``;
``check()`` raises ``DeadlinePassedError`` naming the stage it is in (``stage``; ``check_at`` names one)
once it has passed. The planner checks at the end of each stage, and the floor's long loops check
between their parts (a queue's plays, a candidate plan, a bound's probe), so the planner stops at most
one part past the deadline; a CP-SAT search, one call, is stopped from outside once it has passed
(``deadline_and_clock``, ``scheduler.policies.sat_watch``). A context variable, as ``scheduler.clock``'s
frozen flag, for the same reason: the loops that check are several calls below the policy. Without a
hard deadline ``check`` returns at once and reads no clock, so a plan without one is the same plan.

The hard deadline is read on the wall clock even inside ``clock.frozen()``: it is the caller's
real time, not the plan's budget. Tests read another clock through ``reading``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from scheduler.errors import DeadlinePassedError

_AT: ContextVar[float | None] = ContextVar("scheduler_hard_deadline", default=None)
_WALL: ContextVar[Callable[[], float]] = ContextVar("scheduler_hard_clock", default=time.perf_counter)
_STAGE: ContextVar[str] = ContextVar("scheduler_stage", default="planning")


@contextmanager
def giving_up_at(deadline: float | None) -> Iterator[None]:
    """Give up at ``deadline`` (``time.perf_counter`` seconds; None: never) in this context; an
    outer deadline stays in force where ``deadline`` is None (a plan inside the caller's ``prepare``)."""
    if deadline is None:
        yield
        return
    token = _AT.set(deadline)
    try:
        yield
    finally:
        _AT.reset(token)


@contextmanager
def reading(wall: Callable[[], float]) -> Iterator[None]:
    """Read the hard deadline on ``wall`` instead of ``time.perf_counter`` (tests: a clock that jumps)."""
    token = _WALL.set(wall)
    try:
        yield
    finally:
        _WALL.reset(token)


@contextmanager
def stage(name: str) -> Iterator[None]:
    """Run the stage ``name``: checks inside it name it, and the hard deadline is checked at its end."""
    token = _STAGE.set(name)
    try:
        yield
        check()
    finally:
        _STAGE.reset(token)


def check() -> None:
    """Raise ``DeadlinePassedError`` naming the current ``stage`` where the hard deadline has passed."""
    check_at(_STAGE.get())


def check_at(name: str) -> None:
    """``check``, naming the stage ``name`` whatever stage it runs in: a check between stages, such as
    the service's last one before its publish, where no work would run inside a ``stage`` block."""
    deadline = _AT.get()
    if deadline is None:
        return
    late_s = _WALL.get()() - deadline
    if late_s >= 0:
        raise DeadlinePassedError(name, deadline, late_s)


def deadline_and_clock() -> tuple[float, Callable[[], float]] | None:
    """This context's hard deadline and the clock it is read on, for another thread to read (the
    CP-SAT watch: ``scheduler.policies.sat_watch``); None without a hard deadline, where ``check``
    reads no clock either."""
    deadline = _AT.get()
    return None if deadline is None else (deadline, _WALL.get())
