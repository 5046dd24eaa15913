"""The caller's deadline counts from the request's arrival, before its body is read
(``service/arrival.py``): a body whose upload takes the deadline is refused 504 with nothing left in
Redis, and one whose upload takes part of it leaves its plan only the rest. The app runs on a clock of
the test's that moves only as the body's chunks are fed to it (``slow_upload``), so no assertion
depends on how fast the host is: counted from the handler's start, after the read, every request here
had its whole deadline left (60 s of the wall clock, for a plan of milliseconds)."""

from __future__ import annotations

import anyio
import pytest
import redis
from starlette.types import Message, Receive, Scope, Send

from service.arrival import SCOPE_KEY, Arrival, ArrivalStamp
from service.pipeline import deadline
from tests.service.api.slow_upload import (
    STEP,
    Clock,
    SlowClient,
    refused_late_leaving_nothing,
)
from tests.service.api_helpers import batch_body

HEADER = deadline.HEADER
DEADLINE_MS = 60_000  # of the app's clock; on the wall clock, far more than any plan here takes


def test_a_deadline_that_passes_while_the_body_arrives_is_a_504_that_leaves_nothing(
    slow_client: SlowClient,
    redis_client: redis.Redis,
    monkeypatch: pytest.MonkeyPatch,
    late_id: tuple[str | None, int],
) -> None:
    """The upload takes 80 s of the 60 s the caller waits: refused, its mark (under a chosen id) and its
    step's planning entry taken back, nothing published; the step publishes when sent again."""
    client, app = slow_client(20.0)
    schedule_id, marked = late_id
    body = batch_body(schedule_id=schedule_id, step=STEP)
    refused_late_leaving_nothing(client, app, redis_client, monkeypatch, body, str(DEADLINE_MS), marked)
    sent_again = client.post("/schedule", json=body)
    assert (sent_again.status_code, sent_again.json()["replayed"]) == (200, False)


def test_an_upload_that_takes_part_of_the_deadline_leaves_the_plan_only_the_rest(
    slow_client: SlowClient,
) -> None:
    """The upload takes 20 s of the 60 s: the plan's 60 s budget is capped to what is left after it,
    less the publish's reserve; counted from the handler, it had kept (nearly) all 60."""
    client, _ = slow_client(5.0)
    body = batch_body(time_budget_ms=60_000, policy="round_robin", step=STEP)
    planned = client.post("/schedule", json=body, headers={HEADER: str(DEADLINE_MS)})
    assert planned.status_code == 200
    assert 0 < planned.json()["time_budget_ms"] <= DEADLINE_MS - 20_000 - deadline.MIN_RESERVE_S * 1000


def test_the_stamp_is_taken_as_the_request_comes_in_and_an_outer_one_is_kept() -> None:
    """Stamped before the app reads a byte of the body; a stamp already there (an outer app saw the
    request first) is the arrival, not replaced by a later one."""
    clock, stamps = Clock(), []

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        stamps.append(scope[SCOPE_KEY])

    async def call(scope: Scope) -> None:
        async def nothing() -> Message:
            return {"type": "http.disconnect"}

        async def ignore(message: Message) -> None:
            pass

        await ArrivalStamp(app, clock)(scope, nothing, ignore)

    anyio.run(call, {"type": "http"})
    clock.now += 5.0
    anyio.run(call, {"type": "http", SCOPE_KEY: Arrival(1.0)})
    assert stamps == [Arrival(1_000.0, clock), Arrival(1.0)]
