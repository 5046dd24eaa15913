"""The push sidecar's shutdown: stop claiming, hand back what did not start, let the rest finish, in time.

Apart from the main loop (``runner.py``) because it is a phase of its own with its own promise: the
whole shutdown keeps to ``drain_timeout_s`` (plus the release grace for the last release) from the
stop, Redis down included, so the pod's grace period is never overrun (docs/sidecar.md). The loop
decides when the drain starts and hands it what it left in flight (a claim still waiting on Redis, the
items running); the drain decides only how what is held goes back, and by when.
"""

from __future__ import annotations

import asyncio
import logging
import time

from service.sidecar.hand_backs import say_handed_back
from service.sidecar.holdings import Held
from service.sidecar.hurry import Hurry
from service.sidecar.in_flight import InFlight
from service.sidecar.session import WorkerSession
from service.sidecar.waits import done_unless

log = logging.getLogger("service.sidecar")


async def drain(
    session: WorkerSession,
    items: InFlight,
    claim: asyncio.Task[list[Held]] | None,
    hurry: Hurry,
    deadline: float,
    grace_s: float,
    died: str = "",
) -> float:
    """Release unstarted leases now and unfinished ones at ``deadline`` (``drain_timeout_s`` after the
    stop), or once ``hurry`` is set (a second signal); the monotonic time the drain must be over by,
    presence key deleted (``runner.Sidecar.run``). After ``hurry`` every wait ends within its grace
    (``hurry.py``): a claim still waiting is abandoned at once, a hand-back Redis has not taken by then
    is left to lapse.

    ``claim``: one the stop left waiting on Redis (``claim_landed``). A release Redis cannot take is
    abandoned, and those leases lapse and are requeued by the reaper as if the sidecar died; what the
    main loop was still doing at the stop (a hand-back of unstarted leases, bounded by the grace)
    comes out of the same time. ``died`` (after a loop died of a bug, ``supervision``): the hand-back
    says the sidecar died holding them: as with a restart's takeover, an item is refunded its attempt
    only the first time it comes back that way, so one that trips the bug at every run is
    dead-lettered, not handed round the fleet for ever.
    """
    holdings = session.holdings
    await claim_landed(claim, deadline, hurry.event)
    waiting = holdings.waiting()
    say_handed_back(waiting, "unstarted")  # what a claim in flight at the stop leased, too
    await session.hand_back(waiting, deadline - time.monotonic(), died, hurry)
    if items:
        left_s = max(0.0, deadline - time.monotonic())
        log.info("draining %d running items for up to %.1fs", len(items), left_s)
        await items.finish(left_s, hurry.event)
    unfinished = [h for h in holdings.all() if not h.completing]
    say_handed_back(unfinished, "unfinished")
    await session.hand_back(unfinished, deadline + grace_s - time.monotonic(), died, hurry)
    return hurry.ends(deadline + grace_s)


async def claim_landed(
    claim: asyncio.Task[list[Held]] | None, deadline: float, hurry: asyncio.Event | None = None
) -> None:
    """Wait until ``deadline``, or a second signal (``hurry``), for a claim the stop left waiting on
    Redis: what it leased is then held and handed back with the rest. One still waiting is cancelled:
    what it may yet lease is held by nobody, and lapses and is requeued by the reaper, as a release the
    drain abandons. One that failed (Redis refused it, dropped its reply, or a bug) is one warning
    naming the error: it was dropped unlogged, and its exception retrieved here is told nowhere else
    (the main loop, which logs a claim's failures, left it to the drain)."""
    if claim is None:
        return
    try:
        async with asyncio.timeout(max(0.0, deadline - time.monotonic())):
            if hurry is not None and not await done_unless(hurry, claim):
                claim.cancel()
                raise TimeoutError  # cut by the second signal, as by the deadline
            await claim
    except TimeoutError:
        log.warning("a claim still waiting on Redis was abandoned; what it leases lapses and is requeued")
    except Exception as exc:  # nothing held: what a dropped reply may have leased lapses
        why = f"{type(exc).__name__}: {exc}"  # redis-py's repr names the class alone
        log.warning("a claim waiting on Redis at the stop failed (%s); what it may have leased lapses", why)
