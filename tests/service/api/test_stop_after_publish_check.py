"""A stop that lands after the publish stage's check and before Redis runs the publish: the step is
out, and what the caller was told is true.

In an app served in process the handler still waits at the stop: the request is answered 200 with the
plan it published (a retry under its id is replayed the same plan), never the stop's 503. Under
``serve`` the stop comes only after uvicorn's graceful wait has cut the handlers still running, and the
cut request was answered 503 saying that a ``POST /schedule`` published nothing unless its publish
was already under way (``service/api/cut_answer.py``). A plan that reached its publish check after the
cut and before the stop found no stop and published: the 503 said otherwise. The cut now gives the
request's plan up at its next check as the stop does (stop50).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis

from service.api.cut_answer import CUT_DETAIL
from service.api.schedules import REPLAYED_HEADER
from service.delivery import keys as keyspace
from service.delivery import publisher
from service.embedded import EmbeddedServer
from service.pipeline import stages
from tests.service.api.cut_then_stopped import STARTED
from tests.service.api.stopped_child import stopped_while_posting
from tests.service.api_helpers import AppFactory, batch_body

ORDERED = "tests.service.api.cut_then_stopped"  # serve: the cut, the publish check, then the stop
WAIT_S = 120.0  # a bound against never, for a loaded host


def test_a_stop_after_the_publish_check_is_answered_the_published_plan(
    make_client: AppFactory, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    stopping, other = make_client(), make_client()
    stop: threading.Event = stopping.app.state.stopping  # type: ignore[attr-defined]
    check, sent = stages._not_stopped, list[bool]()

    def stopped_once_checked() -> None:
        check()
        stop.set()  # the replica's stop, the moment after the check

    def as_it_goes_out(*args: Any, **kwargs: Any) -> Any:
        sent.append(stop.is_set())
        return publisher.publish_plan(*args, **kwargs)

    monkeypatch.setattr(stages, "_not_stopped", stopped_once_checked)
    monkeypatch.setattr("service.pipeline.publish.publish_plan", as_it_goes_out)
    body = batch_body(schedule_id="stop50-step", step=6, policy="lpt")
    first = stopping.post("/schedule", json=body)
    assert (first.status_code, sent) == (200, [True]), first.text
    assert redis_client.exists(keyspace.schedule_keys("stop50-step").meta) == 1
    retry = other.post("/schedule", json=body)
    assert (retry.status_code, retry.headers.get(REPLAYED_HEADER)) == (200, "true")
    assert retry.json()["assignments"] == first.json()["assignments"]


@pytest.fixture
def server() -> Iterator[EmbeddedServer]:
    """A private server: the step's keys are looked at after the replica's exit."""
    with EmbeddedServer() as srv:
        yield srv


@pytest.mark.slow
def test_a_plan_that_reaches_its_publish_check_after_the_cut_publishes_nothing(
    server: EmbeddedServer, tmp_path: Path
) -> None:
    started, answers = tmp_path / "started", list[httpx.Response]()

    def post(url: str) -> None:
        body = batch_body(schedule_id="cut50", step=7, policy="lpt")
        answers.append(httpx.post(f"{url}/schedule", json=body, timeout=WAIT_S))

    _, logged = stopped_while_posting(
        ORDERED, server.url, tmp_path, started, post, WAIT_S, **{STARTED: str(started)}
    )
    assert [(a.status_code, a.json()["detail"]) for a in answers] == [(503, CUT_DETAIL)], logged
    client = redis.Redis.from_url(server.url)
    assert client.exists(keyspace.schedule_keys("cut50").meta) == 0, "the cut request published its step"
    assert client.sismember(keyspace.step_schedules(7), "cut50") == 0
