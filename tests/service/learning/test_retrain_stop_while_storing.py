"""A retrain past its fence when its replica stops keeps the version it is storing, and says so.

The stop's halt is checked at the fence before the store (``Retrainer._fence``); the fence runs
again once the version is renamed into place, to take it back where the retrain lock lapsed. That
second run checked the halt too: a stop that came while the version was written took back a
complete version with the current fencing token, after its rename, so another replica's hot reload
could load it and then find it gone, or half removed (review52d). And a stop whose window such a
store outlasted said the retrain "stores no version" while it was storing one. The stop also
releases the retrain lock (``Startup.halt``): released under a store, the version's last fence
found the lock gone and took the version back all the same (``Retrainer.release_at_stop``). Real
Redis, real LightGBM, the real store; the store's ``save`` is wrapped only to place the stop in it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

import pytest
from fastapi.testclient import TestClient

from predictors.store import ModelStore
from service.app import create_app
from service.context import Context
from service.settings import Settings
from tests.service.api_helpers import actual_history, with_settings

WINDOW_S = 0.5  # the stop's window (one command timeout)
WAIT_S = 60.0  # a bound on the test's own waits


def _save_after(monkeypatch: pytest.MonkeyPatch, before: Callable[[], None]) -> None:
    """The store's real ``save``, with ``before`` run as it begins (past the retrain's fence)."""
    save = ModelStore.save

    def saving(store: ModelStore, *args: Any, **kwargs: Any) -> int:
        before()
        return save(store, *args, **kwargs)

    monkeypatch.setattr(ModelStore, "save", saving)


def test_a_stop_that_comes_while_the_version_is_stored_leaves_it_in_place_and_serving(
    live_settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = with_settings(live_settings, redis_timeout_s=WINDOW_S)
    with TestClient(create_app(settings)) as client:
        assert client.post("/actuals", json={"actuals": actual_history(steps=3)}).status_code == 200
        ctx: Context = client.app.state.context  # type: ignore[attr-defined]
        retrainer = ctx.retrainer

        def stop_begins() -> None:  # what ``Startup.halt`` does to the retrainer, in its order
            retrainer.halt()
            retrainer.release_at_stop()

        _save_after(monkeypatch, stop_begins)
        result = retrainer.retrain_now("request")
        assert ModelStore(settings.model_dir).versions() == [int(result.version[1:])]  # not taken back
        assert ctx.models.version == result.version  # and serving


def test_a_store_that_outlasts_the_stops_window_is_said_to_be_storing_its_version(
    live_settings: Settings, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    settings = with_settings(live_settings, redis_timeout_s=WINDOW_S)
    storing, returned = threading.Event(), threading.Event()

    def held() -> None:
        storing.set()
        assert returned.wait(WAIT_S)

    outcome: list[object] = []
    caplog.set_level(logging.INFO)
    with TestClient(create_app(settings)) as client:
        assert client.post("/actuals", json={"actuals": actual_history(steps=3)}).status_code == 200
        ctx: Context = client.app.state.context  # type: ignore[attr-defined]
        _save_after(monkeypatch, held)
        retrain = threading.Thread(target=lambda: outcome.append(ctx.retrainer.retrain_now("request")))
        retrain.start()
        assert storing.wait(WAIT_S)
    said = len(caplog.records)
    returned.set()
    retrain.join(WAIT_S)
    try:
        assert not retrain.is_alive()
        [line] = [r.getMessage() for r in caplog.records if r.getMessage().startswith("retrain abandoned")]
        assert "storing its version" in line
        assert "stores no version" not in line
        assert len(ModelStore(settings.model_dir).versions()) == 1  # stored whole, after the stop
        assert len(outcome) == 1  # and the retrain ended well
        assert [r.getMessage() for r in caplog.records[said:]] == []  # its lines end at the stop's
    finally:
        ctx.redis.close()  # the pool the stop left open for it


def test_a_retrain_asked_for_once_its_replica_is_stopping_is_answered_503_to_retry_elsewhere(
    live_settings: Settings,
) -> None:
    with TestClient(create_app(live_settings)) as client:
        assert client.post("/actuals", json={"actuals": actual_history(steps=3)}).status_code == 200
        ctx: Context = client.app.state.context  # type: ignore[attr-defined]
        ctx.retrainer.halt()  # the stop's first step (``Startup.halt``)
        answer = client.post("/models/retrain")
    assert answer.status_code == 503
    assert answer.headers["Retry-After"] == "1"
    assert answer.json()["type"].endswith("unavailable")
    assert answer.json()["detail"] == "the replica is stopping: the retrain gave up, nothing stored"
    assert ModelStore(live_settings.model_dir).versions() == []
