"""Hold Python's cycle collector while a plan builds tens of thousands of acyclic objects.

Preparing a plan allocates one tuple or more per trajectory (32k at the largest benchmark size).
Those allocations trigger the collector's generation thresholds, and its full collections then scan
everything alive, the whole request included: measured at 32,768 trajectories, validation took
28-32 ms with the collector held and 52-60 ms without, building the problem 26-33 ms against 33-65
ms. Nothing built there forms a reference cycle (reference counting frees it all), so holding the
collector for those calls changes no result, only when unreachable cycles elsewhere are reclaimed.

The collector is the process's, and a service plans on several threads at once (one per plan slot,
of every app in the process), so the pauses are counted: the first to begin disables it, the last
to end restores it. Each thread saving and restoring the state on its own (as here until
2026-12-05) let a pause that ended first enable the collector under one still running, and one that
read the state while another thread was ending its own left the collector off for good.

Counted, though, a replica whose plan slots never all fall idle at once would never collect: the
pauses of 4 staggered threads left the collector off for up to 4.9 s in 5 s, 116,406 young objects
never scanned (docs/experiments.md, helper review45c). So once the collector has been held for
``MAX_HELD_S`` on end, the pause that ends next runs one full collection on its own thread, after
its own work (one ~50 ms scan at the largest heaps, at most every ``MAX_HELD_S``), while the others
stay paused: what the generation thresholds would have done, at a bounded rate (4 such threads and
one making 200,000 cyclic objects a second: every one reclaimed, at most ~2 s of them alive).
"""

from __future__ import annotations

import contextlib
import gc
import threading
import time
from collections.abc import Callable, Iterator

MAX_HELD_S = 2.0  # the longest the collector stays held by overlapping pauses before one collects


class _Pauses:
    """The pauses held now, on every thread, and the state the first of them found."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.lock = threading.Lock()
        self.clock = clock
        self.count = 0
        self.restore = False  # whether the collector was enabled when the first of them began
        self.held_since = 0.0  # when the collector was last enabled or collected (clock)

    def begin(self) -> None:
        with self.lock:
            if self.count == 0:
                self.restore = gc.isenabled()
                self.held_since = self.clock()
            self.count += 1
            gc.disable()

    def end(self) -> None:
        with self.lock:
            self.count -= 1
            if self.count == 0 and self.restore:
                gc.enable()
            due = self.count > 0 and self.restore and self.clock() - self.held_since >= MAX_HELD_S
            if due:
                self.held_since = self.clock()
        if due:  # outside the lock: the other pauses begin and end meanwhile
            gc.collect()


_PAUSES = _Pauses()  # one collector per process, so one count


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Disable the cycle collector for the block; the last pause of those overlapping it to end
    restores the state the first found (an enabled collector, or one its caller had disabled)."""
    _PAUSES.begin()
    try:
        yield
    finally:
        _PAUSES.end()
