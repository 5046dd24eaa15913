"""A sleep and a wait that a stop event cuts short, and why they are not ``asyncio.wait_for``.

On Python 3.11 a ``wait_for`` cancelled in the same loop turn as its awaitable finishes (the stop
event set and the task cancelled together, as a shutdown does) returns the awaitable's result and
drops the cancel: the task goes on, cancelled in name only, and whoever awaits it waits for its next
step or for ever (``WorkerSession.until_heartbeat_due`` hung the pull app's shutdown so). A wait
bounded by ``asyncio.timeout`` raises the cancel as any other await does.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import TypeVar

T = TypeVar("T")


async def sleep_unless(stop: asyncio.Event, seconds: float) -> None:
    """Sleep ``seconds`` (none when not positive), or until ``stop`` is set if sooner."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(seconds):
            await stop.wait()


async def done_unless(stop: asyncio.Event, task: asyncio.Task[T]) -> bool:
    """Wait until ``task`` is done or ``stop`` is set; whether ``task`` is done. ``task`` is left
    running when ``stop`` comes first (its caller decides how long it may go on), and cancelled when
    this wait is: a Redis call in a worker thread does not end at a stop, so a shutdown that awaited
    it could wait out the client's whole socket timeout on a stalled server."""
    stopped = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait([task, stopped], return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        task.cancel()
        raise
    finally:
        stopped.cancel()
    return task.done()


async def done_else_dropped(stop: asyncio.Event, task: asyncio.Task[T]) -> bool:
    """``done_unless``, ``task`` cancelled when ``stop`` comes first: a wait whose answer a shutdown
    has no use for (the engine's readiness probe, the server's version), so it need not run on."""
    if await done_unless(stop, task):
        return True
    task.cancel()
    return False


async def stopped_at(stop: asyncio.Event) -> float:
    """The monotonic time ``stop`` was set (to within a turn of the loop): a shutdown's deadline
    counts from the signal, not from when the main loop, busy with a call, next looks at it."""
    await stop.wait()
    return time.monotonic()
