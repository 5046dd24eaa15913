"""A ``POST /schedule`` whose step's planning entry Redis failed to write is refused 503 once its body is
valid, nothing published (``service.pipeline.step_part.arrive``): it had gone on with a warning and,
until its publish, been in no index an asked-for retrain reads, so a retrain asked meanwhile fitted
its step without it. On the real embedded valkey; the failure is Redis's own (its writes paused
past the client's timeout and retries) or, for the errors a pause cannot give, raised by the one
write."""

from __future__ import annotations

from typing import Any

import pytest
import redis
from fastapi.testclient import TestClient
from redis.exceptions import OutOfMemoryError, SlotNotCoveredError

from service.delivery import Delivery
from service.delivery import keys as keyspace
from tests.service.api_helpers import batch_body
from tests.service.learning.step_two import prompts_from

PLANNING = keyspace.step_planning(2)
TIMEOUT_S = 0.2  # the service's command timeout: three tries and their backoff are under a second
PAUSED_MS = 5_000  # longer than those tries: the write fails, whatever the host's load


def _second_part(**extra: Any) -> dict[str, Any]:
    """Step 2's second part (4 prompts x 4, numbered after a first part's 8)."""
    return batch_body(prompts=4, step=2, **extra) | {"batch": prompts_from(8, 4)}


def _paused_for_the_entry(monkeypatch: pytest.MonkeyPatch, redis_client: redis.Redis) -> list[str]:
    """Pause Redis's writes just before the entry's write and let them go as soon as it has failed:
    the write meets Redis's own timeout; what it raised, by name, is returned (one per write)."""
    original, raised = Delivery.enter_planning, []

    def paused(delivery: Delivery, *args: Any) -> None:
        redis_client.client_pause(PAUSED_MS, all=False)
        try:
            original(delivery, *args)
        except Exception as error:
            raised.append(type(error).__name__)
            raise
        finally:
            redis_client.client_unpause()

    monkeypatch.setattr(Delivery, "enter_planning", paused)
    return raised


def _nothing_of(redis_client: redis.Redis, schedule_id: str | None) -> None:
    """Redis holds nothing of the refused request: no planning entry, no part of step 2, no mark."""
    assert not redis_client.exists(PLANNING)
    assert not redis_client.exists(keyspace.step_schedules(2))
    assert redis_client.zcard(keyspace.active_index()) == 0
    if schedule_id is not None:
        assert not redis_client.exists(keyspace.schedule_keys(schedule_id).planning)


@pytest.mark.parametrize("chosen", [{"schedule_id": "step-2b"}, {}], ids=["chosen-id", "drawn-id"])
def test_an_entry_whose_write_redis_timed_out_is_refused_503_and_publishes_nothing(
    make_client: Any, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch, chosen: dict[str, str]
) -> None:
    """Writes paused as the entry is written: the request had published (200) a part no retrain
    could see until then; now it is the 503 a Redis failing the mark gives, with ``Retry-After``,
    and the same body sent again once Redis writes is published."""
    client: TestClient = make_client(redis_timeout_s=TIMEOUT_S)
    raised = _paused_for_the_entry(monkeypatch, redis_client)
    refused = client.post("/schedule", json=_second_part(**chosen))
    assert raised == ["TimeoutError"]
    assert refused.status_code == 503, refused.text
    assert refused.headers.get("Retry-After")
    _nothing_of(redis_client, chosen.get("schedule_id"))
    monkeypatch.undo()
    assert client.post("/schedule", json=_second_part(**chosen)).status_code == 200
    assert redis_client.scard(keyspace.step_schedules(2)) == 1


@pytest.mark.parametrize(
    "error",
    [
        OutOfMemoryError("command not allowed when used memory > maxmemory"),
        SlotNotCoveredError('Slot "5" is not covered'),
    ],
    ids=["out-of-memory", "slot-not-covered"],
)
def test_an_entry_redis_refused_is_refused_503_and_publishes_nothing(
    client: TestClient, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch, error: Exception
) -> None:
    """Redis refusing the write (out of memory) or a cluster client finding its slot unserved
    mid-reshard (no ``RedisError``): the same 503, the in-flight mark taken back (a DELETE is a 404)."""

    def refused(*_: object) -> None:
        raise error

    monkeypatch.setattr(Delivery, "enter_planning", refused)
    answer = client.post("/schedule", json=_second_part(schedule_id="step-2b"))
    assert answer.status_code == 503, answer.text
    _nothing_of(redis_client, "step-2b")
    assert client.delete("/schedule/step-2b").status_code == 404


def test_an_invalid_body_whose_entry_failed_hears_its_422(
    client: TestClient, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The entry's failure is raised only once the body passed every rule, as the mark's is."""

    def lost(*_: object) -> None:
        raise redis.ConnectionError("answer lost")

    monkeypatch.setattr(Delivery, "enter_planning", lost)
    answer = client.post("/schedule", json=_second_part(schedule_id="step-2b", policy="no-such-policy"))
    assert answer.status_code == 422, answer.text
    _nothing_of(redis_client, "step-2b")
