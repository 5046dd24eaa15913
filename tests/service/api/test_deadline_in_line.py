"""The caller's deadline (``X-Envoy-Expected-Rq-Timeout-Ms``) while a ``POST /schedule`` waits in line:
the wait for a plan slot ends at the deadline when that comes before ``ROLLOUT_PLAN_QUEUE_TIMEOUT_S``
(504 ``deadline-exceeded``, nothing written).

No assertion reads how fast anything ran: the slot is held by the test, and the deadline has passed
before the request is sent (``0``)."""

from __future__ import annotations

import threading
import time
from typing import Any

import redis

from service.limits import PlanSlots
from service.pipeline import deadline
from service.pipeline.deadline import Deadline
from service.problems.table import DeadlineExceededError, UnavailableError
from tests.service.api.badinput import redis_snapshot
from tests.service.api_helpers import AppFactory, batch_body

HEADER = deadline.HEADER
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
