"""The learning loop under concurrency: a fit that lost its lock, actuals landing during a fit, a
step boundary met while another replica fits. Real Redis (valkey), real files, real LightGBM."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis
from fastapi.testclient import TestClient

from predictors.history import History
from predictors.model import FittedModel, fit
from predictors.tracetable import Trace
from service.delivery import keys
from tests.service.api_helpers import AppFactory, actual_history, actual_report, batch_body

LOCK = keys.retrain_lock()


class PausedFit:
    """``service.learning.models.fit`` that, its model fitted, waits until told to go on (the store
    untouched)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.fitted, self.proceed = threading.Event(), threading.Event()

        def paused(history: History | Trace) -> FittedModel:
            model = fit(history)
            self.fitted.set()
            assert self.proceed.wait(30)
            return model

        monkeypatch.setattr("service.learning.models.fit", paused)


@pytest.fixture
def paused_fit(monkeypatch: pytest.MonkeyPatch) -> Iterator[PausedFit]:
    paused = PausedFit(monkeypatch)
    yield paused
    paused.proceed.set()  # a failed test leaves no fit waiting


def _in_background(call: Callable[[], Any]) -> tuple[threading.Thread, list[Any]]:
    """Run ``call`` (a request) on a thread; its answer lands in the list returned."""
    answers: list[Any] = []
    thread = threading.Thread(target=lambda: answers.append(call()), daemon=True)
    thread.start()
    return thread, answers


def test_a_fit_whose_retrain_lock_lapsed_is_not_stored(
    client: TestClient, redis_client: redis.Redis, paused_fit: PausedFit
) -> None:
    """A lock that lapsed under a long fit (renewals failed through a Redis outage) was taken by
    another replica, which fitted newer actuals; the first fit then stored its stale model anyway,
    as the newest version every replica served."""
    client.post("/actuals", json={"actuals": actual_history(steps=2)})
    thread, answers = _in_background(lambda: client.post("/models/retrain"))
    assert paused_fit.fitted.wait(60)
    redis_client.set(LOCK, "another-replicas-token", ex=60)  # lapsed, then taken by another replica
    paused_fit.proceed.set()
    thread.join(60)
    [answer] = answers
    assert answer.status_code == 409, answer.text
    assert answer.json()["field"] == "retrain_lock"
    status = client.get("/models").json()
    assert (status["version"], status["stored_versions"]) == ("fallback", [])
    assert redis_client.get(LOCK) == "another-replicas-token"  # the other replica's lock is left alone


def test_a_retrain_answers_the_rows_it_fitted_not_those_that_landed_meanwhile(
    client: TestClient, paused_fit: PausedFit
) -> None:
    client.post("/actuals", json={"actuals": actual_history(steps=2)})  # 64 reports
    thread, answers = _in_background(lambda: client.post("/models/retrain"))
    assert paused_fit.fitted.wait(60)
    late = [actual_report(2, p, i) for p in range(8) for i in range(4)]
    assert client.post("/actuals", json={"actuals": late}).json()["accepted"] == 32
    paused_fit.proceed.set()
    thread.join(60)
    [answer] = answers
    assert answer.status_code == 200, answer.text
    assert answer.json()["history_rows"] == 64
    assert client.get("/models").json()["history_rows"] == 96


def test_a_step_boundary_met_while_another_replica_fits_is_retrained_at_the_next_step(
    make_client: AppFactory, redis_client: redis.Redis
) -> None:
    """The boundary was claimed, its retrain skipped as busy, and the next retrain waited a whole
    interval more: the actuals of the steps in between were never fitted until then."""
    client = make_client(retrain_every_steps=2)
    client.post("/schedule", json=batch_body(step=0))
    client.post("/actuals", json={"actuals": actual_history(steps=2)})
    redis_client.set(LOCK, "another-replicas-token", ex=60)  # another replica's retrain is fitting
    client.post("/schedule", json=batch_body(step=2))
    redis_client.delete(LOCK)  # ... and ends
    client.post("/schedule", json=batch_body(step=3))
    retrainer: Any = client.app.state.context.retrainer  # type: ignore[attr-defined]
    assert retrainer.background is not None
    retrainer.background.join(60)
    assert redis_client.get(keys.retrain_step()) == "3"
    assert client.get("/models").json()["version"] == "v1"


def test_a_lock_this_replica_failed_to_release_does_not_hold_back_its_next_step_boundary(
    make_client: AppFactory, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = make_client(retrain_every_steps=2)
    retrainer: Any = client.app.state.context.retrainer  # type: ignore[attr-defined]
    release = retrainer.lock._release

    def down_once(**kwargs: object) -> object:
        monkeypatch.setattr(retrainer.lock, "_release", release)
        raise redis.ConnectionError("Redis is restarting")

    client.post("/schedule", json=batch_body(step=0))
    client.post("/actuals", json={"actuals": actual_history(steps=2)})
    monkeypatch.setattr(retrainer.lock, "_release", down_once)
    assert client.post("/models/retrain").json()["version"] == "v1"
    assert redis_client.get(LOCK) is not None  # the restarted Redis still holds it
    client.post("/schedule", json=batch_body(step=2))
    assert retrainer.background is not None
    retrainer.background.join(60)
    assert client.get("/models").json()["version"] == "v2"


def test_a_fitting_retrain_request_holds_up_no_other_request_and_a_second_is_refused_at_once(
    client: TestClient, paused_fit: PausedFit
) -> None:
    """The route is a plain ``def``: the fit runs on a worker thread, never on the event loop, so a
    fit of many seconds stalls nothing (measured at 12 s: /schedule p50 50 ms, 41 ms idle). A guard:
    an ``async`` route calling the fit would hang every request here until the fit ended."""
    client.post("/actuals", json={"actuals": actual_history(steps=2)})
    thread, answers = _in_background(lambda: client.post("/models/retrain"))
    assert paused_fit.fitted.wait(60)
    assert client.get("/healthz").status_code == 200
    assert client.post("/schedule", json=batch_body(step=2, publish=False)).status_code == 200
    second = client.post("/models/retrain")
    assert second.status_code == 409
    assert "already running in this replica" in second.json()["detail"]
    paused_fit.proceed.set()
    thread.join(60)
    assert [answer.status_code for answer in answers] == [200]


def test_a_fit_whose_lock_lapsed_between_its_check_and_its_rename_is_served_by_no_replica(
    make_client: AppFactory, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The lock check and the store's rename are two steps: a fit paused between them (a GC pause,
    a slow volume) while its lock lapsed, another replica fitting newer actuals meanwhile, renamed
    its stale model in last, as v2, which every replica then served. Its fencing token, lower than
    the other replica's, now has every reader pass it over, and the fit takes it back: 409."""
    monkeypatch.setattr("service.learning.models.RELOAD_EVERY_S", 0.0)
    stale, fresh = make_client(), make_client()
    stale.post("/actuals", json={"actuals": actual_history(steps=2)})
    store = stale.app.state.context.models.store  # type: ignore[attr-defined]
    renaming, proceed = threading.Event(), threading.Event()
    publish = store._publish

    def paused_publish(staging: Any) -> int:
        renaming.set()  # checked and staged: only the rename is left
        assert proceed.wait(30)
        return publish(staging)  # type: ignore[no-any-return]

    monkeypatch.setattr(store, "_publish", paused_publish)
    thread, answers = _in_background(lambda: stale.post("/models/retrain"))
    try:
        assert renaming.wait(60)
        redis_client.delete(LOCK)  # lapsed while paused
        late = [actual_report(2, p, i) for p in range(8) for i in range(4)]
        fresh.post("/actuals", json={"actuals": late})
        newer = fresh.post("/models/retrain")
        assert (newer.status_code, newer.json()["version"]) == (200, "v1")
    finally:
        proceed.set()
        thread.join(60)
    [answer] = answers
    assert answer.status_code == 409, answer.text
    assert answer.json()["field"] == "retrain_lock"
    for replica in (stale, fresh):
        status = replica.get("/models").json()
        assert (status["version"], status["stored_versions"]) == ("v1", ["v1"])
