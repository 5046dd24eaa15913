"""A Redis Cluster client's own errors are Redis not doing it, as a ``RedisError`` is.

redis-py's cluster client raises errors that are no ``RedisError`` when it cannot reach a command's
node: ``SlotNotCoveredError`` (a slot mid-reshard), ``RedisClusterException`` (its slot map rebuilt
and found short); and CLUSTERDOWN and TRYAGAIN came as ``RedisError``s the problem table did not
list. Each was a 500 where a stalled or down Redis is a 503 with ``Retry-After``, and one raised in a
take-back or in the bookkeeping after a publish replaced a request's answer. Here the real server
answers, and one delivery method is wrapped to raise the real exception class the cluster client
raises; ``tests/service/api/test_cluster_unserved_slot.py`` meets the real condition on a cluster.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import pytest
import redis
from fastapi.testclient import TestClient
from redis.exceptions import ClusterDownError, RedisClusterException, SlotNotCoveredError, TryAgainError

from service.delivery import Delivery
from service.delivery import keys as keyspace
from service.speeds.learner import SpeedLearner
from tests.service.api_helpers import batch_body

UNCOVERED = SlotNotCoveredError('Slot "5" is not covered by the cluster.')


def _raising(error: Exception) -> Callable[..., None]:
    def raises(*_: object, **__: object) -> None:
        raise error

    return raises


@pytest.mark.parametrize(
    "error",
    [
        UNCOVERED,
        RedisClusterException("All slots are not covered after query all startup_nodes."),
        ClusterDownError("Hash slot not served"),
        TryAgainError("Multiple keys request during rehashing of slot"),
    ],
    ids=["slot-not-covered", "slot-map-short", "clusterdown", "tryagain"],
)
def test_a_read_the_cluster_cannot_serve_now_is_a_503_to_retry(
    client: TestClient, monkeypatch: pytest.MonkeyPatch, error: Exception
) -> None:
    sid = client.post("/schedule", json=batch_body()).json()["schedule_id"]
    monkeypatch.setattr(Delivery, "progress", _raising(error))
    answer = client.get(f"/schedule/{sid}")
    assert (answer.status_code, answer.headers.get("Retry-After")) == (503, "1"), answer.text
    assert answer.json()["type"].endswith("/redis-unavailable")
    assert answer.json()["detail"].startswith(f"Redis is unreachable ({type(error).__name__}")


def test_a_mark_the_cluster_client_could_not_write_is_a_503_and_no_step_entry(
    client: TestClient, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(Delivery, "mark_planning", _raising(UNCOVERED))
    answer = client.post("/schedule", json=batch_body(schedule_id="uncovered", step=2))
    assert (answer.status_code, answer.headers.get("Retry-After")) == (503, "1"), answer.text
    assert not redis_client.exists(keyspace.schedule_keys("uncovered").meta)
    assert not redis_client.zcard(keyspace.step_planning(2))


@pytest.mark.parametrize("take_back", ["unmark_planning", "leave_planning"])
def test_a_take_back_the_cluster_client_fails_leaves_the_request_s_answer_alone(
    client: TestClient, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, take_back: str
) -> None:
    """The mark and the step's entry lapse by themselves; a take-back that raised over the answer
    told a trainer whose step was published that it failed (500), and a retry of it planned again."""
    monkeypatch.setattr(Delivery, take_back, _raising(UNCOVERED))
    with caplog.at_level(logging.WARNING):
        answer = client.post("/schedule", json=batch_body(schedule_id="held", step=2))
    assert answer.status_code == 200, answer.text
    assert client.get("/schedule/held").json()["total"] == sum(
        map(len, answer.json()["assignments"].values())
    )
    assert "left to lapse" in caplog.text


def test_bookkeeping_after_a_publish_the_cluster_client_fails_is_a_warning_and_a_200(
    client: TestClient, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(Delivery, "enter_step", _raising(UNCOVERED))
    monkeypatch.setattr(SpeedLearner, "remember", _raising(UNCOVERED))
    with caplog.at_level(logging.WARNING):
        answer = client.post("/schedule", json=batch_body(schedule_id="out", step=2))
    assert answer.status_code == 200, answer.text
    failed = [r.getMessage() for r in caplog.records if r.getMessage().startswith("step published, but")]
    assert [line.split(": ")[1] for line in failed] == 2 * ["SlotNotCoveredError"]


def test_readiness_says_unreachable_when_the_cluster_client_cannot_reach_a_node(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(redis.Redis, "ping", _raising(UNCOVERED))
    answer = client.get("/readyz")
    assert answer.status_code == 503, answer.text
    assert answer.json()["redis"].startswith("unreachable: Slot")


# What a cluster client raises once its own retries are spent (``RedisCluster.ERRORS_ALLOW_RETRY``
# retries a TimeoutError too): the try before may have run the script, its answer lost.
AFTER_A_LOST_ANSWER = [ClusterDownError("Hash slot not served"), TryAgainError("during rehashing")]


def _landed_then(method: Callable[..., object], error: Exception) -> Callable[..., None]:
    """``method`` run (its write landed), then ``error``: the cluster client's retry after a try whose
    answer was lost."""

    def lands_then_raises(*args: object, **kwargs: object) -> None:
        method(*args, **kwargs)
        raise error

    return lands_then_raises


@pytest.mark.parametrize("error", AFTER_A_LOST_ANSWER, ids=["clusterdown", "tryagain"])
def test_a_mark_the_cluster_client_failed_after_a_lost_answer_is_taken_back(
    client: TestClient, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch, error: Exception
) -> None:
    """CLUSTERDOWN and TRYAGAIN are Redis's answers (``ResponseError``), but to the cluster client's
    last try: the mark may be there, and is taken back (a take-back of no mark writes nothing). Told
    as a refusal, nothing landed, it was left, and a DELETE meanwhile answered 202 ``withdrawn`` for
    a step nobody plans."""
    monkeypatch.setattr(Delivery, "mark_planning", _landed_then(Delivery.mark_planning, error))
    answer = client.post("/schedule", json=batch_body(schedule_id="lost", step=2))
    assert answer.status_code == 503, answer.text
    assert not redis_client.exists(keyspace.schedule_keys("lost").planning)


@pytest.mark.parametrize("error", AFTER_A_LOST_ANSWER, ids=["clusterdown", "tryagain"])
def test_a_step_entry_the_cluster_client_failed_after_a_lost_answer_is_taken_back(
    client: TestClient, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch, error: Exception
) -> None:
    """The same for the step's planning entry: left, it kept its step out of a retrain its whole life
    (the plan queue's timeout + the budget + 60 s). The request is refused 503 as a failed mark's is
    (``step_part.arrive``), nothing published."""
    monkeypatch.setattr(Delivery, "enter_planning", _landed_then(Delivery.enter_planning, error))
    answer = client.post("/schedule", json=batch_body(schedule_id="entered", step=2))
    assert answer.status_code == 503, answer.text
    assert not redis_client.zcard(keyspace.step_planning(2))
    assert not redis_client.exists(keyspace.step_schedules(2))
