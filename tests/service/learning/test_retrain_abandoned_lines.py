"""A retrain the stop abandoned says nothing after the stop's line, through the model service either.

``Retrainer._say`` drops the retrainer's own lines after the stop's ``retrain abandoned``; a
retrain abandoned in its Redis read of new actuals still logged that read's warnings once Redis
answered, through the actuals reader (``service.learning.retrain_lines``, review52d). Real Redis,
real LightGBM; the actuals' read is wrapped only to place the stop inside it.
"""

from __future__ import annotations

import logging
import threading

import pytest
import redis
from fastapi.testclient import TestClient

from predictors.store import ModelStore
from service.app import create_app
from service.context import Context
from service.learning.actuals import ActualsLog, Folded
from service.problems.table import RetrainStoppedError
from service.settings import Settings
from tests.service.api_helpers import actual_history, with_settings

WINDOW_S = 0.5  # the stop's window (one command timeout)
WAIT_S = 60.0  # a bound on the test's own waits


def test_a_retrain_abandoned_in_its_read_of_new_actuals_says_nothing_of_that_read_after_the_stop(
    live_settings: Settings,
    redis_client: redis.Redis,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    settings = with_settings(live_settings, redis_timeout_s=WINDOW_S, actuals_follow_s=0)  # it reads
    reading, returned = threading.Event(), threading.Event()
    read = ActualsLog.rows_after

    def stalled(log: ActualsLog, cursor: str) -> Folded:  # a Redis that answers once the stop returned
        reading.set()
        assert returned.wait(WAIT_S)
        return read(log, cursor)

    outcome: list[Exception] = []

    def retrain(ctx: Context) -> None:
        try:
            ctx.retrainer.retrain_now("request")
        except RetrainStoppedError as error:
            outcome.append(error)

    caplog.set_level(logging.INFO)
    with TestClient(create_app(settings)) as client:
        assert client.post("/actuals", json={"actuals": actual_history(steps=3)}).status_code == 200
        ctx: Context = client.app.state.context  # type: ignore[attr-defined]
        foreign = redis_client.xadd(ctx.models.actuals.key, {"a": "not json"})  # the read skips it
        monkeypatch.setattr(ActualsLog, "rows_after", stalled)
        thread = threading.Thread(target=retrain, args=(ctx,))
        thread.start()
        assert reading.wait(WAIT_S)
    said = len(caplog.records)
    returned.set()
    thread.join(WAIT_S)
    try:
        assert not thread.is_alive()
        assert len(outcome) == 1  # it gave up at its fit's first round, storing nothing
        assert [r.getMessage() for r in caplog.records[said:]] == []  # the skipped entry unsaid
        assert not [r for r in caplog.records if str(foreign) in r.getMessage()]
        assert ModelStore(settings.model_dir).versions() == []
    finally:
        ctx.redis.close()  # the pool the stop left open for it
