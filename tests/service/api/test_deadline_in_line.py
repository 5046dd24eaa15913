"""The caller's deadline (``X-Envoy-Expected-Rq-Timeout-Ms``) while a ``POST /schedule`` waits in line
and while its in-flight mark lives: the wait for a plan slot ends at the deadline when that comes
before ``ROLLOUT_PLAN_QUEUE_TIMEOUT_S`` (504 ``deadline-exceeded``, nothing written), and the mark lives
the budget the plan can still be given under it, not the whole one asked for. A body only the planner
refuses, refused in line, is refused for what it is (422).

No assertion reads how fast anything ran: the slot is held by the test, and the deadline has passed
before the request is sent (``0``) or is one the request cannot reach in line."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import httpx
import pytest
import redis
from fastapi.testclient import TestClient

from service.delivery import keys
from service.limits import PlanSlots
from service.pipeline import deadline
from service.pipeline.deadline import Deadline
from service.problems.table import DeadlineExceededError, UnavailableError
from service.settings import Settings
from tests.service.api.badinput import redis_snapshot
from tests.service.api.replicas import context, replicas, until
from tests.service.api_helpers import AppFactory, batch_body, with_settings

HEADER = deadline.HEADER
PLANNING = keys.schedule_keys("late").planning
QUEUE_TIMEOUT_S = 30.0  # long enough that a request left waiting for it could not pass these tests


def test_a_request_in_line_when_its_deadline_passes_is_a_504_not_a_wait_for_the_queue_timeout(
    make_client: AppFactory, redis_client: redis.Redis
) -> None:
    """Every slot is held, and the deadline passed as the request came: it waited on for the queue's
    timeout (its caller long gone), then answered the queue's 503. Its mark is taken back."""
    client = make_client(max_concurrent_plans=1, plan_queue_timeout_s=QUEUE_TIMEOUT_S)
    before = redis_snapshot(redis_client)
    waited: list[Any] = []  # the TestClient's responses
    with client.app.state.context.plan_slots.hold():  # type: ignore[attr-defined]
        sent = threading.Thread(
            target=lambda: waited.append(
                client.post("/schedule", json=batch_body(schedule_id="late"), headers={HEADER: "0"})
            ),
            daemon=True,
        )
        sent.start()
        sent.join(QUEUE_TIMEOUT_S / 2)  # a bound against never: right, it answers at once
        assert not sent.is_alive(), "the request waited for the queue's timeout past its deadline"
    [late] = waited
    assert late.status_code == 504
    problem = late.json()
    assert (problem["type"].rsplit("/", 1)[1], problem["field"]) == ("deadline-exceeded", HEADER)
    assert "in line" in problem["detail"]
    assert "retry-after" not in late.headers
    assert redis_snapshot(redis_client) == before
    assert client.delete("/schedule/late").status_code == 404


def test_a_deadline_after_the_queue_timeout_leaves_the_queue_s_503(make_client: AppFactory) -> None:
    """The queue gives up first: busy, retry in a second, as without a deadline."""
    client = make_client(max_concurrent_plans=1, plan_queue_timeout_s=0.2)
    with client.app.state.context.plan_slots.hold():  # type: ignore[attr-defined]
        busy = client.post("/schedule", json=batch_body(), headers={HEADER: "600000"})
    assert busy.status_code == 503
    assert "busy" in busy.json()["detail"]
    assert busy.headers["retry-after"] == "1"


def test_the_wait_for_a_slot_ends_at_a_deadline_before_the_queue_timeout() -> None:
    slots = PlanSlots(1, timeout_s=QUEUE_TIMEOUT_S)
    refused: list[BaseException] = []

    def late_step() -> None:
        try:
            with slots.hold(until=Deadline(time.perf_counter() - 1.0)):
                pass
        except (DeadlineExceededError, UnavailableError) as error:
            refused.append(error)

    with slots.hold():  # a plan runs
        step = threading.Thread(target=late_step, daemon=True)
        step.start()
        step.join(QUEUE_TIMEOUT_S / 2)
        assert not step.is_alive()
    assert [type(error) for error in refused] == [DeadlineExceededError]


def test_a_slot_free_when_a_late_request_reaches_it_is_taken() -> None:
    """The wait is what the deadline ends; the request is refused by the deadline's own check next
    (``stages._serve_valid``), as one whose deadline passed in line."""
    slots = PlanSlots(1, timeout_s=QUEUE_TIMEOUT_S)
    with slots.hold(until=Deadline(time.perf_counter() - 1.0)) as waited_s:
        assert waited_s >= 0.0


@pytest.mark.parametrize(
    ("queue_timeout_s", "sent"), [(QUEUE_TIMEOUT_S, "0"), (0.2, None)], ids=["deadline", "queue-timeout"]
)
def test_a_body_only_the_planner_refuses_is_its_422_when_the_wait_in_line_ends(
    make_client: AppFactory, queue_timeout_s: float, sent: str | None
) -> None:
    """A pin to a worker the inventory lacks, with no chosen id, meets the planner's rules only when
    it plans: refused in line, by its deadline or the queue's timeout, it answered that 504 or 503,
    and its retry the 422 it is."""
    client = make_client(max_concurrent_plans=1, plan_queue_timeout_s=queue_timeout_s)
    body = batch_body(prompts=1, n=1)
    body["batch"]["items"][0]["pinned_worker"] = "w9"
    with client.app.state.context.plan_slots.hold():  # type: ignore[attr-defined]
        refused = client.post("/schedule", json=body, headers={} if sent is None else {HEADER: sent})
    assert (refused.status_code, refused.json()["field"]) == (422, "batch.items[0].pinned_worker")


def _mark_ttl_ms(redis_client: redis.Redis) -> int:
    """The lifetime the request's entry in ``P:planning`` was given (``accepted_ms:deadline_ms``)."""
    [entry] = redis_client.hvals(PLANNING)
    accepted, lapses = str(entry).split(":")
    return int(lapses) - int(accepted)


def _extended(redis_client: redis.Redis, settings: Settings) -> bool:
    """The request's mark is in and extended: written first for one command timeout (the answer's
    window), then extended to the request's life; read between the two it states the window."""
    window_ms = int(settings.redis_timeout_s * 1000)
    return bool(redis_client.exists(PLANNING)) and _mark_ttl_ms(redis_client) != window_ms


@pytest.mark.parametrize("sent", [None, "10000", "600000"], ids=["none", "10-s", "600-s"])
def test_the_in_flight_mark_lives_the_budget_the_deadline_leaves_the_plan(
    live_settings: Settings, redis_client: redis.Redis, sent: str | None
) -> None:
    """A 60 s budget under a 10 s deadline plans 9.75 s at most, so its mark needs no more: it had
    the whole 60 s, and a dead replica's mark (and the withdrawal a DELETE turns it into) lived on
    that much longer. A deadline past the budget, or none, leaves it the whole budget. Read while
    the request waits in line for the slot the test holds."""
    settings = with_settings(live_settings, max_concurrent_plans=1, plan_queue_timeout_s=QUEUE_TIMEOUT_S)
    body = batch_body(schedule_id="late", time_budget_ms=60_000, policy="round_robin")
    headers = {} if sent is None else {HEADER: sent}

    async def run() -> tuple[int, httpx.Response]:
        async with replicas(settings) as [http]:
            with context(http).plan_slots.hold():
                step = asyncio.create_task(http.post("/schedule", json=body, headers=headers))
                await until(lambda: _extended(redis_client, settings))  # accepted, in line
                ttl_ms = _mark_ttl_ms(redis_client)
            return ttl_ms, await step

    ttl_ms, answer = asyncio.run(run())
    assert answer.status_code == 200
    margin_ms = (QUEUE_TIMEOUT_S + keys.PLANNING_MARGIN_S) * 1000
    if sent == "10000":
        assert margin_ms < ttl_ms <= margin_ms + 10_000 - deadline.MIN_RESERVE_S * 1000
        assert answer.json()["time_budget_ms"] <= ttl_ms - margin_ms + 1  # the plan's, in the mark's (ms)
    else:
        assert ttl_ms == margin_ms + 60_000


def test_a_capped_mark_beside_an_older_replica_s_keeps_that_one_s_expiry(
    client: TestClient, redis_client: redis.Redis
) -> None:
    """Mixed versions: an older replica's request under the id (a bare ``accepted_ms`` entry, the key's
    TTL its whole budget) is not cut short by a newer one's shorter mark, nor by its take-back
    (``lua/planning.lua``: a mark only extends the TTL; an entry with no deadline keeps it)."""
    redis_client.hset(PLANNING, "old", 1)
    redis_client.pexpire(PLANNING, 150_000)
    answer = client.post("/schedule", json=batch_body(schedule_id="late"), headers={HEADER: "0"})
    assert answer.status_code == 504  # marked with no budget at all, then taken back
    assert redis_client.hkeys(PLANNING) == ["old"]
    assert redis_client.pttl(PLANNING) > 140_000
