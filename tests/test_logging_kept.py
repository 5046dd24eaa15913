"""A command's ``logs.configure`` run inside a test leaves the next test the logging it found."""

from __future__ import annotations

import logging
import sys
import threading

from service import logs
from tests.logging_kept import logging_kept


def test_the_loggers_configure_changes_are_as_found_after_it() -> None:
    root, service = logging.getLogger(), logging.getLogger("service")
    before = (root.handlers[:], root.level, service.handlers[:], service.level, service.propagate)
    hooks = sys.excepthook, threading.excepthook
    with logging_kept():
        logs.configure("DEBUG")
        assert service.propagate is False  # the command's own configuration, while it runs
        assert logging.getLogger("uvicorn.access").disabled
    assert (root.handlers, root.level, service.handlers, service.level, service.propagate) == before
    assert not logging.getLogger("uvicorn.access").disabled
    assert (sys.excepthook, threading.excepthook) == hooks


def test_a_line_of_ours_reaches_the_roots_handlers_again_after_it() -> None:
    seen: list[str] = []

    class Seen(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(record.getMessage())

    with logging_kept():
        logs.configure("INFO")
    handler = Seen(logging.INFO)
    logging.getLogger().addHandler(handler)
    try:
        logging.getLogger("service.retrain").warning("retrain abandoned")
    finally:
        logging.getLogger().removeHandler(handler)
    assert seen == ["retrain abandoned"]
