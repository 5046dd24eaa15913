"""The push runner's items in flight on the engine: one asyncio task per lease, and the ways to stop them.

Apart from the runner (``runner.py``) because several parties stop items, and each needs the task of a
lease: the heartbeat (a lease found gone), a completion refused for a cancelled schedule (that
schedule's other items), the engine watch (a stall: every running item; a hang: one) and the drain at
shutdown (what still runs after the drain timeout). The main loop, for its part, sleeps until one
finishes, to refill its slot at once. What an item's task does is the runner's; this is their
bookkeeping. Cancelling a task closes its engine request, so the engine aborts the sequence.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

from service.logs import schedule_context
from service.sidecar.holdings import Held, Holdings, LeaseId, lease_id


@dataclass
class InFlight:
    """The tasks of the items running on the engine, by lease (a later lease of an item: another task)."""

    _tasks: dict[LeaseId, asyncio.Task[None]] = field(default_factory=dict)
    _finished: asyncio.Event = field(default_factory=asyncio.Event)  # set as any task ends
    # told of a task that ended on an exception (a bug: the runner catches what it expects), which
    # left its lease held and heartbeated with nothing running it; the runner stops the sidecar
    died: Callable[[str, BaseException | None], None] = lambda *_: None

    def __len__(self) -> int:
        return len(self._tasks)

    def start(self, held: Held, run: Coroutine[Any, Any, None]) -> None:
        """Run ``run`` (``held``'s generation and report) as a task of its own, its lines naming its
        schedule; it is forgotten as it ends."""
        key = lease_id(held.lease)
        with schedule_context(held.lease.schedule_id):
            task = asyncio.create_task(run)
        self._tasks[key] = task
        task.add_done_callback(functools.partial(self._ended, key))

    def _ended(self, key: LeaseId, task: asyncio.Task[None]) -> None:
        self._tasks.pop(key, None)
        self._finished.set()
        if not task.cancelled() and task.exception() is not None:  # retrieved: said, not lost at GC
            self.died(f"task of item {key[1]} (schedule {key[0]})", task.exception())

    def cancel(self, held: Held) -> None:
        """Stop ``held``'s task, if it runs, without waiting for it (a lease lost: nothing to hand back)."""
        task = self._tasks.get(lease_id(held.lease))
        if task is not None:
            task.cancel()

    async def stop(self, *helds: Held) -> None:
        """Stop the tasks of ``helds`` and wait until they ended, so that what they held is settled."""
        tasks = [task for task in map(self._tasks.get, (lease_id(h.lease) for h in helds)) if task]
        stopping = [task for task in tasks if task.cancel()]  # False: done already
        await asyncio.gather(*stopping, return_exceptions=True)

    def running(self, holdings: Holdings) -> list[Held]:
        """The items whose task runs and whose lease is still held, not being completed (a lease a
        heartbeat found lost is no longer held; a completion already being sent is left to finish)."""
        helds = (holdings.get(key) for key in self._tasks)
        return [held for held in helds if held is not None and not held.completing]

    async def wait_any(self, stop: asyncio.Event, timeout_s: float) -> None:
        """Sleep until a task ends, ``stop`` is set, or ``timeout_s`` passes."""
        self._finished.clear()
        waiters = [asyncio.ensure_future(self._finished.wait()), asyncio.ensure_future(stop.wait())]
        await asyncio.wait(waiters, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED)
        for waiter in waiters:
            waiter.cancel()

    async def finish(self, timeout_s: float, cut: asyncio.Event) -> None:
        """Let every task run up to ``timeout_s`` or until ``cut`` is set, then stop those left and
        wait for them (the drain, which a second signal cuts short)."""
        if not self._tasks:
            return
        tasks = list(self._tasks.values())
        ended: asyncio.Future[Any] = asyncio.gather(*tasks, return_exceptions=True)
        cut_short: asyncio.Future[Any] = asyncio.ensure_future(cut.wait())
        await asyncio.wait(
            [ended, cut_short], timeout=max(0.0, timeout_s), return_when=asyncio.FIRST_COMPLETED
        )
        cut_short.cancel()
        for task in tasks:
            task.cancel()  # False for one that ended: nothing to do
        await ended
