"""A ``POST /schedule`` under a chosen id is in flight from its arrival: a ``DELETE`` while it still
waits for a planning thread (past ``ROLLOUT_MAX_CONCURRENT_PLANS`` + 16 at once) or is validated
withdraws the step (202), where it was a 404 and the step was published a moment later. A request
refused at validation still leaves Redis as it was. Two replicas on one real Redis; the requests are
held by gates on their threads and a full thread pool, never by sleeps."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
import redis

from service.delivery import keys
from service.pipeline import stages
from service.settings import Settings
from tests.service.api.badinput import redis_snapshot
from tests.service.api.replicas import Gate, context, replicas, until
from tests.service.api_helpers import batch_body, with_settings

ABANDONED = keys.schedule_keys("abandoned")


def _withdrawn_and_never_published(redis_client: redis.Redis) -> bool:
    """Nothing of step ``abandoned`` reached the fleet, and its id is withdrawn (for the retention)."""
    return (
        redis_client.exists(ABANDONED.meta, ABANDONED.planning) == 0
        and redis_client.exists(ABANDONED.withdrawn) == 1
        and redis_client.zscore("rs:active", "abandoned") is None
    )


def test_a_delete_while_its_step_waits_for_a_planning_thread_withdraws_it(
    live_settings: Settings, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every planning thread of the old replica is taken (requests held at validation), so the step
    waits for one; the restarted trainer's DELETE reaches the other replica: 202 ``withdrawn``, and
    the step, once it gets a thread, is refused 409 before it plans."""
    settings = with_settings(live_settings, max_concurrent_plans=1, plan_queue_timeout_s=60)
    validating = Gate()
    monkeypatch.setattr(stages, "validate", validating.before(stages.validate))

    async def run() -> tuple[httpx.Response, httpx.Response, set[int]]:
        async with replicas(settings, 2) as [old, new]:
            threads = context(old).plan_threads
            held = [
                asyncio.create_task(old.post("/schedule", json=batch_body(policy="no-such-policy")))
                for _ in range(int(threads.total_tokens))
            ]
            await until(lambda: validating.reached == threads.total_tokens)  # every thread is taken
            step = asyncio.create_task(old.post("/schedule", json=batch_body(schedule_id="abandoned")))
            await until(lambda: threads.statistics().tasks_waiting == 1)  # it waits for a thread
            withdrawn = await new.delete("/schedule/abandoned")
            validating.open()
            return withdrawn, await step, {(await h).status_code for h in held}

    withdrawn, refused, held = asyncio.run(run())
    assert (withdrawn.status_code, withdrawn.json()["status"]) == (202, "withdrawn")
    assert (refused.status_code, refused.json()["field"]) == (409, "schedule_id")
    assert held == {422}
    assert _withdrawn_and_never_published(redis_client)


def test_a_delete_while_its_step_is_validated_withdraws_it(
    live_settings: Settings, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    validating = Gate()
    monkeypatch.setattr(stages, "validate", validating.before(stages.validate))

    async def run() -> tuple[httpx.Response, httpx.Response]:
        async with replicas(live_settings, 2) as [old, new]:
            step = asyncio.create_task(old.post("/schedule", json=batch_body(schedule_id="abandoned")))
            await until(lambda: validating.reached == 1)
            withdrawn = await new.delete("/schedule/abandoned")
            validating.open()
            return withdrawn, await step

    withdrawn, refused = asyncio.run(run())
    assert (withdrawn.status_code, withdrawn.json()["status"]) == (202, "withdrawn")
    assert (refused.status_code, refused.json()["field"]) == (409, "schedule_id")
    assert _withdrawn_and_never_published(redis_client)


@pytest.mark.parametrize(
    ("fault", "status"),
    [({"policy": "no-such-policy"}, 422), ({"n": 64}, 413)],
    ids=["unknown-policy", "too-many-trajectories"],
)
def test_a_step_refused_at_validation_leaves_redis_as_it_was_and_its_id_unknown(
    live_settings: Settings,
    redis_client: redis.Redis,
    monkeypatch: pytest.MonkeyPatch,
    fault: dict[str, Any],
    status: int,
) -> None:
    """Marked on arrival, the request takes its mark back with its refusal: a DELETE of the id
    afterwards is a 404 that writes nothing, and the id is free to publish."""
    settings = with_settings(live_settings, max_trajectories=256)
    validating = Gate()
    monkeypatch.setattr(stages, "validate", validating.before(stages.validate))

    async def run() -> tuple[httpx.Response, int, httpx.Response, bool, httpx.Response]:
        async with replicas(settings) as [http]:
            before = redis_snapshot(redis_client)
            body = batch_body(schedule_id="refused", **fault)
            step = asyncio.create_task(http.post("/schedule", json=body))
            await until(lambda: validating.reached == 1)
            marked = int(redis_client.exists(keys.schedule_keys("refused").planning))
            validating.open()
            refused = await step
            deleted = await http.delete("/schedule/refused")
            unchanged = redis_snapshot(redis_client) == before
            sent_again = await http.post("/schedule", json=batch_body(schedule_id="refused"))
            return refused, marked, deleted, unchanged, sent_again

    refused, marked, deleted, unchanged, sent_again = asyncio.run(run())
    assert (refused.status_code, marked) == (status, 1)  # in flight until refused
    assert deleted.status_code == 404
    assert unchanged
    assert (sent_again.status_code, sent_again.json()["replayed"]) == (200, False)


def test_a_retry_of_a_published_step_is_replayed_as_before_and_leaves_no_mark(
    live_settings: Settings, redis_client: redis.Redis
) -> None:
    """The retry is marked as it arrives too (nothing tells it from a new step before Redis is read);
    its replay takes the mark back, so a DELETE afterwards cancels the published step, as before."""

    async def run() -> tuple[httpx.Response, httpx.Response, int, httpx.Response]:
        async with replicas(live_settings) as [http]:
            published = await http.post("/schedule", json=batch_body(schedule_id="twice"))
            replayed = await http.post("/schedule", json=batch_body(schedule_id="twice"))
            marks = int(redis_client.exists(keys.schedule_keys("twice").planning))
            return published, replayed, marks, await http.delete("/schedule/twice")

    published, replayed, marks, cancelled = asyncio.run(run())
    assert (replayed.status_code, replayed.json()["replayed"]) == (200, True)
    assert replayed.json()["assignments"] == published.json()["assignments"]
    assert marks == 0
    answer = cancelled.json()
    assert (cancelled.status_code, answer["status"], answer["queued"]) == (200, "cancelled", 32)
