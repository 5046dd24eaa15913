"""The first decode step at which a refused queue head passes projected-peak admission.

Why. A sidecar polls: it re-tests a blocked head between completions, and waiting lowers the head's
projection (admitted ``d`` steps later, its context at every later step is ``d`` tokens smaller),
so it may start the head before the next completion. The simulator and the planner's finish model
make that step an event, so all three start the head at the same step (docs/simulator.md).

How. The projection is not monotone in the wait (the head also ends later, beside running
sequences that have grown), so there is no bisection; but each refusal bounds the wait from below.
``RunningPeak.overflow`` names an absolute step ``first`` where the projection passes the cache by
``excess``. The KV held after that step falls by exactly one token per step waited while the head
still runs there and the step is still ahead, so the head cannot fit for ``min(excess, first -
step)`` more steps; where the head would have ended before ``first``, the running set alone
overflows there, and nothing fits until ``first``. An overflow at the very next step never clears
by waiting (every running sequence grows). Jumping by these bounds reaches the earliest step that
fits, each jump one O(running) test. Running sequences that outlive their predicted ends while the
head waits only raise the projection, so a step found from the ends known now is a lower bound the
caller re-tests when it gets there.
"""

from __future__ import annotations

import bisect

from scheduler.admission import RunningPeak


def earliest_fit(
    peak: RunningPeak, step: int, context: int, remaining: int, capacity: int, until: int
) -> tuple[int | None, int]:
    """The first absolute step in ``[step, until)`` at which a candidate of ``context`` tokens that
    runs ``remaining`` steps fits beside ``peak``'s running set (``RunningPeak.fits``), or None;
    and the first step at which it may fit, for a caller that knows how long that bound holds
    (``refused_until``).

    ``until``: the next step at which the running set changes (a completion or an eviction), where
    the caller tests admission anyway.
    """
    at = step
    while at < until:
        over = peak.overflow(at, context - at, at + remaining, capacity)
        if over is None:
            return at, at
        if over[0] == at + 1:
            return None, at  # the running set grows a token each per step: only a completion helps
        at = refused_until(peak, at, remaining, over)
    return None, at


def refused_until(peak: RunningPeak, at: int, remaining: int, over: tuple[int, int]) -> int:
    """The first step at which a candidate refused at ``at`` with ``over`` (``RunningPeak.overflow``)
    may fit, as long as no running sequence that ends after ``over[0]`` stops (the running set
    only loses sequences at their ends, and one that outlives its prediction only adds KV).

    Past the candidate's end the running set alone overflows: nothing fits until that step is past.
    At the candidate's end, that KV grows with the wait until the end passes the next running end.
    Before it, the KV held falls by one token per step waited, until that step is no longer ahead.
    A refusal at ``at + 1`` gives ``at + 1``: only a completion clears it (``earliest_fit``).
    """
    first, excess = over
    end = at + remaining
    if first > end:
        return first
    bound = at + min(excess, first - at)
    if first == end:
        later = bisect.bisect_left(peak.ends, end)
        if later < len(peak.ends):
            bound = max(bound, peak.ends[later] - remaining + 1)
    return bound


def search_from(peak: RunningPeak, at: int, remaining: int, over: tuple[int, int]) -> int:
    """Where ``earliest_fit`` starts for a candidate refused at ``at`` with ``over``, beside the same
    running set: ``refused_until``, or -1 where the refusal was at the very next step (every running
    sequence grows a token a step, so that step's overflow only grows: only a completion helps).

    Why: an event's admission ends at a refused head, and searching its first fitting step from the
    next step tests again what the refusal already settled, one O(running) test (the simulator's
    engine: a quarter of its tests in the headline replay; ``scheduler.finish`` does the same).
    """
    if over[0] == at + 1:
        return -1
    return refused_until(peak, at, remaining, over)
