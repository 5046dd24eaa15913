"""Cutting the model's call short once its caller has stopped waiting: a check between row chunks.

Why. Scoring a batch is two LightGBM calls over its distinct rows (``FittedModel.predict``), and a
call cannot be stopped once begun. A batch of 32,768 distinct prompts took 0.6-1.2 s per booster on
the shared 2-core host beside 2 CPU burners, 1.1-2.4 s for both (docs/experiments.md, deadline48),
all of it unchecked: the service's predict stage checks the caller's deadline only once the model
has answered (``service.pipeline.stages.predict``), so its 504 came that much past the deadline.

How. Where its caller set a check for this context (``checking``), each booster scores
``CHUNK_ROWS`` rows per call and runs the check before each call: the service's raises its
deadline's error, which leaves the predict unfinished. Without one (no deadline: the replay, the
benchmark, a request without the header) each booster scores every row in one call, as before: a
call costs LightGBM 0.15-0.35 ms of CPU besides its rows, 13-15% more CPU for the boosters in
1,024-row calls (4.5 -> 5.2 ms at 4,096 rows, 35.5 -> 40.0 ms at 32,768). A context variable, as
``scheduler.giveup``'s hard deadline, for the same reason: the call is several frames below the
caller (``Models.predict``, then ``LengthPredictor.predict``), whose signatures stay as they are.
Scores are row by row, so chunked calls give exactly the scores one call gives.

The history's fold before the model (``History.stats_before``: ~100 ms of CPU at 1 M rows where it
folds them all again, a late report's or a capped history's) checks too, between its passes and its
steps: a request cut there leaves the fold to ``Models.warm_later``, off the request path, so the
next request of the step finds it done (docs/experiments.md, deadline49).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

CHUNK_ROWS = 1024  # rows a booster call scores, each call checked before: 2,048 took up to 85 ms
# beside 2 CPU burners (one call over 32,768 rows: 0.6-0.7 s); fewer rows a call add LightGBM's
# per-call overhead to every predict

_CHECK: ContextVar[Callable[[], None] | None] = ContextVar("predictors_cutoff_check", default=None)
_LEFT: ContextVar[Callable[[], float] | None] = ContextVar("predictors_cutoff_left", default=None)


@contextmanager
def checking(check: Callable[[], None] | None, left_s: Callable[[], float] | None = None) -> Iterator[None]:
    """Run ``check`` before each of the model's row chunks in this context (it raises to cut the
    call); None: no check, and the model scores its rows in one call. ``left_s``: the seconds until
    the caller stops waiting, which caps a wait on the way (``time_left_s``); None: no cap."""
    token, left = _CHECK.set(check), _LEFT.set(left_s)
    try:
        yield
    finally:
        _LEFT.reset(left)
        _CHECK.reset(token)


def time_left_s() -> float:
    """Seconds until this context's caller stops waiting (``checking``'s ``left_s``; negative once
    past; infinite where none was set): a wait for another thread's bookkeeping is cut there
    (``service.learning.folds_beside``: the caller's 504 is all that comes after it; review51a)."""
    left = _LEFT.get()
    return math.inf if left is None else left()


def chunk_rows(rows: int) -> int:
    """Rows a booster call scores: ``CHUNK_ROWS`` where a check is set, else all ``rows`` (at least 1)."""
    return CHUNK_ROWS if _CHECK.get() is not None else max(1, rows)


def is_set() -> bool:
    """Whether this context's caller set a check (``checking``): its call may be cut short."""
    return _CHECK.get() is not None


def check() -> None:
    """The check set by ``checking`` (it raises when the caller has stopped waiting), if any."""
    run = _CHECK.get()
    if run is not None:
        run()
