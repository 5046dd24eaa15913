"""A ``POST /schedule`` handler cancelled the native way (``Task.cancel``, as uvicorn's
graceful-shutdown timeout sends) holds its planning thread's token (``Context.plan_threads``) until
the thread ends: it gave the token back at once while the thread planned on, so each such request let
one thread more start than the pool bounds. One cancelled before its thread started is never planned,
and its in-flight mark is taken back (``service/api/plan_thread.py``)."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
import redis

from service.delivery import keys
from service.pipeline import stages
from service.settings import Settings
from tests.service.api.replicas import Gate, context, first, replicas, until
from tests.service.api_helpers import batch_body, with_settings

GONE = keys.schedule_keys("gone")
STEP_0 = keys.step_planning(0)  # every request's entry among its step's planning ones, from its arrival


def test_a_handler_cancelled_mid_plan_holds_its_thread_s_token_until_the_thread_ends(
    live_settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    predicting = Gate()
    monkeypatch.setattr(stages, "predict", predicting.before(stages.predict))

    async def run() -> tuple[float, float]:
        async with replicas(live_settings) as [http]:
            ctx = context(http)
            finished = threading.Event()  # the step's last act on its thread: counting it for a retrain
            monkeypatch.setattr(ctx.retrainer, "after_step", first(finished.set, ctx.retrainer.after_step))
            given_up = asyncio.create_task(http.post("/schedule", json=batch_body(schedule_id="gone")))
            await until(lambda: predicting.reached == 1)
            given_up.cancel()
            with pytest.raises(asyncio.CancelledError):
                await given_up
            held_while_planning = ctx.plan_threads.borrowed_tokens
            predicting.open()
            await until(finished.is_set)
            await until(lambda: ctx.plan_threads.borrowed_tokens == 0)  # given back as the thread ended
            return held_while_planning, ctx.plan_threads.borrowed_tokens

    assert asyncio.run(run()) == (1, 0)


def test_a_handler_cancelled_while_waiting_for_a_thread_is_never_planned_and_takes_its_mark_back(
    live_settings: Settings, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every planning thread is taken (requests held at validation); the step, marked on arrival,
    waits for one and its handler is cancelled. Once a thread is free it only takes the mark back:
    the step is not validated, planned or published, and its id is unknown again (a DELETE: 404)."""
    settings = with_settings(live_settings, max_concurrent_plans=1, plan_queue_timeout_s=60)
    validating = Gate()
    monkeypatch.setattr(stages, "validate", validating.before(stages.validate))

    async def run() -> tuple[int, int]:
        async with replicas(settings) as [http]:
            threads = context(http).plan_threads
            held = [
                asyncio.create_task(http.post("/schedule", json=batch_body(policy="no-such-policy")))
                for _ in range(int(threads.total_tokens))
            ]
            await until(lambda: validating.reached == threads.total_tokens)
            given_up = asyncio.create_task(http.post("/schedule", json=batch_body(schedule_id="gone")))
            await until(lambda: threads.statistics().tasks_waiting == 1)
            assert redis_client.exists(GONE.planning) == 1  # in flight while it waits
            assert redis_client.zcard(STEP_0) == len(held) + 1  # a part of step 0 while it waits
            given_up.cancel()
            with pytest.raises(asyncio.CancelledError):
                await given_up
            validating.open()
            assert {(await h).status_code for h in held} == {422}
            await until(lambda: redis_client.exists(GONE.planning, STEP_0) == 0)
            await until(lambda: threads.borrowed_tokens == 0)
            deleted = await http.delete("/schedule/gone")
            return validating.reached - int(threads.total_tokens), deleted.status_code

    validated, deleted = asyncio.run(run())
    assert (validated, deleted) == (0, 404)
    assert redis_client.exists(GONE.meta, GONE.withdrawn) == 0


def test_a_request_given_up_still_waiting_for_a_thread_when_the_loop_ends_takes_its_mark_back(
    live_settings: Settings, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The service's shutdown: uvicorn cancels the handlers still running at its graceful timeout
    (10 s), then returns, and ``asyncio.run`` cancels every task left, the planning-thread calls
    still waiting for a token among them. Such a call never reaches a thread, so the thread that was
    to take its mark back never runs: the mark was left to lapse (plan queue timeout + budget + 60 s),
    a restarted trainer's DELETE withdrew the step (202) its request had never planned. Here the
    loop ends while every planning thread is still held; the threads end after it."""
    settings = with_settings(live_settings, max_concurrent_plans=1, plan_queue_timeout_s=60)
    validating = Gate()
    monkeypatch.setattr(stages, "validate", validating.before(stages.validate))

    async def run() -> None:
        async with replicas(settings) as [http]:
            threads = context(http).plan_threads
            held = [  # left running as the loop ends
                asyncio.create_task(http.post("/schedule", json=batch_body(policy="no-such-policy")))
                for _ in range(int(threads.total_tokens))
            ]
            await until(lambda: validating.reached == len(held))
            given_up = asyncio.create_task(http.post("/schedule", json=batch_body(schedule_id="gone")))
            await until(lambda: threads.statistics().tasks_waiting == 1)
            assert redis_client.exists(GONE.planning) == 1
            assert redis_client.zcard(STEP_0) == len(held) + 1
            given_up.cancel()  # the graceful-shutdown timeout
            with pytest.raises(asyncio.CancelledError):
                await given_up
        # leaving ``run``: asyncio.run cancels what is left, the call waiting for a token included

    asyncio.run(run())
    validating.open()  # the held requests' threads end now, after the loop
    deadline = time.monotonic() + 60  # a bound against never: met at once when right
    while redis_client.exists(GONE.planning, STEP_0) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert redis_client.exists(GONE.planning, GONE.meta, GONE.withdrawn, STEP_0) == 0
