"""A ``POST /schedule`` still waiting for a planning thread when its caller's deadline passes is
refused there, 504 ``deadline-exceeded``, its in-flight mark taken back before the answer
(``service/api/plan_thread.py``): its deadline was checked only once a thread took it up, so past
``ROLLOUT_MAX_CONCURRENT_PLANS`` + 16 requests at once its 504 came when a thread freed, long after
the caller had gone. Every planning thread is held at a gate (requests held at validation), never by a
sleep; the deadline passes on the wall clock while the gate is shut, whatever the host's speed."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
import redis

from service.delivery import keys
from service.pipeline import deadline, stages
from service.settings import Settings
from tests.service.api.badinput import redis_snapshot
from tests.service.api.replicas import Gate, context, replicas, until
from tests.service.api_helpers import batch_body, with_settings

LATE = keys.schedule_keys("late")


def _in_line_for_a_thread_at_its_deadline(
    live_settings: Settings, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch, body: dict[str, Any]
) -> tuple[httpx.Response, bool, set[int]]:
    """``body`` sent with a 300 ms deadline while every planning thread is held at validation; its
    answer (given while the threads are still held), whether its mark was there then, and what the
    held requests were answered once let go."""
    settings = with_settings(live_settings, max_concurrent_plans=1, plan_queue_timeout_s=60)
    validating = Gate()
    monkeypatch.setattr(stages, "validate", validating.before(stages.validate))

    async def run() -> tuple[httpx.Response, bool, set[int]]:
        async with replicas(settings) as [http]:
            threads = context(http).plan_threads
            held = [
                asyncio.create_task(http.post("/schedule", json=batch_body(policy="no-such-policy")))
                for _ in range(int(threads.total_tokens))
            ]
            await until(lambda: validating.reached == threads.total_tokens)  # every thread is taken
            step = asyncio.create_task(http.post("/schedule", json=body, headers={deadline.HEADER: "300"}))
            await until(step.done)  # answered while every thread is still held
            marked = redis_client.exists(LATE.planning) == 1
            validating.open()
            statuses = {(await h).status_code for h in held}
            await until(lambda: threads.borrowed_tokens == 0)  # the thread that took its call: nothing
            assert validating.reached == threads.total_tokens  # it never reached validation
            return step.result(), marked, statuses

    return asyncio.run(run())


def test_a_request_still_waiting_for_a_planning_thread_at_its_deadline_is_a_504_then_and_leaves_nothing(
    live_settings: Settings, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = redis_snapshot(redis_client)
    late, marked, held = _in_line_for_a_thread_at_its_deadline(
        live_settings, redis_client, monkeypatch, batch_body(schedule_id="late")
    )
    assert (late.status_code, late.json()["field"]) == (504, deadline.HEADER)
    assert "waited for a planning thread" in late.json()["detail"]
    assert not marked  # its mark was taken back before the answer
    assert held == {422}
    assert redis_snapshot(redis_client) == before


def _pinned_to_no_worker() -> dict[str, Any]:
    body = batch_body(schedule_id="late")
    body["batch"]["items"][0]["pinned_worker"] = "no-such-worker"
    return body


def _a_prompt_twice() -> dict[str, Any]:
    body = batch_body(schedule_id="late")
    body["batch"]["items"][1]["prompt_id"] = body["batch"]["items"][0]["prompt_id"]
    return body


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (batch_body(schedule_id="late", policy="no-such-policy"), "policy"),
        (_pinned_to_no_worker(), "batch.items[0].pinned_worker"),
        (_a_prompt_twice(), "batch.items[1].prompt_id"),
    ],
    ids=["unknown-policy", "pinned-to-no-worker", "a-prompt-twice"],
)
def test_a_bad_body_still_waiting_for_a_planning_thread_at_its_deadline_is_its_422_not_a_504(
    live_settings: Settings,
    redis_client: redis.Redis,
    monkeypatch: pytest.MonkeyPatch,
    body: dict[str, Any],
    field: str,
) -> None:
    """As on the thread, the body is refused for what is wrong with it first: a 504 would be retried
    (``SchedulerClient`` retries it like a 503) only to hear the 422 once a thread is free."""
    before = redis_snapshot(redis_client)
    late, marked, held = _in_line_for_a_thread_at_its_deadline(live_settings, redis_client, monkeypatch, body)
    assert (late.status_code, late.json()["field"]) == (422, field)
    assert not marked  # its mark was taken back before the answer
    assert held == {422}
    assert redis_snapshot(redis_client) == before
