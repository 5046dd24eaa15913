"""The process's logging put back as a test found it, whatever a command run in-process did to it.

A command run in the test's own process (a ``CliRunner`` invoking ``serve`` or ``sidecar``) calls
``service.logs.configure``, as its console script does: our loggers stop propagating to the root and
write to the stderr of that command's run, a stream the runner closes once the command returned.
Left so, every later test in that xdist worker lost our lines from the root's handlers, where
pytest's ``caplog`` and a test's own handler listen: a retrain test waiting to see the stop's line
waited out its 60 s bound (the fresh-clone CI at a153f862, 4 failed, ``--- Logging error --- I/O
operation on closed file`` in their output), only in the runs where the sidecar's in-process test
had run in the same worker before it.

Python's warnings too: ``configure`` routes them through logging (``logging.captureWarnings``), which
keeps the function it replaced and does nothing where it finds itself on; left on, a later command's
``configure`` routed nothing, and its warnings went where the first command's had.
"""

from __future__ import annotations

import logging
import sys
import threading
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from service.logs import OWN_LOGGERS

# the root, ours, and the one ``configure`` disables: every logger it changes
KEPT = ("", *OWN_LOGGERS, "uvicorn.access")


@dataclass(frozen=True)
class _Found:
    """One logger's configuration as found."""

    logger: logging.Logger
    handlers: list[logging.Handler]
    filters: list[logging.Filter | logging.Filterer | object]
    level: int
    propagate: bool
    disabled: bool

    def put_back(self) -> None:
        self.logger.handlers[:] = self.handlers
        self.logger.filters[:] = self.filters  # type: ignore[assignment]
        self.logger.setLevel(self.level)
        self.logger.propagate = self.propagate
        self.logger.disabled = self.disabled


def _found(name: str) -> _Found:
    logger = logging.getLogger(name or None)
    return _Found(
        logger, logger.handlers[:], list(logger.filters), logger.level, logger.propagate, logger.disabled
    )


@contextmanager
def logging_kept() -> Iterator[None]:
    """Within: anything may configure logging; after: each logger ``configure`` changes, the except
    hooks it installs, and where Python's warnings go, are as they were."""
    found = [_found(name) for name in KEPT]
    hooks = sys.excepthook, threading.excepthook
    shown, captured = warnings.showwarning, warnings_captured()
    try:
        yield
    finally:
        for logger in found:
            logger.put_back()
        sys.excepthook, threading.excepthook = hooks
        if not captured:
            logging.captureWarnings(False)  # forgets the function it replaced: the next one routes
        warnings.showwarning = shown


def warnings_captured() -> bool:
    """Whether ``logging.captureWarnings(True)`` is in force (it keeps the function it replaced)."""
    return getattr(logging, "_warnings_showwarning", None) is not None
