"""A retrain's line through the gate (``service.learning.retrain_lines``) meets what the logger's own
output would: the gate hands it to the handlers itself, so it also applies the logger's filters added
after it, which the logger no longer consults once the gate returned (review53c: such a filter's
model service line still reached the handlers in a retrain), and outputs it once.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator

import pytest

from service.learning.retrain_lines import muted_once


class _Lines(logging.Handler):
    """The messages it was handed, in order."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@pytest.fixture
def models() -> Iterator[tuple[logging.Logger, _Lines]]:
    """The model service's logger at INFO with a handler of its own, as found after the test."""
    logger = logging.getLogger("service.models")
    lines, level = _Lines(), logger.level
    logger.addHandler(lines)
    logger.setLevel(logging.INFO)
    try:
        yield logger, lines
    finally:
        logger.setLevel(level)
        logger.removeHandler(lines)


def test_a_filter_added_to_the_logger_after_the_gate_still_drops_a_retrains_line(
    models: tuple[logging.Logger, _Lines],
) -> None:
    logger, lines = models
    quiet = logging.Filter("service.models.quiet")  # keeps only that child's records
    logger.addFilter(quiet)
    try:
        with muted_once(threading.RLock(), lambda: False):
            logger.info("retrained")
        logger.info("reloaded")  # outside a retrain: the logger's own filtering, as ever
    finally:
        logger.removeFilter(quiet)
    assert lines.lines == []


def test_a_retrains_line_reaches_each_handler_once_and_none_once_abandoned(
    models: tuple[logging.Logger, _Lines],
) -> None:
    logger, lines = models
    abandoned = False
    with muted_once(threading.RLock(), lambda: abandoned):
        logger.info("retrained")
        abandoned = True
        logger.info("old versions not pruned")
    logger.info("reloaded")
    assert lines.lines == ["retrained", "reloaded"]
