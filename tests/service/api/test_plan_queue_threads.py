"""Steps waiting for a plan slot hold no thread the other routes need: a burst of ``POST /schedule``
past the plan slots must leave readiness, actuals and progress answering at once."""

from __future__ import annotations

import threading
import time
from typing import cast

import httpx
from fastapi import FastAPI

from service.settings import Settings
from tests.service.api_helpers import AppFactory, LiveServer, actual_history, batch_body, with_settings

BURST = 48  # past the 40 threads of the shared pool that the sync routes run on


def test_readiness_and_actuals_answer_at_once_while_a_burst_of_steps_waits_for_a_plan_slot(
    live_settings: Settings,
) -> None:
    settings = with_settings(live_settings, max_concurrent_plans=1, plan_queue_timeout_s=60)
    answers: list[int] = []

    def post_step() -> None:  # each on a connection of its own: none is idle while the burst waits
        answers.append(trainers.post("/schedule", json=batch_body(prompts=1, n=1)).status_code)

    # One client for the burst's trainers, not one each: a client builds a TLS context (~34 ms of CPU)
    with LiveServer(settings) as live, httpx.Client(base_url=live.url, timeout=120) as trainers:
        slots = cast(FastAPI, live.server.config.app).state.context.plan_slots
        posters = [threading.Thread(target=post_step) for _ in range(BURST)]
        with slots.hold():  # a long plan holds the only slot: every step of the burst waits in line
            for poster in posters:
                poster.start()
            time.sleep(2.0)  # the burst reaches the server and waits for the slot
            with httpx.Client(base_url=live.url, timeout=5) as probe:
                ready = probe.get("/readyz")
                stored = probe.post("/actuals", json={"actuals": actual_history(steps=1)})
        for poster in posters:
            poster.join(120)
    assert (ready.status_code, stored.status_code) == (200, 200)
    assert answers == [200] * BURST  # and the burst was planned once the slot came free


def test_a_replica_set_for_more_plans_than_the_waiting_line_has_a_thread_for_each(
    make_client: AppFactory,
) -> None:
    client = make_client(max_concurrent_plans=64)
    threads = client.app.state.context.plan_threads  # type: ignore[attr-defined]
    assert threads.total_tokens > 64
