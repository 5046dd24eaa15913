"""Cutting the model's call short once its caller has stopped waiting: a check between row chunks.

Why. Scoring a batch is two LightGBM calls over its distinct rows (``FittedModel.predict``), and a
call cannot be stopped once begun. A batch of 32,768 distinct prompts took 0.6-0.8 s per booster on
the shared 2-core host beside 2 CPU burners, 1.1-1.5 s for both (docs/experiments.md, deadline48),
all of it unchecked: the service's predict stage checks the caller's deadline only once the model
has answered (``service.pipeline.stages.predict``), so its 504 came that much past the deadline.

How. Each booster scores ``CHUNK_ROWS`` rows per call, and before each call runs the check its caller set
for this context with ``checking``: the service's raises its deadline's error, which leaves the
predict unfinished. A context variable, as ``scheduler.giveup``'s hard deadline, for the same reason:
the call is several frames below the caller (``Models.predict``, then ``LengthPredictor.predict``),
whose signatures stay as they are. Without a check set, ``check`` does nothing. Scores are row by row,
so chunked calls give exactly the scores one call gives.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

CHUNK_ROWS = 1024  # rows a booster call scores, each call checked before: 2,048 took up to 85 ms
# beside 2 CPU burners (one call over 32,768 rows: 0.6-0.7 s); fewer rows a call add LightGBM's
# per-call overhead to every predict

_CHECK: ContextVar[Callable[[], None] | None] = ContextVar("predictors_cutoff_check", default=None)


@contextmanager
def checking(check: Callable[[], None]) -> Iterator[None]:
    """Run ``check`` between the model's row chunks in this context; it raises to cut the call."""
    token = _CHECK.set(check)
    try:
        yield
    finally:
        _CHECK.reset(token)


def check() -> None:
    """The check set by ``checking`` (it raises when the caller has stopped waiting), if any."""
    run = _CHECK.get()
    if run is not None:
        run()
