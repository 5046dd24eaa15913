"""A sidecar wait cut short by its stop event still ends when cancelled in the same loop turn.

On Python 3.11 ``asyncio.wait_for`` returns normally when it is cancelled as its awaitable finishes:
a shutdown that sets the stop event and cancels the loop together had its cancel dropped, and the
loop went on (the heartbeat wait hung the pull app's shutdown so, until ``asyncio.timeout``).
"""

from __future__ import annotations

import asyncio
import re
import time
from pathlib import Path

import pytest

import service
from service.sidecar.waits import sleep_unless


async def _cancelled_as_stop_is_set() -> bool:
    """Whether ``sleep_unless`` raises the cancel that came with its stop event."""
    stop = asyncio.Event()
    sleeping = asyncio.create_task(sleep_unless(stop, 60))
    await asyncio.sleep(0)  # asleep on the event
    stop.set()
    sleeping.cancel()
    try:
        await sleeping
    except asyncio.CancelledError:
        return True
    return False


def test_a_cancel_that_meets_the_stop_event_is_not_dropped() -> None:
    assert asyncio.run(_cancelled_as_stop_is_set())


@pytest.mark.parametrize("seconds", [0.0, -1.0])
def test_a_sleep_of_no_time_returns_at_once(seconds: float) -> None:
    started = time.monotonic()
    asyncio.run(sleep_unless(asyncio.Event(), seconds))
    assert time.monotonic() - started < 1


def test_a_set_event_ends_the_sleep() -> None:
    async def woken() -> float:
        stop = asyncio.Event()
        asyncio.get_running_loop().call_later(0.05, stop.set)
        started = time.monotonic()
        await sleep_unless(stop, 60)
        return time.monotonic() - started

    assert asyncio.run(woken()) < 5


def test_no_service_module_bounds_a_wait_with_wait_for() -> None:
    # Each was replaced by asyncio.timeout (sleep_unless for a stop event), for the cancel above.
    # ``threading.Condition.wait_for`` (a method: ``.wait_for(``, limits.py's plan slots) is not it.
    root = Path(service.__file__).parent
    asyncio_wait_for = re.compile(r"asyncio\.wait_for\(|(?<![.\w])wait_for\(")
    users = [p.relative_to(root) for p in root.rglob("*.py") if asyncio_wait_for.search(p.read_text())]
    assert users == []
