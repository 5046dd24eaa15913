"""A worker id that no publish takes is refused by every call that names one, before Redis sees it.

The scripts join worker ids into '|'-separated ``P:st`` records and into key names, and read an empty
holder as "any holder": such an id reaching them split records or released another worker's leases.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest
import redis

from scheduler.errors import InvalidInputError
from service.delivery import Delivery, Lease
from service.names import NAME_MAX_LENGTH
from tests.service.delivery.conftest import schedule
from tests.service.finished import RESULT

T0 = 1_000_000
BAD_IDS = ["a|b", "{a}", "a b", "a\n", "", "w" * (NAME_MAX_LENGTH + 1)]

Call = Callable[[Delivery, str, Lease], Any]
CALLS: dict[str, Call] = {
    "claim": lambda d, w, _: d.claim("s", w, 1, now_ms=T0),
    "steal": lambda d, w, _: d.steal("s", w, 1, now_ms=T0),
    "complete_many": lambda d, w, le: d.complete_many("s", [(le.key, le.token, RESULT)], T0, w),
    "complete_and_claim": lambda d, w, le: d.complete_and_claim("s", w, [(le.key, le.token, RESULT)], 1, T0),
    "reset": lambda d, w, _: d.reset("s", w, age_ms=0, now_ms=T0),
    "heartbeat": lambda d, w, le: d.heartbeat([replace(le, worker_id=w)], now_ms=T0),
    "complete": lambda d, w, le: d.complete(replace(le, worker_id=w), RESULT, now_ms=T0),
    "release": lambda d, w, le: d.release([replace(le, worker_id=w)], now_ms=T0),
    "died": lambda d, w, le: d.release([replace(le, worker_id=w)], now_ms=T0, died="its engine"),
    "fail": lambda d, w, le: d.fail(replace(le, worker_id=w), "no", now_ms=T0),
}


def _state(client: redis.Redis) -> dict[str, Any]:
    """Every key of the database with its value, to show that nothing was written."""
    dump: dict[Any, Any] = {}
    for key in sorted(client.keys("*")):
        kind = client.type(key)
        if kind == "hash":
            dump[key] = client.hgetall(key)
        elif kind == "list":
            dump[key] = client.lrange(key, 0, -1)
        elif kind == "zset":
            dump[key] = client.zrange(key, 0, -1, withscores=True)
        else:
            dump[key] = client.get(key) if kind == "string" else kind
    return dump


@pytest.mark.parametrize("name", CALLS)
@pytest.mark.parametrize("bad", BAD_IDS, ids=["pipe", "braces", "space", "newline", "empty", "too-long"])
def test_a_call_naming_a_worker_id_publish_refuses_is_refused_naming_it_and_changes_nothing(
    delivery: Delivery, redis_client: redis.Redis, name: str, bad: str
) -> None:
    delivery.publish(schedule("s", {"a": 2, "b": 2}, ttl_ms=60_000), now_ms=T0)
    (lease,) = delivery.claim("s", "a", 1, now_ms=T0)
    before = _state(redis_client)
    with pytest.raises(InvalidInputError) as refused:
        CALLS[name](delivery, bad, lease)
    assert (refused.value.field, refused.value.value) == ("worker_id", bad)
    assert "without braces, '|' or whitespace" in str(refused.value)
    assert _state(redis_client) == before


def test_an_empty_holder_no_longer_releases_another_workers_lease_by_its_token(delivery: Delivery) -> None:
    """The scripts read '' as "any holder": a lease rebuilt with an empty worker id released b's."""
    delivery.publish(schedule("s", {"b": 1}, ttl_ms=60_000), now_ms=T0)
    (theirs,) = delivery.claim("s", "b", 1, now_ms=T0)
    with pytest.raises(InvalidInputError):
        delivery.release([replace(theirs, worker_id="")], now_ms=T0)
    assert delivery.progress("s", now_ms=T0).running == 1


def test_the_longest_id_a_publish_takes_is_taken_by_every_call(delivery: Delivery) -> None:
    longest = "w" * NAME_MAX_LENGTH
    delivery.publish(schedule("s", {longest: 2}, ttl_ms=60_000), now_ms=T0)
    (lease,) = delivery.claim("s", longest, 1, now_ms=T0)
    assert delivery.heartbeat([lease], now_ms=T0 + 1) != []
    assert delivery.complete_many("s", [(lease.key, lease.token, RESULT)], T0 + 2, longest)
    assert delivery.steal("s", longest, 1, now_ms=T0 + 3) == []  # its own queue is not empty
