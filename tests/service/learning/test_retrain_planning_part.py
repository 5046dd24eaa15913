"""An asked-for retrain sees a part of the step still planning: a ``POST /schedule`` that will publish
is among its step's planning entries (``keys.step_planning``) from its arrival (before its wait for a
planning thread) until it ends, whatever it answers, on the real embedded valkey
(``service.pipeline.step_part``)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
import redis
from fastapi.testclient import TestClient

from scheduler.errors import InvalidInputError
from service.api import schedules
from service.delivery import Delivery
from service.delivery import keys as keyspace
from service.pipeline import stages
from tests.service.api_helpers import batch_body
from tests.service.learning.step_two import (
    prompts_from,
    ran_and_reported,
    retrained_steps,
)

PLANNING = keyspace.step_planning(2)


def _second_part(**extra: Any) -> dict[str, Any]:
    """Step 2's second part (4 prompts x 4, numbered after the first part's 8)."""
    return batch_body(prompts=4, step=2, **extra) | {"batch": prompts_from(8, 4)}


def _while_planning(monkeypatch: pytest.MonkeyPatch, during: Callable[[], None]) -> None:
    """Run ``during`` as the request plans (inside ``stages._plans``), then plan."""
    original = stages._plans

    def planning(*args: Any, **kwargs: Any) -> Any:
        during()
        return original(*args, **kwargs)

    monkeypatch.setattr(stages, "_plans", planning)


def _held_while_planning(monkeypatch: pytest.MonkeyPatch) -> tuple[threading.Event, threading.Event]:
    """Hold each request as it plans: the first event is set once one is planning, and it plans
    once the second is (or after 30 s)."""
    planning, release = threading.Event(), threading.Event()

    def held() -> None:
        planning.set()
        release.wait(30)

    _while_planning(monkeypatch, held)
    return planning, release


@pytest.mark.parametrize("chosen", [{"schedule_id": "step-2b"}, {}], ids=["chosen-id", "drawn-id"])
def test_a_retrain_asked_while_a_second_part_plans_leaves_the_step_out(
    client: TestClient,
    redis_client: redis.Redis,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    chosen: dict[str, str],
) -> None:
    """Step 2's first part run and reported (over alone); its second part is planning when a retrain
    is asked, and publishes after it: the step is left out, where it was fitted on the first part."""
    ran_and_reported(client, redis_client, "step-2a")
    planning, release = _held_while_planning(monkeypatch)
    answers: list[int] = []
    body = _second_part(**chosen)
    thread = threading.Thread(target=lambda: answers.append(client.post("/schedule", json=body).status_code))
    thread.start()
    assert planning.wait(30)
    fitted = retrained_steps(client, tmp_path)
    release.set()
    thread.join(30)
    assert answers == [200]
    assert fitted == [0, 1]
    assert not redis_client.exists(PLANNING)  # taken back once published


def test_a_retrain_asked_while_a_second_part_waits_for_a_planning_thread_leaves_the_step_out(
    client: TestClient,
    redis_client: redis.Redis,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One planning thread, held by a dry run planning; step 2's second part waits in line for it,
    not validated yet, when a retrain is asked: the step is left out (its entry was written as it
    arrived), where it was fitted on the first part alone and the second published after it."""
    ran_and_reported(client, redis_client, "step-2a")
    one = anyio.CapacityLimiter(1)
    monkeypatch.setattr(schedules, "_own_threads", lambda request, pool: one)
    planning, release = _held_while_planning(monkeypatch)
    answers: list[int] = []

    def post(body: dict[str, Any]) -> threading.Thread:
        thread = threading.Thread(target=lambda: answers.append(_posted(client, body)))
        thread.start()
        return thread

    dry = post(_second_part(publish=False, schedule_id="dry"))
    assert planning.wait(30)
    waiting = post(_second_part(schedule_id="step-2b"))
    assert _eventually(lambda: one.statistics().tasks_waiting == 1)
    fitted = retrained_steps(client, tmp_path)
    release.set()
    dry.join(30)
    waiting.join(30)
    assert answers == [200, 200]
    assert fitted == [0, 1]
    assert not redis_client.exists(PLANNING)  # taken back once published


def test_a_body_refused_after_its_wait_in_line_leaves_no_planning_entry(
    client: TestClient, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Entered at arrival, before any rule but the body's schema was checked: a body refused by the
    service's rules (an unknown policy, 422) takes it back, and Redis holds nothing of it."""
    seen: list[int] = []
    original = stages.validate

    def validate(*args: Any) -> Any:
        seen.append(redis_client.zcard(PLANNING))
        return original(*args)

    monkeypatch.setattr(stages, "validate", validate)
    answer = client.post("/schedule", json=_second_part(schedule_id="step-2b", policy="no-such-policy"))
    assert answer.status_code == 422
    assert seen == [1]
    assert not redis_client.exists(PLANNING)
    assert not redis_client.exists(keyspace.step_schedules(2))


def _posted(client: TestClient, body: dict[str, Any]) -> int:
    return client.post("/schedule", json=body).status_code


def _eventually(condition: Callable[[], bool]) -> bool:
    """Whether ``condition`` holds within 30 s (polled)."""
    stop = time.monotonic() + 30
    while not condition():
        if time.monotonic() > stop:
            return False
        time.sleep(0.01)
    return True


def test_a_refused_request_takes_its_planning_entry_back(
    client: TestClient, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[int] = []

    def refused() -> None:
        seen.append(redis_client.zcard(PLANNING))
        raise InvalidInputError("batch", 0, "refused while planning")

    _while_planning(monkeypatch, refused)
    assert client.post("/schedule", json=_second_part(schedule_id="step-2b")).status_code == 422
    assert seen == [1]
    assert not redis_client.exists(PLANNING)


def test_a_request_that_lost_its_id_s_race_leaves_the_step_s_keys_as_it_found_them(
    client: TestClient, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another request publishes ``step-2b`` while this one plans it: this one answers the winner's
    plan, and its own entry goes, the step's set holding the winner's id once."""
    body = _second_part(schedule_id="step-2b")
    won: list[int] = []

    def another_publishes_first() -> None:
        if not won:
            won.append(1)
            assert client.post("/schedule", json=body).status_code == 200
            assert redis_client.zcard(PLANNING) == 1  # the winner's taken back, the loser's left

    _while_planning(monkeypatch, another_publishes_first)
    assert client.post("/schedule", json=body).status_code == 200
    assert not redis_client.exists(PLANNING)
    assert redis_client.smembers(keyspace.step_schedules(2)) == {"step-2b"}


def test_a_dry_run_writes_no_planning_entry(
    client: TestClient, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[int] = []
    _while_planning(monkeypatch, lambda: seen.append(redis_client.zcard(PLANNING)))
    assert client.post("/schedule", json=_second_part(publish=False)).status_code == 200
    assert seen == [0]


def test_an_entry_past_its_deadline_is_no_part(
    client: TestClient, redis_client: redis.Redis, tmp_path: Path
) -> None:
    """A replica that died planning a part leaves its entry: once past its deadline, the step is over
    again (before it, the entry keeps it out, as a live request's)."""
    ran_and_reported(client, redis_client, "step-2a")
    Delivery(redis_client).enter_planning(2, "step-2b dead", 1)
    time.sleep(0.05)
    assert retrained_steps(client, tmp_path) == [0, 1, 2]


def test_an_entry_write_failing_outside_redis_takes_the_in_flight_mark_back(
    client: TestClient, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An error writing the entry, just after the mark, that is no Redis failure (a bug) fails the
    request; the mark goes with it, so a DELETE of the id is a 404, not a 202 withdrawing a step no
    request holds any more."""

    def broken(*_: object) -> None:
        raise RuntimeError("a bug between the mark and the entry")

    monkeypatch.setattr(Delivery, "enter_planning", broken)
    assert client.post("/schedule", json=_second_part(schedule_id="step-2b")).status_code == 500
    assert not redis_client.exists(keyspace.schedule_keys("step-2b").planning)
    assert client.delete("/schedule/step-2b").status_code == 404
