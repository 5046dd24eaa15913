"""A sleep that a stop event cuts short, and why it is not ``asyncio.wait_for``.

On Python 3.11 a ``wait_for`` cancelled in the same loop turn as its awaitable finishes (the stop
event set and the task cancelled together, as a shutdown does) returns the awaitable's result and
drops the cancel: the task goes on, cancelled in name only, and whoever awaits it waits for its next
step or for ever (``WorkerSession.until_heartbeat_due`` hung the pull app's shutdown so). A wait
bounded by ``asyncio.timeout`` raises the cancel as any other await does.
"""

from __future__ import annotations

import asyncio
import contextlib


async def sleep_unless(stop: asyncio.Event, seconds: float) -> None:
    """Sleep ``seconds`` (none when not positive), or until ``stop`` is set if sooner."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(seconds):
            await stop.wait()
