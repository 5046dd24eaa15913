"""The syncs under way that a ``/schedule`` waits for ``models.FOLD_WAIT_S`` at most, not out.

A request syncs before it predicts, under ``ModelService``'s sync lock, and so waited for any fold
that held it. Two folds are long and neither is the request's: the follower's of another replica's
step (periodic50), and ``POST /actuals``'s own of the batch it just stored, which on the storing
replica held the lock as long (a step's 32,768 reports in one batch: 0.45-1.4 s at load 11-14, the
stream read most of it; review50b) while a ``/schedule`` beside it waited all of it, past any plan's
budget (80 ms by default). A retrain's sync is a third (learn51: the automatic one runs beside
the next requests; its snapshot is joined outside the lock), and ``GET /models``' a fourth. Each such
fold is counted here, where a follower runs, while it runs or waits for the lock; a request finding
the lock held and a count above zero waits ``FOLD_WAIT_S`` at most, then predicts from the history
last folded. Where none runs (``ROLLOUT_ACTUALS_FOLLOW_S=0``) none is counted: the request folds
what is new itself, so the fold it waits out is its own fold done for it, and passing it by only
left out rows stored before it (the automatic retrain starts on the step's first ``/schedule``: the
last step's reports; review51a). No wait outlasts the caller's deadline (``wait_s``). A count, not a flag:
they may run at once, and the first to end must not clear the other's.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from predictors import cutoff


class FoldsBeside:
    """How many syncs a request need not wait out are under way (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._count = 0

    @contextmanager
    def counted(self) -> Iterator[None]:
        """Count one while the block runs (set before the sync lock is asked: a request finding it
        held knows why)."""
        with self._lock:
            self._count += 1
        try:
            yield
        finally:
            with self._lock:
                self._count -= 1

    def any(self) -> bool:
        """Whether one is under way now."""
        return self._count > 0

    def wait_s(self, fold_wait_s: float) -> float:
        """How long a request finding the sync lock held waits for it (``Lock.acquire``'s timeout):
        ``fold_wait_s`` where one is under way, else until it is free (-1), and never past the
        caller's deadline (``cutoff.time_left_s``): a request with 10 ms left waited 50 ms for a fold
        beside, then was refused 504 (learn51's report; review51a)."""
        wait = min(fold_wait_s if self.any() else math.inf, max(0.0, cutoff.time_left_s()))
        return -1 if math.isinf(wait) else wait
