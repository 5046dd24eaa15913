"""``DELETE /schedule/{id}`` of a step not published yet: withdrawn when its ``POST /schedule`` is in
flight (202 ``withdrawn``; that request's publish is refused 409), a 404 that writes nothing when no
request under the id is (a mistyped id). The in-flight mark is in Redis, so the DELETE may land on
any replica; a request refused or published takes it back (``service/pipeline/in_flight.py``)."""

from __future__ import annotations

import asyncio
import threading

import httpx
import pytest
import redis
from fastapi.testclient import TestClient

from service.api.progress_schemas import CancelResponse
from service.client import AlreadyPublishedError, SchedulerAPIError, SchedulerClient, WithdrawnError
from service.delivery import keys
from service.pipeline import stages
from service.settings import Settings
from tests.service.api.badinput import Snapshot, redis_snapshot
from tests.service.api.replicas import Gate, context, first, replicas, until
from tests.service.api_helpers import TRAINER, LiveServer, batch_body, bearer, with_settings

PLANNING = keys.schedule_keys("abandoned").planning
STEP_ENTRIES = keys.step_planning(0)  # its step's planning entries, written just after the mark on arrival


def test_a_delete_of_an_id_never_sent_is_a_404_problem_and_leaves_redis_as_it_was(
    secured: TestClient, redis_client: redis.Redis
) -> None:
    """A mistyped id is bad input: it must not hold the id for the retention (it did: ``P:withdrawn``)."""
    published = batch_body(schedule_id="step-1")
    assert secured.post("/schedule", json=published, headers=bearer(TRAINER)).status_code == 200
    before = redis_snapshot(redis_client)

    response = secured.delete("/schedule/step-l", headers=bearer(TRAINER))

    assert (response.status_code, response.json()["field"]) == (404, "schedule_id")
    assert response.headers["content-type"] == "application/problem+json"
    assert redis_snapshot(redis_client) == before
    again = secured.post("/schedule", json=batch_body(schedule_id="step-l"), headers=bearer(TRAINER))
    assert (again.status_code, again.json()["replayed"]) == (200, False)  # the id is free


def test_a_delete_landing_while_its_step_waits_in_line_on_another_replica_withdraws_it(
    live_settings: Settings, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The old request waits for a plan slot on one replica; the restarted trainer's DELETE reaches
    the other: 202 ``withdrawn``, a repeat answers the same and writes nothing, and the old request,
    once it plans, is refused its publish (409 naming ``schedule_id``): nothing reaches the fleet.

    The DELETE waits until the request is in line (its thread at the plan slots), not only until its
    mark and entry are written: they are written as it arrives, before its thread reads whether the
    id was withdrawn. A DELETE landing between the two had that read refuse the request 409 before
    its wait in line, and its entry's take-back then landed between the snapshots (1 run in ~8 of
    this test beside a CPU burner; docs/experiments.md, withdraw48)."""
    settings = with_settings(live_settings, max_concurrent_plans=1, plan_queue_timeout_s=30)
    in_line = threading.Event()

    async def run() -> tuple[httpx.Response, httpx.Response, httpx.Response, tuple[Snapshot, Snapshot]]:
        async with replicas(settings, 2) as [old, new]:
            slots = context(old).plan_slots
            with slots.hold():  # another step is planning there
                monkeypatch.setattr(slots, "hold", first(in_line.set, slots.hold))
                step = asyncio.create_task(old.post("/schedule", json=batch_body(schedule_id="abandoned")))
                await until(in_line.is_set)  # accepted, checked, and waiting for the slot
                assert redis_client.exists(PLANNING, STEP_ENTRIES) == 2  # marked, and a part of its step
                withdrawn = await new.delete("/schedule/abandoned")
                before = redis_snapshot(redis_client)
                again = await new.delete("/schedule/abandoned")
                after = redis_snapshot(redis_client)
            return withdrawn, again, await step, (before, after)

    withdrawn, again, refused, (before, after) = asyncio.run(run())
    assert withdrawn.status_code == 202
    assert withdrawn.json() | {"cancelled_at_ms": 0} == {
        "schedule_id": "abandoned",
        "status": "withdrawn",
        "cancelled": 0,
        "queued": 0,
        "running": 0,
        "cancelled_at_ms": 0,
    }
    assert (again.status_code, again.json()) == (202, withdrawn.json())
    assert after == before  # compared as dicts: a failure names the keys that differ
    assert (refused.status_code, refused.json()["field"]) == (409, "schedule_id")
    assert "cancelled" in refused.json()["detail"]
    k = keys.schedule_keys("abandoned")
    assert (redis_client.exists(k.meta), redis_client.exists(k.planning)) == (0, 0)
    assert redis_client.zscore("rs:active", "abandoned") is None


def test_a_step_refused_in_line_takes_its_mark_back_so_a_delete_then_is_a_404(
    live_settings: Settings, redis_client: redis.Redis
) -> None:
    """A 503 from the plan queue leaves Redis as it was, the mark included: the trainer's DELETE of
    that id afterwards is a 404 that writes nothing, and the id stays free to publish."""
    settings = with_settings(live_settings, max_concurrent_plans=1, plan_queue_timeout_s=0.2)

    async def run() -> tuple[httpx.Response, httpx.Response, bool, httpx.Response]:
        async with replicas(settings) as [http]:
            before = redis_snapshot(redis_client)
            with context(http).plan_slots.hold():
                refused = await http.post("/schedule", json=batch_body(schedule_id="refused"))
            deleted = await http.delete("/schedule/refused")
            unchanged = redis_snapshot(redis_client) == before
            return (
                refused,
                deleted,
                unchanged,
                await http.post("/schedule", json=batch_body(schedule_id="refused")),
            )

    refused, deleted, unchanged, sent_again = asyncio.run(run())
    assert (refused.status_code, deleted.status_code) == (503, 404)
    assert unchanged
    assert (sent_again.status_code, sent_again.json()["replayed"]) == (200, False)


def test_a_published_step_leaves_no_mark_and_its_delete_cancels_it(
    secured: TestClient, redis_client: redis.Redis
) -> None:
    body = batch_body(schedule_id="abandoned")
    assert secured.post("/schedule", json=body, headers=bearer(TRAINER)).status_code == 200
    assert redis_client.exists(PLANNING) == 0  # the publish deleted it in its own step

    response = secured.delete("/schedule/abandoned", headers=bearer(TRAINER))

    assert (response.status_code, response.json()["status"], response.json()["queued"]) == (
        200,
        "cancelled",
        32,
    )
    assert redis_client.exists(keys.schedule_keys("abandoned").withdrawn) == 0


def test_the_client_returns_a_withdrawn_step_s_answer_typed_not_raised(
    live_settings: Settings, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A trainer on the client tells ``withdrawn`` from ``cancelled`` by ``status``; the step its
    first process sent then raises the 409 that says it was cancelled before it was published."""
    with LiveServer(live_settings) as server, SchedulerClient(server.url) as client:
        answer, refusals = _withdrawn_while_predicting(client, monkeypatch)
    assert (answer.status, answer.cancelled) == ("withdrawn", 0)
    assert [(e.status, e.field) for e in refusals] == [(409, "schedule_id")]


def test_a_step_sent_again_under_a_withdrawn_id_raises_withdrawn_not_already_published(
    live_settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A restarted trainer withdraws the step its first process had in flight, then sends it again
    under that id: nothing was published, so nothing is out to follow (``progress`` is a 404). Both
    refusals are ``WithdrawnError`` (``step-withdrawn``); the client raised ``AlreadyPublishedError``,
    which tells the trainer to follow the step with ``wait``, and that ``wait`` got the 404."""
    with LiveServer(live_settings) as server, SchedulerClient(server.url) as client:
        answer, refusals = _withdrawn_while_predicting(client, monkeypatch)
        assert answer.status == "withdrawn"
        with pytest.raises(SchedulerAPIError) as again:
            client.schedule(batch_body(schedule_id="abandoned"))
        with pytest.raises(SchedulerAPIError) as followed:
            client.progress("abandoned", outage_s=0)
    refused = [*refusals, again.value]
    assert [type(e) for e in refused] == [WithdrawnError, WithdrawnError]
    assert not any(isinstance(e, AlreadyPublishedError) for e in refused)
    assert isinstance(again.value, WithdrawnError)
    assert (again.value.status, again.value.field, again.value.schedule_id, again.value.retryable) == (
        409,
        "schedule_id",
        "abandoned",
        False,
    )
    assert again.value.problem["type"].endswith("/step-withdrawn")
    assert followed.value.status == 404


def _withdrawn_while_predicting(
    client: SchedulerClient, monkeypatch: pytest.MonkeyPatch
) -> tuple[CancelResponse, list[SchedulerAPIError]]:
    """A trainer's first process sends step ``abandoned`` and, while the service predicts it, the
    restarted one withdraws it: the ``DELETE``'s answer and what the first process was refused."""
    predicting = Gate()
    monkeypatch.setattr(stages, "predict", predicting.before(stages.predict))
    refusals: list[SchedulerAPIError] = []

    def first_process() -> None:
        try:
            client.schedule(batch_body(schedule_id="abandoned"))
        except SchedulerAPIError as error:
            refusals.append(error)

    sender = threading.Thread(target=first_process)
    sender.start()
    asyncio.run(until(lambda: predicting.reached == 1))
    answer = client.cancel("abandoned")
    predicting.open()
    sender.join(timeout=60)
    return answer, refusals
