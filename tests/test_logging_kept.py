"""A command's ``logs.configure`` run inside a test leaves the next test the logging it found."""

from __future__ import annotations

import logging
import sys
import threading
import warnings

from service import logs
from tests.logging_kept import logging_kept, warnings_captured


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


class _Seen(logging.Handler):
    """The messages of the records it is handed."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def test_a_later_commands_configure_routes_python_warnings_through_logging_too() -> None:
    """``configure`` routes ``warnings.warn`` through logging (``logging.captureWarnings``), which
    does nothing where that routing is on already: left on after the first command, a second
    command's warnings went where the first's had been routed, not through its own handlers."""
    shown, captured = warnings.showwarning, warnings_captured()
    with logging_kept():
        logs.configure("INFO")
    assert (warnings.showwarning, warnings_captured()) == (shown, captured)
    seen = _Seen()
    with logging_kept():
        logs.configure("INFO")
        logging.getLogger().addHandler(seen)
        with warnings.catch_warnings():
            warnings.simplefilter("always")
            warnings.warn("the second command's warning", UserWarning, stacklevel=1)
    assert [m for m in seen.messages if "the second command's warning" in m] != []
