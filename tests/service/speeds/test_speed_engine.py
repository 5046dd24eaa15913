"""The engine a plan was made for is stored with its schedule, so that whatever reads the schedule
later, on any replica, plays it by that engine's rules: the speed learner prices a KV-starved batch
by them (``service/speeds/kv.py``), and a report reaches whichever replica its trainer's call lands on,
not necessarily the one that planned the step."""

from __future__ import annotations

import logging

import pytest
import redis
from fastapi.testclient import TestClient

from service.delivery import keys
from service.engines import SERVICE_ENGINE
from service.speeds.learner import SpeedLearner
from tests.service.api_helpers import AppFactory, batch_body


def _learner(client: TestClient) -> SpeedLearner:
    learner: SpeedLearner = client.app.state.context.speeds  # type: ignore[attr-defined]
    return learner


@pytest.mark.parametrize(
    ("named", "stored"), [(None, "vllm-v0"), ("vllm-v1", "vllm-v1"), ("vllm-v0", "vllm-v0")]
)
def test_another_replica_reads_the_engine_a_schedule_was_planned_for(
    make_client: AppFactory, redis_client: redis.Redis, named: str | None, stored: str
) -> None:
    """The planning replica's fleet runs V0 (its setting); the other replica was left on the default."""
    planning, other = make_client(default_engine="vllm-v0"), make_client()
    body = batch_body(schedule_id="step-engine") | ({} if named is None else {"engine": named})
    assert planning.post("/schedule", json=body).status_code == 200
    assert redis_client.hget(keys.schedule_keys("step-engine").meta, keys.ENGINE) == stored
    assert _learner(other).planned({"step-engine"}).engines == {"step-engine": stored}


@pytest.mark.parametrize("default_engine", ["vllm-v0", "vllm-v1"])
def test_a_schedule_an_older_release_published_reads_as_the_readers_default_engine(
    make_client: AppFactory, redis_client: redis.Redis, default_engine: str
) -> None:
    """An older release stored no engine: its steps ran on the fleet's engines, which the reading
    replica's ``ROLLOUT_DEFAULT_ENGINE`` names."""
    client = make_client(default_engine=default_engine)
    assert client.post("/schedule", json=batch_body(schedule_id="old-step")).status_code == 200
    redis_client.hdel(keys.schedule_keys("old-step").meta, keys.ENGINE)  # as an older release left it
    assert _learner(client).planned({"old-step", "expired-step"}).engines == {
        "expired-step": default_engine,
        "old-step": default_engine,
    }


def test_an_engine_this_release_does_not_know_is_read_as_the_default_and_logged(
    client: TestClient, redis_client: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    """A newer release may name an engine this one has no rules for; its reports are stored already,
    so their request must not fail on it."""
    assert client.post("/schedule", json=batch_body(schedule_id="new-step")).status_code == 200
    redis_client.hset(keys.schedule_keys("new-step").meta, keys.ENGINE, "sglang-v9")
    with caplog.at_level(logging.WARNING, logger="service.speeds"):
        assert _learner(client).planned({"new-step"}).engines == {"new-step": SERVICE_ENGINE}
    assert (
        "schedule new-step: engine 'sglang-v9' unknown here; its reports are priced as vllm-v1" in caplog.text
    )
