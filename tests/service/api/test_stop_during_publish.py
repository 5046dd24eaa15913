"""A publish under way when the replica stops runs to its end (``service/api/stopping.py``).

It is one Lua call, which Redis runs whole or not at all: the request's thread waits for the reply that
says whether the step is out. Nothing checks the stop after it, so a step that is out is answered as
published (200), never the stop's 503, and its bookkeeping (the id in its step's set, the in-flight
mark's take-back) goes on, on the stop's daemon; a retry under the same chosen id, at another
replica, is answered the same plan. Real Redis; the stop is set as the publish's call goes out.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
import redis

from service.api.schedules import REPLAYED_HEADER
from service.delivery import keys as keyspace
from service.delivery import publisher
from service.pipeline import post_publish
from tests.service.api_helpers import AppFactory, batch_body

WAIT_S = 30.0  # a bound against never for the daemon's bookkeeping, not a speed


def test_a_step_published_as_the_replica_stops_is_answered_and_kept(
    make_client: AppFactory, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    stopping, other = make_client(), make_client()
    stop: threading.Event = stopping.app.state.stopping  # type: ignore[attr-defined]
    real = publisher.publish_plan

    def stopped_as_it_goes_out(*args: Any, **kwargs: Any) -> Any:
        stop.set()  # the replica's stop, as the Lua call is sent
        return real(*args, **kwargs)

    monkeypatch.setattr("service.pipeline.publish.publish_plan", stopped_as_it_goes_out)
    body = batch_body(schedule_id="stop49-step", step=5, policy="lpt")
    first = stopping.post("/schedule", json=body)
    assert (first.status_code, stop.is_set()) == (200, True), first.text
    assert post_publish.settle(WAIT_S) == 0  # the bookkeeping the stop handed to its daemon ended
    assert redis_client.sismember(keyspace.step_schedules(5), "stop49-step")
    assert other.get("/schedule/stop49-step").status_code == 200
    retry = other.post("/schedule", json=body)
    assert (retry.status_code, retry.headers.get(REPLAYED_HEADER)) == (200, "true")
    assert retry.json()["assignments"] == first.json()["assignments"]
    _until_released(redis_client, "stop49-step")


def _until_released(client: redis.Redis, schedule_id: str) -> None:
    """The request's in-flight mark is taken back (by the stop's daemon), within the bound."""
    deadline = time.monotonic() + WAIT_S
    while client.hlen(keyspace.schedule_keys(schedule_id).planning) > 0:
        assert time.monotonic() < deadline, "the in-flight mark was never taken back"
        time.sleep(0.05)
