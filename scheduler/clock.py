"""The clock a plan's budget is read from: the host's wall clock, or a frozen one for replays.

Why. Every search step of the planner decides whether it fits by timing itself against the plan's
budget (``request.time_budget_s``): how many cpsat rounds and repair moves run, whether an order is
hedged or a plan placed again, whether the robust choice is made. That is what the service needs,
a plan within its budget whatever the host's load. A replay needs the opposite: the same trace and
seed must give the same figures on any host, and on a loaded host the same plan lost its hedge,
its rounds or its repair (docs/replay.md).

How. Budget decisions read ``now()``, never ``time.perf_counter()`` directly. By default ``now()``
is the wall clock. Inside ``frozen()`` it never moves: every step fits, each step's measured cost
is zero, and what is left of a budget is all of it. Each phase then runs to the extent its own
counts allow (``bandsearch.ROUNDS``, ``exchange.MAX_MOVES``, draws, candidate orders, the bisections'
precision), which is what an idle host does with the replay's budget, and every CP-SAT solve stops
only on its deterministic limit (``solves_on_wall_clock``), itself computed from the budget alone.
The plan is then a function of the request: its budget still sets those limits, the host does not.

A context variable, not an argument: some fifty reads in a dozen modules, most several calls below
the policy, would otherwise each take a clock parameter. It is set only by the code that asks for
it (``service.replay.harness``), so a thread or process planning for the service, which never sets it,
keeps the wall clock. Reported wall times (``Plan.wall_time_s``) always read the real clock.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

_FROZEN: ContextVar[bool] = ContextVar("scheduler_clock_frozen", default=False)


def now() -> float:
    """Seconds on the planning clock: ``time.perf_counter()``, or 0.0 inside ``frozen()``."""
    return 0.0 if _FROZEN.get() else time.perf_counter()


def solves_on_wall_clock() -> bool:
    """Whether CP-SAT solves keep their wall-clock safety limit (not inside ``frozen()``)."""
    return not _FROZEN.get()


@contextmanager
def frozen() -> Iterator[None]:
    """Plan by counts, not time, in this context (module doc): reproducible whatever the host's load."""
    token = _FROZEN.set(True)
    try:
        yield
    finally:
        _FROZEN.reset(token)
