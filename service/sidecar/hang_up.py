"""The sidecar's last act before it exits: close every Redis connection, those still in use too.

Why. The sidecar's Redis calls run in worker threads (``asyncio.to_thread``), and a shutdown that
stops waiting for one (a release or claim abandoned at the drain's end, a report cut short, a heartbeat
cancelled) does not end the call: its thread reads the socket until the server answers or the
client's socket timeout (5 s) runs out. ``asyncio.run`` joins those threads before it returns, so with
Redis stalled (paused, or SIGSTOPped: connections accepted, nothing answered) the process exited up
to one socket timeout past the drain timeout plus the release grace that docs/sidecar.md promises.
Closed here, each such call fails at once (a ``ConnectionError`` nobody waits for any more), and
what it did not do is left to the reapers: its leases lapse and are requeued.
"""

from __future__ import annotations

from service.delivery.protocol import Delivery


def hang_up(delivery: Delivery) -> None:
    """Close every connection of ``delivery``'s client: a call still waiting on the server fails now
    instead of at its socket timeout. Push mode calls it once its drain is over (``launch``), pull mode
    once its API's lifespan has handed back what the worker held (``pull_api``)."""
    delivery.client.close()
