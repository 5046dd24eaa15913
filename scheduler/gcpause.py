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
pauses of 4 staggered threads left the collector off for up to 4.9 s in 5 s (docs/experiments.md,
helper review45c). So a pause that ends under another runs one full collection on its own thread,
after its own work, once ``MAX_PENDING`` container objects have piled up uncollected
(``gc.get_count()[0]``: allocations less deallocations since the last collection, which is where
cyclic garbage shows; acyclic tuples a plan frees do not count), while the others stay paused: what
the generation thresholds would have done, at a bounded cost (one ~50 ms scan at the largest heaps
per ``MAX_PENDING``). Counted in objects, not seconds, it bounds the memory held, and the scheduler
reads no host clock for it (``scheduler/clock.py``).
"""

from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Iterator

MAX_PENDING = 200_000  # objects left uncollected under overlapping pauses before one collects


class _Pauses:
    """The pauses held now, on every thread, and the state the first of them found."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.count = 0
        self.restore = False  # whether the collector was enabled when the first of them began

    def begin(self) -> None:
        with self.lock:
            if self.count == 0:
                self.restore = gc.isenabled()
            self.count += 1
            gc.disable()

    def end(self) -> None:
        with self.lock:
            self.count -= 1
            if self.count == 0 and self.restore:
                gc.enable()
            due = self.count > 0 and self.restore and gc.get_count()[0] >= MAX_PENDING
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
