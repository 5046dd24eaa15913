"""How long an item may be held without an answer before the sidecar takes it for abandoned, in both modes.

Pull mode: the idle timeout notices a worker process that died; it cannot notice one that lives on (it
keeps calling ``/next`` or ``/leases``) but dropped an item, never to send ``/done`` or ``/fail`` for it.
Push mode: the engine watch notices an engine gone silent; it cannot notice one that answers ``/health``
and finishes other requests but never returns one (a stuck sequence: real vLLM and SGLang bugs do
this). Either way, heartbeated by the sidecar, that item's lease would never lapse and its step never
end. So each started item gets a bound, and one held past it is given up: pull mode reports it failed
(``pull_state.PullState.fail_abandoned``), push mode closes its request and reports it failed too
(``watchdog.EngineWatch.hangs``): an attempt spent in Redis either way, so an item that hangs every time
is dead-lettered after its attempts. Pure, for testing on its own.

The sidecar knows no exact bound on a legitimate trajectory. The plan's ``deadline_ms`` is a
prediction that heavy-tailed items overrun many times over; the item's ``max_new_tokens`` is a true cap
on its length, but needs a speed. So the bound is a flag (``--pull-hold-timeout``,
``--engine-hang-timeout``) as a floor, raised for an item whose cap would take longer at a quarter of
the decode rate measured on this worker: a bound below what a long trajectory legitimately takes would
abandon it on every attempt.
"""

from __future__ import annotations

from service.sidecar.holdings import Held, Holdings

DEFAULT_HOLD_TIMEOUT_S = 3600.0  # the floor: above the 40-minute trajectories the leases are built for
HOLD_SLOWDOWN = 4.0  # an item's cap is given this many times its time at the measured rate


def hold_bound_s(max_new_tokens: int, rate: float | None, floor_s: float) -> float:
    """Seconds the worker may hold an item capped at ``max_new_tokens``: ``floor_s``, or the cap at a
    quarter of ``rate`` (tokens/s per sequence, measured over ``/next`` to ``/done`` in pull mode, so
    queueing inside the worker is in it; over the engine request in push mode) when that is longer;
    the floor alone before any rate is measured."""
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
