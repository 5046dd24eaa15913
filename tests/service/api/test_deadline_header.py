"""The caller's deadline for ``POST /schedule`` (``X-Envoy-Expected-Rq-Timeout-Ms``, milliseconds from
its arrival: ``service/pipeline/deadline.py``): it caps the plan's time budget, as the answer's
``time_budget_ms`` reports, and a plan that cannot publish before it is refused 504 with nothing
written, where the service planned on and published a plan the caller had stopped waiting for. No
assertion reads how fast anything ran: a deadline already passed, or one the test holds the request
past, is 504 however slow the host."""

from __future__ import annotations

import time
from typing import Any

import pytest
import redis
from fastapi.testclient import TestClient

from service.delivery import keys
from service.pipeline import answer, deadline, stages
from tests.service.api.badinput import redis_snapshot
from tests.service.api_helpers import batch_body

HEADER = deadline.HEADER
LATE = keys.schedule_keys("late")


def _refused_past_its_deadline(answer: Any) -> None:
    assert answer.status_code == 504
    problem = answer.json()
    assert (problem["type"].rsplit("/", 1)[1], problem["field"]) == ("deadline-exceeded", HEADER)
    assert HEADER in problem["detail"]


@pytest.mark.parametrize("schedule_id", ["late", None], ids=["chosen-id", "drawn-id"])
def test_a_deadline_already_passed_is_a_504_that_writes_nothing(
    client: TestClient, redis_client: redis.Redis, schedule_id: str | None
) -> None:
    before = redis_snapshot(redis_client)
    late = client.post("/schedule", json=batch_body(schedule_id=schedule_id), headers={HEADER: "0"})
    _refused_past_its_deadline(late)
    assert redis_snapshot(redis_client) == before  # the in-flight mark taken back too
    assert client.delete("/schedule/late").status_code == 404
    sent_again = client.post("/schedule", json=batch_body(schedule_id=schedule_id))
    assert (sent_again.status_code, sent_again.json()["replayed"]) == (200, False)


def test_a_bad_body_past_its_deadline_is_refused_for_what_it_is(client: TestClient) -> None:
    bad = client.post("/schedule", json=batch_body(policy="no-such-policy"), headers={HEADER: "0"})
    assert (bad.status_code, bad.json()["field"]) == (422, "policy")


def test_a_retry_of_a_published_step_past_its_deadline_is_answered_its_plan(client: TestClient) -> None:
    """It plans nothing: its stored answer costs no more than the refusal would."""
    first = client.post("/schedule", json=batch_body(schedule_id="twice"))
    again = client.post("/schedule", json=batch_body(schedule_id="twice"), headers={HEADER: "0"})
    assert (again.status_code, again.json()["replayed"]) == (200, True)
    assert again.json()["assignments"] == first.json()["assignments"]


def test_a_deadline_shorter_than_the_budget_caps_the_budget_the_plan_reports(client: TestClient) -> None:
    """The cap leaves at least ``MIN_RESERVE_S`` before the deadline; a deadline past the budget changes
    nothing, nor does none."""
    body = batch_body(time_budget_ms=60_000, policy="round_robin")
    capped = client.post("/schedule", json=body, headers={HEADER: "30000"})
    roomy = client.post("/schedule", json=body, headers={HEADER: "600000"})
    unbounded = client.post("/schedule", json=body)
    assert capped.status_code == 200
    assert 0 < capped.json()["time_budget_ms"] <= 30_000 - deadline.MIN_RESERVE_S * 1000
    assert roomy.json()["time_budget_ms"] == unbounded.json()["time_budget_ms"] == 60_000


@pytest.mark.parametrize("value", ["1.5", "-1", "soon", "", "1e3", "9" * 5000 + "x"])
def test_a_deadline_that_is_no_whole_count_of_milliseconds_is_a_422_naming_the_header(
    client: TestClient, redis_client: redis.Redis, value: str
) -> None:
    before = redis_snapshot(redis_client)
    bad = client.post("/schedule", json=batch_body(schedule_id="late"), headers={HEADER: value})
    assert (bad.status_code, bad.json()["field"]) == (422, HEADER)
    assert redis_snapshot(redis_client) == before


@pytest.mark.parametrize("value", ["12345678901", "31536000000", "9" * 5000])
def test_a_wait_longer_than_any_plan_is_no_deadline_not_a_malformed_one(
    client: TestClient, value: str
) -> None:
    """Past 10 digits (~115 days: a client's ``timeout_s=1e9``, a proxy's year-long route timeout) the
    caller waits longer than any plan takes: planned as with no header, where it was refused 422."""
    body = batch_body(schedule_id="patient", time_budget_ms=60_000, policy="round_robin")
    patient = client.post("/schedule", json=body, headers={HEADER: value})
    assert (patient.status_code, patient.json()["time_budget_ms"]) == (200, 60_000)


def test_a_plan_that_reaches_its_publish_past_the_deadline_is_a_504_that_writes_nothing(
    client: TestClient, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The request is held after its plan until its own deadline has passed (the deadline it was
    given, read back; a state, not a guess at the host's speed): the publish is refused, and the
    in-flight mark it held is taken back."""
    given: list[deadline.Deadline] = []
    of, respond = deadline.of, answer.respond  # what stages calls by its own name

    def read_back(*args: Any, **kwargs: Any) -> deadline.Deadline:
        given.append(of(*args, **kwargs))
        return given[-1]

    def past_the_deadline(*args: Any, **kwargs: Any) -> Any:
        while given[-1].left_s() > 0:
            time.sleep(0.01)
        return respond(*args, **kwargs)

    monkeypatch.setattr(deadline, "of", read_back)
    monkeypatch.setattr(stages, "respond", past_the_deadline)
    before = redis_snapshot(redis_client)
    late = client.post("/schedule", json=batch_body(schedule_id="late"), headers={HEADER: "2000"})
    _refused_past_its_deadline(late)
    assert "published" in late.json()["detail"]
    assert redis_snapshot(redis_client) == before
    assert redis_client.exists(LATE.planning, LATE.meta) == 0
