"""When a pull sidecar's drain is over (``InFlightRequests.ends_by``), which the hand-back's grace counts
from: the drain's deadline once the stop was seen, however early its requests finished; now, for a
shutdown that came without the stop."""

from __future__ import annotations

import asyncio
import time

from service.sidecar.pull_drain import InFlightRequests

DRAIN_S = 30.0


def test_without_a_stop_the_drain_is_over_now() -> None:
    before = time.monotonic()
    ends = InFlightRequests().ends_by()
    assert before <= ends <= time.monotonic()


def test_once_stopping_the_drain_is_over_at_its_deadline_even_with_nothing_in_flight() -> None:
    requests = InFlightRequests()
    before = time.monotonic()
    asyncio.run(requests.bound(lambda: True, DRAIN_S))  # nothing in flight: returns at once
    after = time.monotonic()
    assert before + DRAIN_S <= requests.ends_by() <= after + DRAIN_S
