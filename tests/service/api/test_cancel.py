"""``DELETE /schedule/{id}``: a trainer cancels a step it gave up on, and the fleet moves on."""

from __future__ import annotations

import threading

import pytest
import redis
from fastapi.testclient import TestClient

from service.client import SchedulerAPIError, SchedulerClient
from service.delivery import CompletionOutcome, Delivery
from service.settings import Settings
from tests.service.api_helpers import TRAINER, WORKER, LiveServer, batch_body, bearer, with_settings
from tests.service.finished import RESULT

PORT = 21610  # this suite's loopback port for the live server


def _published(secured: TestClient, schedule_id: str = "step-1") -> str:
    body = batch_body(prompts=4, n=2, workers=2, schedule_id=schedule_id)
    response = secured.post("/schedule", json=body, headers=bearer(TRAINER))
    assert response.status_code == 200, response.text
    return schedule_id


def test_a_trainer_cancels_mid_step_and_keeps_the_results_accepted_before(
    secured: TestClient, redis_client: redis.Redis
) -> None:
    sid = _published(secured)
    delivery = Delivery(redis_client)
    done, running = delivery.claim(sid, "w0", 2)
    assert delivery.complete(done, RESULT) is CompletionOutcome.ACCEPTED

    response = secured.delete(f"/schedule/{sid}", headers=bearer(TRAINER))

    assert response.status_code == 200, response.text
    answer = response.json()
    assert (answer["schedule_id"], answer["cancelled"], answer["running"], answer["queued"]) == (sid, 7, 1, 6)
    assert delivery.complete(running, RESULT) is CompletionOutcome.STALE  # late: refused
    progress = secured.get(f"/schedule/{sid}", headers=bearer(TRAINER)).json()
    assert (progress["done"], progress["cancelled"], progress["queued"], progress["running"]) == (1, 7, 0, 0)
    assert progress["cancelled_at_ms"] == answer["cancelled_at_ms"]
    assert sum(w["total"] for w in progress["workers"].values()) == progress["total"] == 8
    results = secured.get(f"/schedule/{sid}/results", headers=bearer(TRAINER)).json()["results"]
    assert [r["key"] for r in results] == [done.key]
    assert delivery.schedules_for("w0") == []


def test_a_second_delete_answers_the_same(secured: TestClient) -> None:
    sid = _published(secured)
    first = secured.delete(f"/schedule/{sid}", headers=bearer(TRAINER))
    second = secured.delete(f"/schedule/{sid}", headers=bearer(TRAINER))
    assert (first.status_code, second.status_code) == (200, 200)
    assert first.json() == second.json()


def test_a_cancelled_step_sent_again_under_its_id_is_refused_as_cancelled(
    secured: TestClient, redis_client: redis.Redis
) -> None:
    sid = _published(secured)
    secured.delete(f"/schedule/{sid}", headers=bearer(TRAINER))
    body = batch_body(prompts=4, n=2, workers=2, schedule_id=sid)  # a restarted trainer's resend

    response = secured.post("/schedule", json=body, headers=bearer(TRAINER))

    assert response.status_code == 409
    assert "cancelled" in response.json()["detail"]  # not "follow it": it would wait on nothing
    assert Delivery(redis_client).schedules_for("w0") == []  # not announced to the workers again


def test_deleting_an_unknown_schedule_is_404(secured: TestClient) -> None:
    response = secured.delete("/schedule/never-published", headers=bearer(TRAINER))
    assert response.status_code == 404
    assert response.headers["content-type"] == "application/problem+json"
    assert response.json()["field"] == "schedule_id"


def test_a_worker_token_cannot_cancel(secured: TestClient, redis_client: redis.Redis) -> None:
    sid = _published(secured)
    assert secured.delete(f"/schedule/{sid}", headers=bearer(WORKER)).status_code == 403
    assert secured.delete(f"/schedule/{sid}").status_code == 401
    assert Delivery(redis_client).progress(sid).cancelled == 0


def test_the_client_cancels_and_a_waiting_trainer_returns(live_settings: Settings) -> None:
    settings = with_settings(live_settings, trainer_tokens=TRAINER, worker_tokens=WORKER)
    with LiveServer(settings, port=PORT) as server, SchedulerClient(server.url, token=TRAINER) as client:
        plan = client.schedule(batch_body(prompts=2, n=2, workers=2, schedule_id="given-up"))
        waited: list[int] = []
        waiter = threading.Thread(
            target=lambda: waited.append(
                client.wait(plan.schedule_id, timeout_s=20, poll_ms=100).progress.cancelled
            )
        )
        waiter.start()
        answer = client.cancel(plan.schedule_id)
        waiter.join(timeout=20)
        assert (answer.cancelled, waited) == (4, [4])  # wait() saw the step end, not a timeout
        assert client.cancel(plan.schedule_id) == answer
        with pytest.raises(SchedulerAPIError) as error:
            client.cancel("never-published")
        assert (error.value.status, error.value.field) == (404, "schedule_id")
