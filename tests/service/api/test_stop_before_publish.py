"""A stop that lands after the planner's last check and before the publish publishes nothing.

The planner gives up at its checks once the replica stops (``service/api/stopping.py``), but its last
check is the end of its last stage: a stop that came after it, while the answer was built
(``respond``), went on to publish. Under an id the service drew, that step reached the fleet for
nobody (the handler was cancelled, and no retry can find a drawn id). The publish stage checks the
stop before the publish's call goes out, and the request is answered as the stop's other give-ups
(503, its in-flight mark and its step's planning entry taken back), with nothing published. Real Redis.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
import redis

from service.delivery import keys as keyspace
from service.pipeline import answer
from tests.service.api_helpers import AppFactory, batch_body

WAIT_S = 30.0  # a bound against never for the stop's daemon's take-back, not a speed


def _stop_while_answer_is_built(stop: threading.Event, monkeypatch: pytest.MonkeyPatch) -> None:
    """Set the replica's stop once the plan is made, as the answer is built before the publish."""
    real = answer.respond

    def stopped_after_the_plan(*args: Any, **kwargs: Any) -> Any:
        stop.set()  # what ``Startup.halt`` sets
        return real(*args, **kwargs)

    monkeypatch.setattr("service.pipeline.stages.respond", stopped_after_the_plan)


@pytest.mark.parametrize("chosen", ["stop-before-publish", None])
def test_a_stop_after_the_plan_publishes_nothing_and_is_answered_503(
    chosen: str | None,
    make_client: AppFactory,
    redis_client: redis.Redis,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    client = make_client()
    stop: threading.Event = client.app.state.stopping  # type: ignore[attr-defined]
    _stop_while_answer_is_built(stop, monkeypatch)
    named: dict[str, Any] = {} if chosen is None else {"schedule_id": chosen}
    answer = client.post("/schedule", json=batch_body(step=7, policy="lpt", **named))
    assert (answer.status_code, stop.is_set()) == (503, True), answer.text
    assert "the replica is stopping" in answer.json()["detail"]
    assert redis_client.scard(keyspace.step_schedules(7)) == 0  # no step reached the fleet
    # the mark goes back before the entry, on the stop's daemon: once the entry is gone, so is the mark
    _until_taken_back(redis_client, keyspace.step_planning(7))
    assert not redis_client.keys(keyspace.schedule_keys("*").pattern)  # nothing of any schedule written


def _until_taken_back(client: redis.Redis, planning: str) -> None:
    """The request's planning entry (and in-flight mark) are taken back, on the stop's daemon."""
    deadline = time.monotonic() + WAIT_S
    while client.zcard(planning) > 0:
        assert time.monotonic() < deadline, "the planning entry was never taken back"
        time.sleep(0.05)
