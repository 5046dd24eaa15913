"""A fleet whose pods are rescheduled under new names leaves the service's per-worker state bounded.

An RL run lasts thousands of steps, and a worker id is often its pod's name: each reschedule brings
a new one. The worker profiles (``rs:workers``) and learned speeds (``rs:speed``) hold one entry per
worker, so they must forget the workers no step has named for the retention, or they grow with every
id a run ever used (a soak of 1,200 steps with one pod rescheduled a step: +1 entry each step,
docs/experiments.md, "Long-run memory").
"""

from __future__ import annotations

from typing import Any

import redis
from fastapi.testclient import TestClient

from service.delivery import keys
from tests.service.api_helpers import AppFactory, actual_report, batch_body

RETENTION_S = 600
STEP_S = 60  # a step a minute: the retention spans ten steps
STEPS = 40  # one new worker id a step: 40 ids over the run, 4 retentions (a store that forgot
# nothing holds 41 ids, past the 12 bound; 300 steps, 30 retentions, proved no more in 5x the time)


class Clock:
    """The service's wall clock, moved by the test (seconds)."""

    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


def _on_clock(make_client: AppFactory) -> tuple[TestClient, Clock]:
    """A service keeping workers for ``RETENTION_S``, its speed learner on a clock the test moves."""
    client = make_client(retention_s=RETENTION_S)
    clock = Clock()
    client.app.state.context.speeds.clock = clock  # type: ignore[attr-defined]
    return client, clock


def _step(client: TestClient, step: int, workers: list[str]) -> None:
    """Publish a step on ``workers`` and report an actual for each, teaching each a speed."""
    body: dict[str, Any] = batch_body(prompts=2, n=1, workers=len(workers), step=step)
    for spec, worker_id in zip(body["inventory"]["workers"], workers, strict=True):
        spec.update(worker_id=worker_id, device="H100")
    assert client.post("/schedule", json=body).status_code == 200
    reports = [{**actual_report(0, 0, i, worker), "step": step} for i, worker in enumerate(workers)]
    assert client.post("/actuals", json={"actuals": reports}).status_code == 200


def test_worker_ids_rescheduled_a_step_over_retentions_leave_only_the_retentions_workers(
    make_client: AppFactory, redis_client: redis.Redis
) -> None:
    client, clock = _on_clock(make_client)
    for step in range(STEPS):
        clock.now += STEP_S
        _step(client, step, ["stays", f"pod-{step}"])
    named_within = RETENTION_S // STEP_S + 1  # the churned ids the retention still covers
    assert redis_client.hlen(keys.worker_profiles()) <= named_within + 1
    assert redis_client.hlen(keys.learned_speeds()) <= named_within + 1
    assert redis_client.zcard(keys.worker_seen()) <= named_within + 1
    assert redis_client.hexists(keys.learned_speeds(), "stays")  # a worker still planned keeps its speed
    assert redis_client.hexists(keys.worker_profiles(), f"pod-{STEPS - 1}")


def test_a_worker_back_within_the_retention_keeps_its_learned_speed(
    make_client: AppFactory, redis_client: redis.Redis
) -> None:
    client, clock = _on_clock(make_client)
    _step(client, 0, ["away", "stays"])
    learned = redis_client.hget(keys.learned_speeds(), "away")
    clock.now += RETENTION_S - 1
    _step(client, 1, ["stays"])
    assert redis_client.hget(keys.learned_speeds(), "away") == learned
    clock.now += 2  # now past the retention since "away" was last named
    _step(client, 2, ["stays"])
    assert not redis_client.hexists(keys.learned_speeds(), "away")
    assert not redis_client.hexists(keys.worker_profiles(), "away")


def test_a_worker_the_seen_set_never_held_is_forgotten_a_retention_after_the_next_publish(
    make_client: AppFactory, redis_client: redis.Redis
) -> None:
    # A release before rs:workers:seen wrote the two hashes alone; only the zset is read for what to
    # forget, so those workers stayed in the hashes for good.
    client, clock = _on_clock(make_client)
    _step(client, 0, ["legacy", "stays"])
    redis_client.zrem(keys.worker_seen(), "legacy")  # as the older release left it: no time seen
    clock.now += RETENTION_S + 1
    _step(client, 1, ["stays"])
    assert redis_client.hexists(keys.learned_speeds(), "legacy")  # seen now, so kept a retention more
    clock.now += RETENTION_S + 1
    _step(client, 2, ["stays"])
    assert not redis_client.hexists(keys.worker_profiles(), "legacy")
    assert not redis_client.hexists(keys.learned_speeds(), "legacy")
    assert redis_client.zscore(keys.worker_seen(), "legacy") is None
    assert redis_client.hexists(keys.learned_speeds(), "stays")


def test_a_fleet_renamed_at_once_is_forgotten_over_a_few_publishes_a_thousand_workers_each(
    make_client: AppFactory, redis_client: redis.Redis
) -> None:
    """Each publish forgets at most ``FORGET_BATCH`` workers, so a step's publish stays short."""
    client, _ = _on_clock(make_client)
    renamed = [f"old-{i}" for i in range(2_500)]
    redis_client.zadd(keys.worker_seen(), dict.fromkeys(renamed, 0))  # named long before the retention
    redis_client.hset(keys.worker_profiles(), mapping=dict.fromkeys(renamed, "{}"))
    left = []
    for step in range(3):
        _step(client, step, ["new"])
        left.append(redis_client.hlen(keys.worker_profiles()) - 1)
    assert left == [1_500, 500, 0]
    assert redis_client.zrange(keys.worker_seen(), 0, -1) == ["new"]
