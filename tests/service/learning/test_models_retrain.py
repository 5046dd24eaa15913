"""Retraining and model versions: what a retrain stores, how replicas pick it up, the retrain lock."""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
from pathlib import Path

import pytest
import redis
from fastapi.testclient import TestClient

from service.app import create_app
from service.delivery import keys
from service.learning.models import Retrained
from service.settings import Settings
from tests.service.api_helpers import AppFactory, actual_history, actual_report, batch_body
from tests.service.learning.reload_helpers import (
    RELOAD_TEST_S,
    noticed,
    retrained_beside_a_serving_replica,
    served,
    serving_beside_a_trainer,
)


def test_retrain_stores_a_version_and_later_plans_use_it(client: TestClient) -> None:
    client.post("/actuals", json={"actuals": actual_history(steps=2)})
    retrained = client.post("/models/retrain")
    assert retrained.status_code == 200, retrained.text
    assert retrained.json()["version"] == "v1"
    assert retrained.json()["history_rows"] == 64
    status = client.get("/models").json()
    assert status["version"] == "v1"
    assert status["stored_versions"] == ["v1"]
    answer = client.post("/schedule", json=batch_body(step=2, publish=False)).json()
    assert answer["model_version"] == "v1"
    assert answer["prediction_sources"] == {"lightgbm": 32}


def test_a_retrain_leaves_only_the_newest_versions_configured(make_client: AppFactory) -> None:
    client = make_client(model_keep=2)
    client.post("/actuals", json={"actuals": actual_history(steps=2)})
    for _ in range(3):
        assert client.post("/models/retrain").status_code == 200
    assert client.get("/models").json()["stored_versions"] == ["v2", "v3"]


def test_a_retrain_without_new_actuals_still_stores_a_version_of_the_same_boosters(
    client: TestClient, tmp_path: Path
) -> None:
    """On purpose (docs/api.md): a 200 always names a version stored now; the store stays bounded."""
    client.post("/actuals", json={"actuals": actual_history(steps=2)})
    assert [client.post("/models/retrain").json()["version"] for _ in range(2)] == ["v1", "v2"]
    store = tmp_path / "models"  # the conftest's store
    first, second = (json.loads((store / v / "metadata.json").read_text()) for v in ("v000001", "v000002"))
    assert first["checksums"] == second["checksums"]
    assert {key for key in first if first[key] != second[key]} <= {"fit_seconds", "fence_token"}


def test_features_named_and_typed_any_way_by_workers_never_break_a_retrain(client: TestClient) -> None:
    # ``gap`` is a base feature's name too (LightGBM refuses a name twice); a trace column's, ``step``,
    # is refused at validation since api60 (tests/service/api/test_feature_names.py)
    first, second = actual_history(steps=1), [actual_report(1, p, i) for p in range(8) for i in range(4)]
    for report in first:
        report["features"] = {"judge:format": 1.0, "gap": 3.0, "bucket": 2.0}
    for report in second:
        report["features"] = {"judge:format": 0.0, "gap": 4.0, "bucket": "hard"}
    assert client.post("/actuals", json={"actuals": first}).status_code == 200
    assert client.post("/actuals", json={"actuals": second}).status_code == 200
    retrained = client.post("/models/retrain")
    assert retrained.status_code == 200, retrained.text
    body = batch_body(step=2, publish=False)
    body["batch"]["items"][0]["features"] = {"bucket": "hard", "judge:format": 1.0}
    answer = client.post("/schedule", json=body)
    assert answer.status_code == 200, answer.text
    assert answer.json()["prediction_sources"] == {"lightgbm": 32}


def test_retrain_without_actuals_is_a_409_problem(client: TestClient) -> None:
    response = client.post("/models/retrain")
    assert response.status_code == 409
    assert response.json()["field"] == "history"


def test_a_retrain_refused_for_too_few_actuals_is_counted_so_and_logs_no_failure(
    client: TestClient, caplog: pytest.LogCaptureFixture
) -> None:
    """A refusal is counted where it is decided (``insufficient_data``), and its 409 says it: it is
    no failed retrain, neither counted ``error`` nor logged ``retrain failed``."""
    caplog.set_level(logging.INFO)
    assert client.post("/models/retrain").status_code == 409
    text = client.get("/metrics").text
    assert 'rollout_retrains_total{outcome="insufficient_data"} 1.0' in text
    assert 'rollout_retrains_total{outcome="error"} 0.0' in text
    assert [r.getMessage() for r in caplog.records if r.getMessage().startswith("retrain failed")] == []


def test_a_new_replica_starts_with_the_stored_model_and_the_streamactual_history(
    make_client: AppFactory,
) -> None:
    first = make_client()
    first.post("/actuals", json={"actuals": actual_history(steps=2)})
    assert first.post("/models/retrain").status_code == 200
    second = make_client()
    status = second.get("/models").json()
    assert status["version"] == "v1"
    assert status["history_rows"] == 64


def test_automatic_retrain_runs_at_the_configured_step_boundary(make_client: AppFactory) -> None:
    client = make_client(retrain_every_steps=2)
    client.post("/schedule", json=batch_body(step=0))
    client.post("/actuals", json={"actuals": actual_history(steps=2)})
    client.post("/schedule", json=batch_body(step=1))
    assert client.get("/models").json()["version"] == "fallback"  # one step: not a boundary yet
    client.post("/schedule", json=batch_body(step=2))
    retrainer = client.app.state.context.retrainer  # type: ignore[attr-defined]
    assert retrainer.background is not None
    retrainer.background.join(60)
    assert client.get("/models").json()["version"] == "v1"


def test_requests_keep_succeeding_while_a_retrain_swaps_the_model(client: TestClient) -> None:
    client.post("/actuals", json={"actuals": actual_history(steps=2)})
    statuses: list[int] = []
    versions: set[str] = set()
    done = threading.Event()

    def plan_continuously() -> None:
        while not done.is_set() or len(statuses) < 3:
            answer = client.post("/schedule", json=batch_body(step=2, publish=False))
            statuses.append(answer.status_code)
            versions.add(answer.json().get("model_version", "?"))

    planner = threading.Thread(target=plan_continuously)
    planner.start()
    try:
        assert client.post("/models/retrain").status_code == 200
        after = client.post("/schedule", json=batch_body(step=2, publish=False)).json()
    finally:
        done.set()
        planner.join(60)
    assert set(statuses) == {200}
    assert after["model_version"] == "v1"
    assert versions <= {"fallback", "v1"}


def test_a_new_run_starting_over_at_step_zero_restarts_the_retrain_count(
    make_client: AppFactory, redis_client: redis.Redis
) -> None:
    client = make_client(retrain_every_steps=5)
    client.post("/schedule", json=batch_body(step=40))
    client.post("/schedule", json=batch_body(step=0))
    assert redis_client.get("rs:retrain:step") == "0"


def test_a_dry_run_starts_no_retrain_and_moves_no_step_counter(
    make_client: AppFactory, redis_client: redis.Redis
) -> None:
    client = make_client(retrain_every_steps=2)
    client.post("/actuals", json={"actuals": actual_history(steps=2)})
    client.post("/schedule", json=batch_body(step=0))
    client.post("/schedule", json=batch_body(step=1000, publish=False))  # "plan only, write nothing"
    assert client.app.state.context.retrainer.background is None  # type: ignore[attr-defined]
    assert redis_client.get("rs:retrain:step") == "0"


def test_an_idle_replica_reports_the_version_another_replica_stored(
    make_client: AppFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    import time

    from service.learning import models

    monkeypatch.setattr(models, "RELOAD_EVERY_S", RELOAD_TEST_S)  # the wait, not its length, is tested
    trainer_side, idle = make_client(), make_client()
    trainer_side.post("/actuals", json={"actuals": actual_history(steps=2)})
    assert trainer_side.post("/models/retrain").json()["version"] == "v1"
    time.sleep(RELOAD_TEST_S + 0.1)
    assert idle.get("/models").json()["version"] == "v1"  # it has planned nothing since
    assert idle.get("/readyz").json()["model"] == "v1"


def test_a_running_replica_picks_up_a_version_another_replica_trained(
    make_client: AppFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, other = retrained_beside_a_serving_replica(make_client, monkeypatch)
    noticed(other, "v1")  # by its follower, one tick after the version was stored
    answer = other.post("/schedule", json=batch_body(step=2, publish=False)).json()
    assert answer["model_version"] == "v1"
    assert answer["prediction_sources"] == {"lightgbm": 32}


def test_a_followed_replica_loads_another_replicas_version_off_the_request_path(
    make_client: AppFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The load (8-9 ms) ran in a ``/schedule``, once a second: now the follower's tick runs it, and
    a request after it predicts with the version loaded, loading nothing itself."""
    trainer_side, other = serving_beside_a_trainer(make_client, monkeypatch)
    store = served(other).store
    loaded_on: list[str] = []
    load = store.load

    def recorded_load(version: int | None = None) -> object:
        loaded_on.append(threading.current_thread().name)
        return load(version)

    monkeypatch.setattr(store, "load", recorded_load)
    assert trainer_side.post("/models/retrain").json()["version"] == "v1"
    noticed(other, "v1")  # asked nothing meanwhile
    answer = other.post("/schedule", json=batch_body(step=2, publish=False)).json()
    assert answer["model_version"] == "v1"
    assert loaded_on == ["actuals-follower"]


def test_a_damaged_newest_version_leaves_the_service_serving_the_one_it_has(
    make_client: AppFactory, tmp_path: Path
) -> None:
    trainer_side = make_client()
    trainer_side.post("/actuals", json={"actuals": actual_history(steps=2)})
    assert trainer_side.post("/models/retrain").json()["version"] == "v1"
    damaged = tmp_path / "models" / "v000002"  # the store every client of this test shares
    damaged.mkdir()
    for name in ("p50.txt", "p90.txt", "metadata.json"):
        (damaged / name).write_text("garbage")
    starting = make_client()  # started on a store whose newest version does not load
    assert starting.get("/readyz").json()["model"] == "v1"
    answer = starting.post("/schedule", json=batch_body(step=2, publish=False))
    assert answer.status_code == 200
    assert answer.json()["model_version"] == "v1"


def _retrain_stuck_in_its_fit(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> tuple[threading.Event, threading.Thread]:
    """Start a background retrain (as a step boundary does) on ``client``'s replica whose fit waits
    until the returned event is set."""
    ctx = client.app.state.context  # type: ignore[attr-defined]
    proceed, fitting = threading.Event(), threading.Event()
    real_fit = ctx.models.retrain

    def slow_fit(**kwargs: object) -> Retrained:
        fitting.set()
        proceed.wait(10)
        return real_fit(**kwargs)  # type: ignore[no-any-return]

    def retrain() -> None:
        with contextlib.suppress(Exception):  # its replica may be gone before it ends
            ctx.retrainer.retrain_now()

    monkeypatch.setattr(ctx.models, "retrain", slow_fit)
    background = threading.Thread(target=retrain, daemon=True)
    background.start()
    assert fitting.wait(5)
    return proceed, background


def test_a_replica_stopped_mid_retrain_gives_the_lock_back(
    live_settings: Settings,
    make_client: AppFactory,
    redis_client: redis.Redis,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A rolling restart just after a step boundary had blocked every retrain for 15 minutes."""
    first = TestClient(create_app(live_settings), raise_server_exceptions=False).__enter__()
    second = make_client()
    first.post("/actuals", json={"actuals": actual_history(steps=2)})
    proceed, request = _retrain_stuck_in_its_fit(first, monkeypatch)
    try:
        assert second.post("/models/retrain").status_code == 409  # one at a time across replicas
        first.__exit__(None, None, None)  # SIGTERM while the fit runs: the lifespan ends
        assert redis_client.get("rs:retrain:lock") is None
        assert second.post("/models/retrain").status_code == 200
    finally:
        proceed.set()
        request.join(timeout=10)


def test_every_replica_reports_a_retrain_running_in_another(
    make_client: AppFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``retraining`` said false on every replica but the one fitting, whose peers then refused
    ``POST /models/retrain`` with 409 "already running in another replica"."""
    fitting, other = make_client(), make_client()
    fitting.post("/actuals", json={"actuals": actual_history(steps=2)})
    proceed, request = _retrain_stuck_in_its_fit(fitting, monkeypatch)
    try:
        assert fitting.get("/models").json()["retraining"] is True
        assert other.get("/models").json()["retraining"] is True
        assert other.post("/models/retrain").status_code == 409
    finally:
        proceed.set()
        request.join(timeout=10)
    assert other.get("/models").json()["retraining"] is False


def test_the_retrain_lock_outlives_its_ttl_while_the_fit_runs(
    client: TestClient, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(keys, "RETRAIN_LOCK_TTL_S", 1)
    client.post("/actuals", json={"actuals": actual_history(steps=2)})
    proceed, request = _retrain_stuck_in_its_fit(client, monkeypatch)
    try:
        time.sleep(2.5)  # over twice the TTL
        assert redis_client.get("rs:retrain:lock") is not None
    finally:
        proceed.set()
        request.join(timeout=10)


def test_a_lock_whose_release_failed_does_not_block_this_replicas_next_retrain(
    client: TestClient, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Redis restarting (from its AOF) just as a fit ended kept the lock for its TTL, and the next
    step boundary skipped its retrain as "already running in another replica": its own lock."""
    retrainer = client.app.state.context.retrainer  # type: ignore[attr-defined]
    release = retrainer.lock._release

    def down_once(**kwargs: object) -> object:
        monkeypatch.setattr(retrainer.lock, "_release", release)
        raise redis.ConnectionError("Redis is restarting")

    monkeypatch.setattr(retrainer.lock, "_release", down_once)
    client.post("/actuals", json={"actuals": actual_history(steps=2)})
    assert client.post("/models/retrain").status_code == 200
    assert redis_client.get("rs:retrain:lock") is not None  # the restarted Redis still holds it
    assert client.post("/models/retrain").status_code == 200
    assert redis_client.get("rs:retrain:lock") is None


def test_a_lock_release_that_meets_a_redis_outage_logs_one_line_without_a_traceback(
    client: TestClient, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Redis killed as an automatic retrain ended logged 40 lines of the Redis client's traceback
    for an expected outage (the lock lapses by itself); the log line alone says which error it was."""
    retrainer = client.app.state.context.retrainer  # type: ignore[attr-defined]

    def down(**kwargs: object) -> object:
        raise redis.ConnectionError("Error 111 connecting to 127.0.0.1:6379. Connection refused.")

    monkeypatch.setattr(retrainer.lock, "_release", down)
    client.post("/actuals", json={"actuals": actual_history(steps=2)})
    with caplog.at_level("WARNING", logger="service.retrain"):
        assert client.post("/models/retrain").status_code == 200
    [line] = [r for r in caplog.records if "retrain lock" in r.getMessage()]
    assert "ConnectionError: Error 111" in line.getMessage()
    assert not line.exc_info  # no traceback


def test_a_hot_reload_that_listed_the_store_before_a_retrain_saved_does_not_roll_it_back(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A request's hot reload lists the store, then swaps in its newest version unless held. Listed
    just before a retrain here saved v2, it swapped v1 back in over the v2 the retrain had just
    answered with: /models and the plans said v1 until the next reload, a second later or more."""
    models = client.app.state.context.models  # type: ignore[attr-defined]
    client.post("/actuals", json={"actuals": actual_history(steps=2)})
    assert client.post("/models/retrain").json()["version"] == "v1"
    listed, resume = threading.Event(), threading.Event()
    versions = type(models.store).versions

    def paused_listing(store: object) -> list[int]:
        found: list[int] = versions(models.store)
        if threading.current_thread().name == "reload":
            listed.set()
            resume.wait(10)  # the listing is taken; the swap waits for the retrain
        return found

    monkeypatch.setattr(type(models.store), "versions", paused_listing)
    swap_lock, asked = models._swap_lock, threading.Event()

    class AskedFor:  # the swap lock, saying when the retrain asks for it (fitted: to save and swap)
        def __enter__(self) -> None:
            if threading.current_thread().name == "retrain":
                asked.set()
            swap_lock.acquire()

        def __exit__(self, *exc: object) -> None:
            swap_lock.release()

    monkeypatch.setattr(models, "_swap_lock", AskedFor())
    reload = threading.Thread(target=models._reload, name="reload")
    reload.start()
    assert listed.wait(10)
    retrain = threading.Thread(target=models.retrain, name="retrain")
    retrain.start()
    deadline = time.monotonic() + 60  # saved, or waiting for the reload in hand: the order is the point
    while retrain.is_alive() and not asked.wait(0.01):  # (was a 5 s join, out to its end where it waited)
        assert time.monotonic() < deadline, "the retrain neither ended nor asked for the swap lock"
    resume.set()
    reload.join(10)
    retrain.join(60)
    assert (models.version, models.store.versions()) == ("v2", [1, 2])
