"""How long a pull worker may hold an item before the sidecar takes it for abandoned.

The idle timeout notices a worker process that died; it cannot notice one that lives on (it keeps
calling ``/next`` or ``/leases``) but dropped an item, never to send ``/done`` or ``/fail`` for it.
Heartbeated on its behalf, that item's lease would never lapse and its step never end. So each item
handed out gets a bound, and one held past it is no longer heartbeated and is reported failed: it is
requeued at once (an attempt spent, so one that every worker drops is dead-lettered;
``pull_state.PullState.fail_abandoned``). Pure, for testing on its own.

The sidecar knows no exact bound on a legitimate trajectory. The plan's ``deadline_ms`` is a
prediction that heavy-tailed items overrun many times over; the item's ``max_new_tokens`` is a true cap
on its length, but needs a speed. So the bound is a flag (``--pull-hold-timeout``) as a floor, raised
for an item whose cap would take longer at a quarter of the decode rate measured on this worker:
a bound below what a long trajectory legitimately takes would abandon it on every attempt.
"""

from __future__ import annotations

from service.sidecar.holdings import Held, Holdings

DEFAULT_HOLD_TIMEOUT_S = 3600.0  # the floor: above the 40-minute trajectories the leases are built for
HOLD_SLOWDOWN = 4.0  # an item's cap is given this many times its time at the measured rate


def hold_bound_s(max_new_tokens: int, rate: float | None, floor_s: float) -> float:
    """Seconds the worker may hold an item capped at ``max_new_tokens``: ``floor_s``, or the cap at a
    quarter of ``rate`` (tokens/s per sequence, measured over ``/next`` to ``/done``, so queueing
    inside the worker is in it) when that is longer; the floor alone before any rate is measured."""
    if not rate:
        return floor_s
    return max(floor_s, HOLD_SLOWDOWN * max_new_tokens / rate)


def overdue(holdings: Holdings, floor_s: float) -> list[Held]:
    """The items handed out longer than their bound and not being reported (a report decides those)."""
    rate = holdings.decode_rate()
    return [
        held
        for held in holdings.all()
        if held.started
        and not held.completing
        and holdings.held_for(held) > hold_bound_s(held.lease.item.max_new_tokens, rate, floor_s)
    ]
