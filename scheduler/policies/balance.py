"""Levelling below the makespan: spread the work of the workers that do not decide it.

A makespan-optimal plan is one of many: only the workers that finish last are pinned down, and the
search (bands, repair) is free to leave the others unevenly loaded, some idle for most of the run.
On predicted lengths that costs nothing; on true lengths it does. A trajectory predicted short but
actually long lands, in such a plan, on whichever worker happened to be crowded, and runs in a big,
slow batch; measured on the real math100 trace (4 x H100), ``cpsat`` finished 5% after ``lpt`` for
exactly that reason, with two of its four workers done at 3 s of a 10.5 s plan.

So, the plan fixed, when some worker would sit idle for more than half the run, the workers that
finish within ``CRITICAL`` of the makespan keep their queues, and the units of all the others are
placed again among those others by ``lpt``, which balances them. The result is kept only when the
slowest of those others finishes sooner than before: the predicted makespan never changes, and the
non-critical workers end up with even finishes rather than arbitrary ones.
"""

from __future__ import annotations

from collections.abc import Sequence

from scheduler.policies.lpt_assign import lpt_assignment
from scheduler.policies.ordering import order_queues
from scheduler.policies.problem import Problem

CRITICAL = 0.02  # workers finishing within 2% of the makespan keep their queues
IDLE = 0.5  # level only when some worker would sit idle for more than half the makespan


def level_below(
    problem: Problem, queues: Sequence[tuple[int, ...]], finishes: Sequence[float], reserve: bool
) -> tuple[tuple[tuple[int, ...], ...], tuple[float, ...]]:
    """``queues`` with the non-critical workers' units re-placed by lpt when that evens them out."""
    makespan = max(finishes, default=0.0)
    rest = [w for w in problem.active if finishes[w] < (1.0 - CRITICAL) * makespan]
    if len(rest) < 2 or min(finishes[w] for w in rest) >= IDLE * makespan:
        return tuple(queues), tuple(finishes)
    unit_of = _unit_of(problem)
    units = sorted({unit_of[i] for w in rest for i in queues[w]})
    members = frozenset(rest)
    sub = Problem(
        problem.costs,
        problem.prompts,
        problem.steps,
        tuple(
            u._replace(allowed=tuple(w for w in u.allowed if w in members))
            for u in (problem.units[k] for k in units)
        ),
        tuple(rest),
        engine=problem.engine,
    )
    placed, played = order_queues(sub, lpt_assignment(sub), reserve)
    if max(played[w] for w in rest) >= max(finishes[w] for w in rest):
        return tuple(queues), tuple(finishes)
    new_queues, new_finishes = list(queues), list(finishes)
    for w in rest:
        new_queues[w], new_finishes[w] = placed[w], played[w]
    return tuple(new_queues), tuple(new_finishes)


def _unit_of(problem: Problem) -> list[int]:
    """The unit of every trajectory (itself, unless prefix affinity grouped it)."""
    owner = [0] * len(problem.steps)
    for k, unit in enumerate(problem.units):
        for i in unit.members:
            owner[i] = k
    return owner
