"""A retrain under way when its replica stops gives up, or is abandoned, before the stop returns.

The retrain a step starts runs on a thread of its own (``Retrainer.after_step``), which nothing in
the app's stop waited for or told to stop: a test's automatic retrain logged ``automatic retrain
skipped`` after its app and log stream had closed (``--- Logging error ---``), and a service's fit on
past its stop and could write the model store after it. Now the stop halts the retrainer: a fit gives
up at its next boosting round or its fence, storing nothing, within the stop's window
(``Startup.stop``), and one the window does not see end is abandoned, said once, and says nothing
after. Real Redis, real LightGBM: the fit is the real one, started once the stop has begun (the first
test) or once the stop has returned (the second: a stretch of a fit with no check, outlasting the
window).
"""

from __future__ import annotations

import logging
import threading

import pytest
from fastapi.testclient import TestClient

from predictors.history import History
from predictors.model import FittedModel, fit
from predictors.store import ModelStore
from predictors.tracetable import Trace
from service.app import create_app
from service.context import Context
from service.settings import Settings
from tests.service.api_helpers import actual_history, with_settings

EVERY = 2  # steps between automatic retrains
WINDOW_S = 0.5  # the stop's window (one command timeout): what it waits for a retrain at most
WAIT_S = 60.0  # a bound on the test's own waits, far past any of the above


def _stopped_count(ctx: Context) -> float:
    value = ctx.metrics.registry.get_sample_value("rollout_retrains_total", {"outcome": "stopped"})
    return -1.0 if value is None else value


def _fit_waiting_for(event: threading.Event, fitting: threading.Event) -> object:
    """The real fit, begun once ``event`` is set."""

    def waiting(history: History | Trace) -> FittedModel:
        fitting.set()
        assert event.wait(WAIT_S)
        return fit(history)

    return waiting


def _started_retrain(client: TestClient, monkeypatch: pytest.MonkeyPatch, begin: threading.Event) -> Context:
    """The replica of ``client``, its automatic retrain started by a step, fitting once ``begin`` is set."""
    assert client.post("/actuals", json={"actuals": actual_history(steps=3)}).status_code == 200
    fitting = threading.Event()
    monkeypatch.setattr("service.learning.models.fit", _fit_waiting_for(begin, fitting))
    ctx: Context = client.app.state.context  # type: ignore[attr-defined]
    assert ctx.retrainer.after_step(0) is False  # the first step seen only sets the mark
    assert ctx.retrainer.after_step(EVERY) is True
    assert fitting.wait(WAIT_S)  # the retrain is under way: history read, fit about to begin
    return ctx


def _settings(live_settings: Settings) -> Settings:
    return with_settings(live_settings, retrain_every_steps=EVERY, redis_timeout_s=WINDOW_S)


def test_a_retrain_fitting_at_the_stop_gives_up_and_has_ended_before_the_stop_returns(
    live_settings: Settings, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    app = create_app(_settings(live_settings))
    with caplog.at_level(logging.INFO), TestClient(app) as client:
        ctx = _started_retrain(client, monkeypatch, begin=app.state.stopping)  # fits once the stop began
        before = _stopped_count(ctx)
    retrain = ctx.retrainer.background
    assert retrain is not None
    assert not retrain.is_alive()  # ended before the stop returned: nothing of it can log after
    lines = [(r.threadName, r.getMessage()) for r in caplog.records]
    [stopped] = [i for i, (_, line) in enumerate(lines) if line.startswith("retrain stopped: ")]
    [end] = [i for i, (_, line) in enumerate(lines) if line == "service stopped"]
    assert stopped < end
    assert all(thread != retrain.name for thread, _ in lines[end:])
    others = ("retrain done", "retrain failed", "retrain abandoned")
    assert not [line for _, line in lines if line.startswith(others)]
    assert ModelStore(live_settings.model_dir).versions() == []  # nothing stored after, or at, the stop
    assert _stopped_count(ctx) == before + 1


def test_a_retrain_that_outlasts_the_stops_window_is_abandoned_said_once_and_then_silent(
    live_settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    returned = threading.Event()  # the fit begins once the stop has returned: it outlasted the window
    app = create_app(_settings(live_settings))
    caplog.set_level(logging.INFO)  # for the whole test: the INFO lines after the stop are the point
    with TestClient(app) as client:
        ctx = _started_retrain(client, monkeypatch, begin=returned)
    retrain = ctx.retrainer.background
    assert retrain is not None
    assert retrain.is_alive()  # the stop did not wait past its window
    said = len(caplog.records)
    returned.set()
    retrain.join(WAIT_S)
    assert not retrain.is_alive()
    try:
        lines = [r.getMessage() for r in caplog.records]
        [abandoned] = [line for line in lines if line.startswith("retrain abandoned at the stop")]
        assert lines.index(abandoned) < lines.index("service stopped")
        assert "a retrain" in next(line for line in lines if line.startswith("Redis pool left open"))
        assert [r.getMessage() for r in caplog.records[said:]] == []  # the fit ended, and said nothing
        assert ModelStore(live_settings.model_dir).versions() == []  # its fence refused it after the stop
    finally:
        ctx.redis.close()  # the pool the stop left open for it
