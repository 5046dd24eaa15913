"""A ``POST /schedule`` under a chosen id whose in-flight mark lapsed while it planned (Redis failed
every keep for the last half margin before the kept deadline, ``service/pipeline/in_flight.py``) is
refused its publish: 503 ``mark-lapsed``, Redis left as it was before the request. A DELETE in that
window finds no mark and answers 404, and nothing reaches the fleet (before the publish's check the
request, not told, published the step its trainer believed withdrawn). A request whose mark held, a
drawn id, a dry run and a retry answer as before. On the real embedded valkey; the lapse is the mark's
key expiring under the planning request."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
import redis
from fastapi.testclient import TestClient

from service.delivery import keys
from service.pipeline import stages
from tests.service.api.badinput import redis_snapshot
from tests.service.api_helpers import batch_body

PLANNING = keys.schedule_keys("lapsed").planning
WAIT_S = 30.0


def _lapsing(
    monkeypatch: pytest.MonkeyPatch, redis_client: redis.Redis
) -> tuple[threading.Event, threading.Event]:
    """Each request, once planning, has its mark lapse (its key expires on Redis's clock), sets the
    first event and plans once the second is set (or after ``WAIT_S``)."""
    lapsed, go_on = threading.Event(), threading.Event()
    original = stages._plans

    def lapse(*args: Any, **kwargs: Any) -> Any:
        assert redis_client.pexpire(PLANNING, 1)  # the request's mark was there until now
        while redis_client.exists(PLANNING):
            time.sleep(0.005)
        lapsed.set()
        go_on.wait(WAIT_S)
        return original(*args, **kwargs)

    monkeypatch.setattr(stages, "_plans", lapse)
    return lapsed, go_on


def test_a_publish_whose_mark_lapsed_while_it_planned_is_refused_503_and_leaves_redis_as_it_was(
    client: TestClient, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = redis_snapshot(redis_client)
    _, go_on = _lapsing(monkeypatch, redis_client)
    go_on.set()

    refused = client.post("/schedule", json=batch_body(schedule_id="lapsed"))

    assert refused.status_code == 503
    assert refused.headers["retry-after"] == "1"
    problem = refused.json()
    assert (problem["type"].rsplit("/", 1)[-1], problem["field"], problem["value"]) == (
        "mark-lapsed",
        "schedule_id",
        "lapsed",
    )
    assert redis_snapshot(redis_client) == before


def test_a_delete_in_that_window_stays_a_404_and_nothing_reaches_the_fleet(
    client: TestClient, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The trainer restarted, gave the step up and DELETEd its id while the old request planned: the
    DELETE cannot tell the id from a typo (404, nothing written), so the old request must not publish."""
    lapsed, go_on = _lapsing(monkeypatch, redis_client)
    answers: list[Any] = []
    body = batch_body(schedule_id="lapsed")
    thread = threading.Thread(target=lambda: answers.append(client.post("/schedule", json=body)))
    thread.start()
    try:
        assert lapsed.wait(WAIT_S)
        deleted = client.delete("/schedule/lapsed")
    finally:
        go_on.set()
        thread.join(WAIT_S)
    assert (deleted.status_code, deleted.json()["field"]) == (404, "schedule_id")
    assert answers[0].status_code == 503
    assert not redis_client.exists(keys.schedule_keys("lapsed").meta)
    assert client.get("/schedule/lapsed").status_code == 404
    delivery = client.app.state.context.delivery  # type: ignore[attr-defined]
    assert (delivery.active_schedules(), delivery.schedules_for("w0"), delivery.schedules_for("w1")) == (
        [],
        [],
        [],
    )


def test_a_held_mark_a_drawn_id_a_dry_run_and_a_retry_answer_as_before(
    client: TestClient, redis_client: redis.Redis
) -> None:
    """Only a chosen id's request names its mark to the publish: a drawn id's or a dry run's, named, would
    be refused (they hold none)."""
    published = client.post("/schedule", json=batch_body(schedule_id="held"))
    assert (published.status_code, published.json()["replayed"]) == (200, False)
    assert not redis_client.exists(keys.schedule_keys("held").planning)  # the publish took it
    retried = client.post("/schedule", json=batch_body(schedule_id="held"))
    assert (retried.status_code, retried.json()["replayed"]) == (200, True)
    drawn = client.post("/schedule", json=batch_body())
    assert (drawn.status_code, drawn.json()["published"]) == (200, True)
    assert redis_client.exists(keys.schedule_keys(drawn.json()["schedule_id"]).meta)
    dry = client.post("/schedule", json=batch_body(schedule_id="dry", publish=False))
    assert (dry.status_code, dry.json()["published"]) == (200, False)
    assert not redis_client.exists(keys.schedule_keys("dry").meta)
