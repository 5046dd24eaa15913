"""The retrain's muting of the model service's and the actuals reader's lines holds within its context
only (``retrain_lines.muted_once``): a line logged in it once the retrain is abandoned is dropped,
one logged there before passes, and so do the lines logged after the context is left, and those of
another thread (the follower's, a request's) while it is abandoned."""

from __future__ import annotations

import logging
import threading

import pytest

from service.learning.retrain_lines import MUTED_LOGGERS, muted_once


def _said(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [record.getMessage() for record in caplog.records]


@pytest.mark.parametrize("name", MUTED_LOGGERS)
def test_a_muted_loggers_lines_are_dropped_within_the_abandoned_retrains_context_only(
    name: str, caplog: pytest.LogCaptureFixture
) -> None:
    logger = logging.getLogger(name)
    abandoned = threading.Event()
    with caplog.at_level(logging.INFO, logger=name):
        with muted_once(threading.RLock(), abandoned.is_set):
            logger.info("before the stop")
            abandoned.set()
            logger.info("after the stop")
            beside = threading.Thread(target=logger.info, args=("another thread's",))
            beside.start()
            beside.join(30.0)
        logger.info("after the retrain")
    assert _said(caplog) == ["before the stop", "another thread's", "after the retrain"]


def test_a_context_left_by_an_error_mutes_nothing_after_it(caplog: pytest.LogCaptureFixture) -> None:
    logger = logging.getLogger(MUTED_LOGGERS[0])
    with caplog.at_level(logging.INFO, logger=MUTED_LOGGERS[0]):
        with pytest.raises(RuntimeError), muted_once(threading.RLock(), lambda: True):
            raise RuntimeError("the retrain failed")
        logger.info("the next line")
    assert _said(caplog) == ["the next line"]
