"""The lines a retrain's thread logs through other modules, muted once the stop abandoned it.

``Retrainer._say`` drops the retrainer's own lines after the stop's ``retrain abandoned`` line, so
that line is a retrain's last. A retrain also logs through the model service and the actuals reader
it runs (``service.learning.models``: ``retrained``, a history reloaded, old versions not pruned;
``service.learning.actuals``: the entries its first read skipped), and those still came after the stop's
line: a retrain abandoned in its Redis read of new actuals logged that read's warnings once Redis
answered, and one abandoned while storing its version logged ``retrained`` (review52d). A filter on
those loggers drops a record logged in a retrain's context (``muted_once``) once its check says it
was abandoned; the follower's and the requests' lines, in contexts of their own, pass untouched.

The check and the line's output are not one step, as ``_say``'s are under its lock: a line checked
just before the abandonment can still follow the stop's line, by the time one handler takes.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

MUTED_LOGGERS = ("service.models", "service.actuals")  # what a retrain runs that logs on its thread

_abandoned: ContextVar[Callable[[], bool] | None] = ContextVar("retrain_abandoned", default=None)


@contextmanager
def muted_once(abandoned: Callable[[], bool]) -> Iterator[None]:
    """Within: the muted loggers drop this context's lines once ``abandoned()`` (module doc)."""
    token = _abandoned.set(abandoned)
    try:
        yield
    finally:
        _abandoned.reset(token)


class _Muted(logging.Filter):
    """Drops a record logged in an abandoned retrain's context."""

    def filter(self, record: logging.LogRecord) -> bool:
        abandoned = _abandoned.get()
        return abandoned is None or not abandoned()


_FILTER = _Muted()
for _name in MUTED_LOGGERS:
    logging.getLogger(_name).addFilter(_FILTER)
