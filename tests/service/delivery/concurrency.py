"""Start several tasks at the same instant and fail the test if any of them raised.

Races only show when the contenders really overlap, hence the barrier; an exception in a thread
would otherwise vanish with the thread, hence the collected errors.
"""

from __future__ import annotations

import threading
from collections.abc import Callable


def run_together(tasks: list[Callable[[], None]]) -> None:
    """Start every task at the same instant (barrier), wait for all, and assert none raised."""
    barrier = threading.Barrier(len(tasks))
    errors: list[BaseException] = []

    def run(task: Callable[[], None]) -> None:
        barrier.wait()
        try:
            task()
        except BaseException as err:  # surfaced below, so a failing thread fails the test
            errors.append(err)

    threads = [threading.Thread(target=run, args=(t,)) for t in tasks]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
