"""A step's wait in line is counted from its arrival: the wait for a planning thread is part of it.

``POST /schedule`` runs on ``Context.plan_threads`` (a thread for each plan slot and
``PLAN_QUEUE_THREADS`` in line); past those, a step waits for a thread before it waits for a slot.
``ROLLOUT_PLAN_QUEUE_TIMEOUT_S`` is the longest wait in line before a 503 (README), and ``queue_ms``
the wait it reports (the ``queue`` stage, the first sign of too few replicas): both from arrival."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest

from service.limits import PlanSlots
from service.problems.table import UnavailableError
from service.settings import Settings
from tests.service.api.replicas import Gate, context, replicas, until
from tests.service.api_helpers import batch_body, with_settings

HELD_S = 1.0  # how long the test keeps every planning thread busy while a step waits for one


def test_a_step_that_waited_for_a_planning_thread_reports_that_wait_as_its_queue_time(
    live_settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every planning thread is held by a retry of a published step (its stored answer read from a
    slow Redis), so the next step waits for a thread, with the one plan slot free all along."""
    settings = with_settings(live_settings, max_concurrent_plans=1, plan_queue_timeout_s=60)

    async def run() -> dict[str, Any]:
        async with replicas(settings) as [http]:
            assert (await http.post("/schedule", json=batch_body(schedule_id="held"))).status_code == 200
            ctx, slow = context(http), Gate()
            monkeypatch.setattr(ctx.delivery, "stored_request", slow.before(ctx.delivery.stored_request))
            threads = int(ctx.plan_threads.total_tokens)
            retries = [
                asyncio.create_task(http.post("/schedule", json=batch_body(schedule_id="held")))
                for _ in range(threads)
            ]
            await until(lambda: slow.reached == threads)  # every planning thread is taken
            step = asyncio.create_task(http.post("/schedule", json=batch_body()))
            await until(lambda: ctx.plan_threads.statistics().tasks_waiting == 1)
            await asyncio.sleep(HELD_S)  # the step waits this long at least, for a thread
            slow.open()
            assert {(await r).status_code for r in retries} == {200}
            answer = await step
            assert answer.status_code == 200
            timings: dict[str, Any] = answer.json()["timings"]
            return timings

    timings = asyncio.run(run())
    assert timings["queue_ms"] >= HELD_S * 1000.0  # a lower bound: a loaded host only adds to it
    assert timings["total_ms"] >= timings["queue_ms"]


def test_a_step_that_arrived_longer_ago_than_the_queue_timeout_is_refused_without_waiting_again() -> None:
    """A step whose wait for a thread used up its ``ROLLOUT_PLAN_QUEUE_TIMEOUT_S`` is refused when
    it reaches the slots (503, ``Retry-After``), not given the whole timeout once more."""
    slots = PlanSlots(1, timeout_s=60.0)
    refused: list[BaseException] = []

    def late_step() -> None:
        try:
            with slots.hold(arrived=time.perf_counter() - 61.0):
                pass
        except UnavailableError as error:
            refused.append(error)

    with slots.hold():  # a plan runs
        step = threading.Thread(target=late_step, daemon=True)
        step.start()
        step.join(30.0)  # a bound against never, half the timeout: right, it returns at once
        assert not step.is_alive()
    assert len(refused) == 1
    assert "busy" in str(refused[0])


def test_a_step_that_arrived_longer_ago_than_the_queue_timeout_still_takes_a_free_slot() -> None:
    """The deadline refuses only a wait: a slot free when the late step reaches it is its to take."""
    slots = PlanSlots(1, timeout_s=0.5)
    with slots.hold(arrived=time.perf_counter() - 10.0) as waited_s:
        assert waited_s >= 0.0
