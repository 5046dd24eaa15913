"""The push runner's bookkeeping of the items running on the engine (``in_flight``): which of them an
engine stall stops. No Redis: pure bookkeeping over asyncio tasks."""

from __future__ import annotations

import asyncio

from service.delivery.records import DeliveryItem, Lease
from service.sidecar.holdings import Holdings, lease_id
from service.sidecar.in_flight import InFlight


def _lease(key: str) -> Lease:
    return Lease("s", "w", DeliveryItem(key, key, 0, 10, 100, 50.0), token=1, deadline_ms=0, attempt=1)


def test_only_held_items_not_being_completed_count_as_running_on_the_engine() -> None:
    """An engine stall stops what ``running`` lists: a completion already being sent is left to finish,
    and the task of a lease a heartbeat found lost (no longer held) is not the stall's to settle."""

    async def scenario() -> None:
        holdings, items = Holdings(8), InFlight()
        helds = [holdings.add(_lease(key), kv_admission=False) for key in ("runs", "reports", "lost")]
        for held in helds:
            holdings.start(held)
            items.start(held, asyncio.sleep(60))
        runs, reports, lost = helds
        reports.completing = True
        holdings.remove(lease_id(lost.lease))
        assert items.running(holdings) == [runs]
        await items.stop(*helds)
        assert len(items) == 0

    asyncio.run(scenario())


def test_the_main_loop_wakes_as_soon_as_an_item_ends_not_at_its_poll_timeout() -> None:
    """``wait_any`` returns once any task ends (the loop refills that slot at once) or ``stop`` is set,
    whichever comes first, not once both have happened or the whole timeout has passed."""

    async def scenario() -> None:
        holdings, items, stop = Holdings(8), InFlight(), asyncio.Event()
        held = holdings.add(_lease("quick"), kv_admission=False)
        holdings.start(held)
        items.start(held, asyncio.sleep(0.05))
        await asyncio.wait_for(items.wait_any(stop, timeout_s=600.0), timeout=30.0)
        assert len(items) == 0
        stop.set()
        await asyncio.wait_for(items.wait_any(stop, timeout_s=600.0), timeout=30.0)

    asyncio.run(scenario())
