"""The lines a retrain's thread logs through other modules, muted once the stop abandoned it.

``Retrainer._say`` drops the retrainer's own lines after the stop's ``retrain abandoned`` line, so
that line is a retrain's last. A retrain also logs through the model service and the actuals reader
it runs (``service.learning.models``: ``retrained``, a history reloaded, old versions not pruned;
``service.learning.actuals``: the entries its first read skipped), and those still came after the stop's
line: a retrain abandoned in its Redis read of new actuals logged that read's warnings once Redis
answered, and one abandoned while storing its version logged ``retrained`` (review52d). A filter on
those loggers takes over a record logged in a retrain's context (``muted_once``): it hands the record
to the logger's handlers itself, under the lock the abandonment is said under, unless the retrain's
check says it was abandoned, and lets nothing through after it. The check and the output are one
step, as ``_say``'s are: a record that passed a check made before the abandonment, and reached the
handlers after the stop's line (by the time a handler took, or its lock), still followed that line
(learn53). The follower's and the requests' lines, in contexts of their own, pass untouched.
Handing the record on, the filter does what the logger would past it: its filters added later (which
the logger no longer consults once this one returned False: review53c), then its handlers. A handler
that blocks (a full stderr pipe) holds the lock as it held ``_say``'s lines, and the stop with it: the
stop's own line would wait on that handler's lock all the same.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from contextvars import ContextVar

MUTED_LOGGERS = ("service.models", "service.actuals")  # what a retrain runs that logs on its thread

_Gate = tuple[AbstractContextManager[object], Callable[[], bool]]
_gate: ContextVar[_Gate | None] = ContextVar("retrain_abandoned", default=None)


@contextmanager
def muted_once(said: AbstractContextManager[object], abandoned: Callable[[], bool]) -> Iterator[None]:
    """Within: the muted loggers output this context's lines under ``said`` (the lock the stop
    abandons the retrain under), and none once ``abandoned()`` (module doc)."""
    token = _gate.set((said, abandoned))
    try:
        yield
    finally:
        _gate.reset(token)


class _Muted(logging.Filter):
    """Outputs a record logged in a retrain's context itself, unless the retrain was abandoned.

    ``Logger.handle`` has checked ``disabled`` before its filters, and the level was checked before
    the record was made; what it would do past this filter is the logger's later filters, then
    ``callHandlers`` (propagation, each handler's level and filters): this does both."""

    def __init__(self, logger: logging.Logger) -> None:
        super().__init__()
        self._logger = logger

    def filter(self, record: logging.LogRecord) -> bool:
        gate = _gate.get()
        if gate is None:
            return True  # not a retrain's: the logger outputs it as usual
        said, abandoned = gate
        with said:
            kept = not abandoned() and self._later_filters().filter(record)
            if kept:  # a filter may hand back another record, from Python 3.12, as ``Logger.handle`` takes
                self._logger.callHandlers(kept if isinstance(kept, logging.LogRecord) else record)
        return False  # output above, or dropped

    def _later_filters(self) -> logging.Filterer:
        """The logger's filters after this one (one added since, by a logging config or a test):
        returning False here, the logger would not consult them."""
        later = logging.Filterer()
        filters = self._logger.filters
        later.filters = filters[filters.index(self) + 1 :]
        return later


for _name in MUTED_LOGGERS:
    _logger = logging.getLogger(_name)
    _logger.addFilter(_Muted(_logger))
