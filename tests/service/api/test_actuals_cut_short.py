"""Actuals of a step cancelled before it finished: its results are the short trajectories (the long
ones were still running), so the service refuses to learn from them unless the batch says so."""

from __future__ import annotations

from typing import Any

import pytest
import redis
from fastapi.testclient import TestClient

from service.delivery import CompletionOutcome, Delivery
from tests.service.api.badinput import redis_snapshot
from tests.service.api_helpers import actual_report, batch_body
from tests.service.finished import RESULT

Report = dict[str, Any]


def _run(client: TestClient, redis_client: redis.Redis, schedule_id: str, finish: int) -> list[Report]:
    """Publish a 4-trajectory step on one worker, finish ``finish`` of them, cancel it; the reports
    of the finished ones, naming the step."""
    reports = _finish(client, redis_client, schedule_id, finish)
    assert client.delete(f"/schedule/{schedule_id}").status_code == 200
    return reports


def _finish(client: TestClient, redis_client: redis.Redis, schedule_id: str, finish: int) -> list[Report]:
    """Publish a 4-trajectory step on one worker and finish ``finish`` of them; their reports."""
    body = batch_body(prompts=2, n=2, workers=1, schedule_id=schedule_id, step=3)
    assert client.post("/schedule", json=body).status_code == 200
    delivery = Delivery(redis_client)
    leases = delivery.claim(schedule_id, "w0", 4)
    for lease in leases[:finish]:
        assert delivery.complete(lease, RESULT) is CompletionOutcome.ACCEPTED
    return [
        actual_report(3, int(lease.item.prompt_id[1:]), lease.item.sample_idx) | {"schedule_id": schedule_id}
        for lease in leases[:finish]
    ]


def test_actuals_of_a_step_cancelled_midway_are_refused_naming_it_and_change_nothing(
    client: TestClient, redis_client: redis.Redis
) -> None:
    survivors = _run(client, redis_client, "step-3", finish=2)
    batch = [actual_report(2, 0, 0), *survivors]  # an earlier step's report rides along: refused too
    before = redis_snapshot(redis_client)

    response = client.post("/actuals", json={"actuals": batch})

    assert response.status_code == 409, response.text
    problem = response.json()
    assert (problem["field"], problem["value"]) == ("actuals[1].schedule_id", "step-3")
    assert problem["type"].endswith("/step-cut-short")
    assert "cancelled with 2 of its 4 trajectories unfinished" in problem["detail"]
    assert '"partial": true' in problem["detail"]  # says how to store them knowingly
    assert redis_snapshot(redis_client) == before


def test_a_batch_that_says_partial_stores_the_cancelled_step_s_reports(
    client: TestClient, redis_client: redis.Redis
) -> None:
    survivors = _run(client, redis_client, "step-3", finish=2)

    response = client.post("/actuals", json={"actuals": survivors, "partial": True})

    assert response.status_code == 200, response.text
    assert (response.json()["accepted"], redis_client.xlen("rs:actuals")) == (2, 2)


def test_a_step_cancelled_after_every_trajectory_finished_is_whole_and_its_actuals_are_stored(
    client: TestClient, redis_client: redis.Redis
) -> None:
    every = _run(client, redis_client, "step-3", finish=4)  # its cancel ended nothing

    response = client.post("/actuals", json={"actuals": every})

    assert response.status_code == 200, response.text
    assert response.json()["accepted"] == 4


def _expire(redis_client: redis.Redis, schedule_id: str) -> None:
    """What the schedule's retention does: every key of it goes."""
    for key in redis_client.scan_iter(match=f"rs:{{{schedule_id}}}:*"):
        redis_client.delete(key)


def test_actuals_of_a_step_whose_keys_expired_are_stored_and_the_answer_says_it_was_not_checked(
    client: TestClient, redis_client: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    """Its keys gone, a step cut short and a whole one look alike: the reports are stored, as the
    trainer holding a late step's results expects, and the answer names the step, where it said
    nothing and the reports passed for a whole step's."""
    survivors = _run(client, redis_client, "step-3", finish=2)  # cut short: refused while it is known
    _expire(redis_client, "step-3")

    with caplog.at_level("INFO", logger="service.actuals"):
        response = client.post("/actuals", json={"actuals": [actual_report(2, 0, 0), *survivors]})

    assert response.status_code == 200, response.text
    assert (response.json()["accepted"], response.json()["unchecked_schedules"]) == (3, ["step-3"])
    [line] = [r for r in caplog.records if r.getMessage() == "actuals stored"]
    assert line.__dict__["unchecked_schedule_ids"] == ["step-3"]


def test_actuals_of_a_step_it_holds_are_checked_and_the_answer_names_none_unchecked(
    client: TestClient, redis_client: redis.Redis
) -> None:
    every = _run(client, redis_client, "step-3", finish=4)
    imported = actual_report(1, 0, 0)  # names no schedule: nothing to check, nothing to say

    response = client.post("/actuals", json={"actuals": [imported, *every]})

    assert response.status_code == 200, response.text
    assert response.json()["unchecked_schedules"] == []


def test_a_cancel_landing_between_the_check_and_the_append_stores_what_a_report_just_before_it_does(
    client: TestClient, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Check and append are not one atomic step (on Redis Cluster they cannot be: the stream and the
    step live in other slots), and need not be. The append stores reports fixed before the check,
    of trajectories finished before any cancel, so a cancel between the two leaves what a report
    sent a moment earlier leaves (stored, then cancelled): a report cannot be refused for a cancel
    still to come. What the order does decide holds: every batch checked after the cancel sees it."""
    survivors = _finish(client, redis_client, "step-3", finish=2)
    delivery = client.app.state.context.delivery  # type: ignore[attr-defined]
    check = delivery.check_steps

    def check_then_cancel(schedule_ids: list[str]) -> Any:
        checked = check(schedule_ids)
        Delivery(redis_client).cancel("step-3")  # the trainer's DELETE, landing in between
        return checked

    monkeypatch.setattr(delivery, "check_steps", check_then_cancel)
    raced = client.post("/actuals", json={"actuals": survivors})
    monkeypatch.undo()

    assert (raced.status_code, raced.json()["accepted"]) == (200, 2)
    assert client.get("/schedule/step-3").json()["cancelled"] == 2
    assert client.post("/actuals", json={"actuals": survivors}).status_code == 409
