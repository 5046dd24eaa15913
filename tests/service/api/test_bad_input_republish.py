"""A request under a schedule id already published (a lost race, a retry with a bad field): answered
the first plan or refused, publishing nothing and changing nothing but the announce."""

from __future__ import annotations

import json
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import redis
from fastapi.testclient import TestClient

from service.delivery import keys
from tests.service.api.badinput import Body, Snapshot, redis_snapshot, set_at
from tests.service.api_helpers import AppFactory, batch_body


def _but_inbox_expiry(before: Snapshot, after: Snapshot) -> None:
    """``after`` is ``before`` but for the workers' inboxes, whose expiry an announce may push later
    (every answer for a published id announces the step again, so that it means the step is out)."""
    inboxes = {key for key in before if key.startswith("rs:inbox:")}
    assert inboxes
    assert {k: v for k, v in after.items() if k not in inboxes} == {
        k: v for k, v in before.items() if k not in inboxes
    }
    for key in inboxes:
        assert after[key][0] == before[key][0]
        assert after[key][1] >= before[key][1]


def test_a_publish_that_loses_a_race_for_its_schedule_id_answers_the_winners_plan_and_changes_nothing(
    client: TestClient, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    winner = client.post("/schedule", json=batch_body(schedule_id="race"))
    assert winner.status_code == 200
    before = redis_snapshot(redis_client), redis_client.hgetall("rs:workers")
    _early_check_before_the_winner(client, monkeypatch)
    second = batch_body(schedule_id="race")
    second["inventory"]["workers"][0]["device"] = "A100-80GB"  # another plan, the same work
    response = client.post("/schedule", json=second)
    assert (response.status_code, response.headers["idempotent-replayed"]) == (200, "true")
    assert _plan_of(response.json()) == _plan_of(winner.json())  # never the loser's own plan
    assert response.json()["time_scales"] == winner.json()["time_scales"]
    _but_inbox_expiry(before[0], redis_snapshot(redis_client))
    assert redis_client.hgetall("rs:workers") == before[1]  # the loser's profiles describe no plan


def test_a_publish_that_loses_a_race_to_other_work_under_its_id_is_refused_and_changes_nothing(
    client: TestClient, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert client.post("/schedule", json=batch_body(schedule_id="race")).status_code == 200
    before = redis_snapshot(redis_client)
    _early_check_before_the_winner(client, monkeypatch)
    response = client.post("/schedule", json=batch_body(schedule_id="race", step=8))  # same plan, other step
    assert (response.status_code, response.json()["field"]) == (422, "schedule_id")
    assert redis_snapshot(redis_client) == before


def test_of_two_identical_requests_racing_for_one_schedule_id_only_one_is_told_it_published(
    client: TestClient, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    body = batch_body(schedule_id="twins")
    first = client.post("/schedule", json=body)
    assert first.json()["replayed"] is False
    before = redis_snapshot(redis_client)
    _early_check_before_the_winner(client, monkeypatch)
    response = client.post("/schedule", json=body)
    assert (response.status_code, response.json()["replayed"]) == (200, True)
    assert _plan_of(response.json()) == _plan_of(first.json())
    # Like every answer for a published id, the loser announces the step again (so that it means the
    # step is out, even if the winner's announce was lost): only the inboxes' expiry may move, later.
    _but_inbox_expiry(before, redis_snapshot(redis_client))


def test_a_publish_that_loses_a_race_to_a_schedule_expired_since_is_a_409_naming_its_id(
    client: TestClient, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The winner's schedule lapsed between the loser's publish (which met it) and the loser's read
    of its answer: too late to be anyone's retry, and never an answer that the loser published."""
    assert client.post("/schedule", json=batch_body(schedule_id="race")).status_code == 200
    profiles = redis_client.hgetall("rs:workers")

    def retention_passed() -> None:
        redis_client.delete(*redis_client.keys(keys.schedule_keys("race").pattern))

    _early_check_before_the_winner(client, monkeypatch, retention_passed)
    second = batch_body(schedule_id="race")
    second["inventory"]["workers"][0]["device"] = "A100-80GB"  # another plan, the same work
    response = client.post("/schedule", json=second)
    assert (response.status_code, response.json()["field"]) == (409, "schedule_id")
    assert "expired" in response.json()["detail"]
    assert redis_client.hgetall("rs:workers") == profiles  # the loser's profiles describe no plan


def test_requests_racing_for_one_schedule_id_publish_it_once_and_all_answer_its_plan(
    make_client: AppFactory, redis_client: redis.Redis
) -> None:
    """Real concurrency: each request on its own thread, the loser passing the early check or not. The
    command timeout is wide: at the default 1 s a thread stalled at load 15 between the in-flight
    mark's write and its extension heard a late mark's 503 (``LateMarkError``), a refusal of its own
    that this race is not about."""
    client = make_client(redis_timeout_s=10.0)
    bodies = [batch_body(prompts=16, n=4, schedule_id="crowd", seed=seed) for seed in range(4)]
    for seed, body in enumerate(bodies):
        body["inventory"]["workers"][0]["device"] = "A100-80GB" if seed % 2 else "H100"
    with ThreadPoolExecutor(len(bodies)) as pool:
        answers = list(pool.map(lambda b: client.post("/schedule", json=b), bodies))
    assert [a.status_code for a in answers] == [200] * len(bodies)
    assert sorted(a.json()["replayed"] for a in answers) == [False] + [True] * (len(bodies) - 1)
    assert len({json.dumps(_plan_of(a.json()), sort_keys=True) for a in answers}) == 1
    assert client.get("/schedule/crowd").json()["total"] == 64


def _early_check_before_the_winner(
    client: TestClient, monkeypatch: pytest.MonkeyPatch, before_read: Callable[[], None] = lambda: None
) -> None:
    """The next request is the loser of two concurrent ones: its early check read the id before the
    winner stored it (found nothing), so it plans, and its publish meets the winner's schedule;
    ``before_read`` runs before each later read of the id (the winner's answer)."""
    delivery = client.app.state.context.delivery  # type: ignore[attr-defined]
    real = delivery.stored_request

    def later(schedule_id: str) -> Any:
        before_read()
        return real(schedule_id)

    reads = iter([lambda schedule_id: None])
    monkeypatch.setattr(delivery, "stored_request", lambda sid: next(reads, later)(sid))


def _plan_of(answer: dict[str, Any]) -> dict[str, Any]:
    """An answer without what belongs to the request that got it (its timings, the replay mark)."""
    return {k: v for k, v in answer.items() if k not in ("timings", "replayed")}


def _pinned_body() -> Body:
    """A valid body whose first prompt is pinned to worker ``w1``."""
    body = batch_body(schedule_id="kept")
    body["batch"]["items"][0]["pinned_worker"] = "w1"
    return body


@pytest.mark.parametrize(
    ("edit", "field"),
    [
        (set_at("inventory.workers.0.device", "TPUv9"), "inventory.workers[0].device"),
        (set_at("policy", "fastest"), "policy"),
        (set_at("inventory.workers.1.worker_id", "w0"), "inventory.workers[1].worker_id"),
        (set_at("inventory.workers.1.worker_id", "w7"), "batch.items[0].pinned_worker"),
        (set_at("inventory.workers.1.drain", True), "batch.items[0].pinned_worker"),
        (set_at("inventory.workers.1.kv_capacity_tokens", 1000), "batch.items[0].max_new_tokens"),
    ],
    ids=[
        "unknown device",
        "unknown policy",
        "duplicate worker_id",
        "a pin to a worker the inventory lacks",
        "a pin to a drained worker",
        "a cap the pinned worker's cache cannot hold",
    ],
)
def test_a_retry_under_a_published_id_with_a_bad_field_is_a_422_naming_it_and_announces_nothing(
    edit: Callable[[Body], None], field: str, client: TestClient, redis_client: redis.Redis
) -> None:
    assert client.post("/schedule", json=_pinned_body()).status_code == 200
    inboxes = sorted(redis_client.scan_iter("rs:inbox:*"))
    for key in inboxes:  # a retention clearly below the one an announce sets again
        redis_client.pexpire(key, 1_000_000)
    before = redis_snapshot(redis_client)
    retry = _pinned_body()  # the same work: only planning knobs differ
    edit(retry)
    response = client.post("/schedule", json=retry)
    assert response.status_code == 422, response.text
    assert response.json()["field"] == field
    assert redis_snapshot(redis_client) == before
    assert inboxes
    assert all(0 < redis_client.pttl(key) <= 1_000_000 for key in inboxes)


@pytest.mark.parametrize(
    "planning",
    [{"model": "14b"}, {"quantile": 0.9}, {"prefix_affinity": True}, {"kv_admission": True}],
)
def test_a_retry_changing_a_planning_field_is_answered_the_first_plan(
    planning: dict[str, Any], client: TestClient
) -> None:
    """docs/api.md: only ``batch``, ``sampling`` and ``step`` name the work; the rest plans it."""
    first = client.post("/schedule", json=batch_body(schedule_id="planning"))
    retry = client.post("/schedule", json=batch_body(schedule_id="planning", **planning))
    assert (retry.status_code, retry.json()["replayed"]) == (200, True)
    assert retry.json()["assignments"] == first.json()["assignments"]


def test_a_dry_run_under_a_published_id_plans_anew_and_writes_nothing(
    client: TestClient, redis_client: redis.Redis
) -> None:
    assert client.post("/schedule", json=batch_body(schedule_id="dry")).status_code == 200
    before = redis_snapshot(redis_client)
    dry = client.post("/schedule", json=batch_body(schedule_id="dry", publish=False))
    assert (dry.status_code, dry.json()["replayed"], dry.json()["published"]) == (200, False, False)
    assert redis_snapshot(redis_client) == before


def _fleet(*workers: str) -> dict[str, Any]:
    return {"workers": [{"worker_id": worker, "device": "H100"} for worker in workers]}


def test_another_fleets_request_under_a_published_id_is_a_422_not_its_plan_and_changes_nothing(
    client: TestClient, redis_client: redis.Redis
) -> None:
    """Two trainers sharing a service under one run id: the second, on workers of its own, was
    answered the first one's plan (replayed) and followed a step its engines never ran."""
    assert client.post("/schedule", json=batch_body(schedule_id="run-1-step-0")).status_code == 200
    before = redis_snapshot(redis_client)
    theirs = batch_body(schedule_id="run-1-step-0", inventory=_fleet("b0", "b1"))
    other = client.post("/schedule", json=theirs)
    assert (other.status_code, other.json()["field"]) == (422, "schedule_id"), other.text
    assert "unique per run and step" in other.json()["detail"]
    assert redis_snapshot(redis_client) == before


def test_a_retry_that_lost_a_worker_since_its_first_attempt_is_still_answered_the_first_plan(
    client: TestClient,
) -> None:
    first = client.post("/schedule", json=batch_body(schedule_id="lost-one"))
    retry = client.post("/schedule", json=batch_body(schedule_id="lost-one", inventory=_fleet("w1", "w9")))
    assert (retry.status_code, retry.json()["replayed"]) == (200, True)
    assert retry.json()["assignments"] == first.json()["assignments"]
