"""``waits``' task waits: which task a stop leaves running, and which it ends.

``done_unless`` leaves its task running when the stop comes first (a claim the drain still waits
for), and cancels it when the wait itself is cancelled; ``done_else_dropped`` cancels it at the stop
(a readiness probe or version check a shutdown has no use for)."""

from __future__ import annotations

import asyncio

from service.sidecar.waits import done_else_dropped, done_unless


async def _outcome(wait: str, cancel_the_wait: bool = False) -> tuple[bool | None, bool]:
    """What ``wait`` answers for a task that never ends once the stop is set (None when the wait was
    cancelled instead), and whether the task was then cancelled."""
    stop = asyncio.Event()
    task = asyncio.create_task(asyncio.sleep(60))
    waiting = asyncio.create_task({"unless": done_unless, "dropped": done_else_dropped}[wait](stop, task))
    await asyncio.sleep(0.01)
    if cancel_the_wait:
        waiting.cancel()
    else:
        stop.set()
    try:
        answer: bool | None = await waiting
    except asyncio.CancelledError:
        answer = None
    await asyncio.sleep(0)  # a cancel is seen at the task's next turn
    cancelled = task.cancelled()
    task.cancel()
    return answer, cancelled


def test_a_stop_leaves_the_task_of_done_unless_running() -> None:
    assert asyncio.run(_outcome("unless")) == (False, False)


def test_a_stop_cancels_the_task_of_done_else_dropped() -> None:
    assert asyncio.run(_outcome("dropped")) == (False, True)


def test_a_cancelled_wait_cancels_its_task() -> None:
    assert asyncio.run(_outcome("unless", cancel_the_wait=True)) == (None, True)


def test_a_wait_whose_task_ends_first_leaves_nothing_waiting_for_the_stop() -> None:
    """The main loop waits so on every claim until the stop: a wait left on the stop by each would pile
    up one task per claim for as long as the sidecar runs."""

    async def left() -> set[asyncio.Task[object]]:
        stop = asyncio.Event()
        for _ in range(3):
            assert await done_unless(stop, asyncio.create_task(asyncio.sleep(0)))
        await asyncio.sleep(0)  # a cancel is seen at the task's next turn
        return asyncio.all_tasks() - {asyncio.current_task()}

    assert asyncio.run(left()) == set()


def test_a_task_done_by_the_time_the_stop_comes_is_answered_done() -> None:
    """A claim that landed in the turn the stop came holds its leases: the answer is whether the task
    is done, not whether the stop came (the drain would then take it as still out)."""

    async def answers() -> tuple[bool, bool, bool]:
        stop = asyncio.Event()
        task = asyncio.create_task(asyncio.sleep(0))
        await task
        stop.set()
        return await done_unless(stop, task), await done_else_dropped(stop, task), task.cancelled()

    assert asyncio.run(answers()) == (True, True, False)
