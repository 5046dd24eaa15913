"""What ``publish.lua`` stores, key by key, against the layout ``keys.py`` documents.

The script only splits and writes what ``wire.publish_args`` prepared (records, pairs, per-queue
scores), so this pins the two together: every stored string is derived here from the items alone,
independently of the argument layout, for a schedule with every feature at once (own queues, a shared
FIFO under prefix affinity, pins, steal deadlines, caches that cannot hold some items, payloads shared
by a prompt's samples and empty ones, predicted lengths that are not round in binary).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import redis

from service.delivery import Delivery, DeliveryItem, LeaseSettings, PublishedSchedule
from service.delivery.keys import SHARED_QUEUE, schedule_keys
from service.delivery.wire import stored_items

T0 = 1_700_000_000_000


def _item(key: str, predicted: float, **extra: object) -> DeliveryItem:
    prompt, _, idx = key.partition("#")
    fields: dict[str, object] = {
        "key": key,
        "prompt_id": prompt,
        "sample_idx": int(idx),
        "prompt_tokens": 100 * int(idx) + 7,
        "max_new_tokens": 4096 if prompt != "big" else 60_000,
        "predicted_tokens": predicted,
        "payload": {"prompt": f'solve {prompt} \u00e9 "quoted"\n'} if prompt != "bare" else {},
    }
    fields.update(extra)
    return DeliveryItem(**fields)  # type: ignore[arg-type]


def _schedule() -> PublishedSchedule:
    own = {
        "a": (
            _item("p#0", 0.1, planned_start_ms=0, deadline_ms=1234, group_id="g1"),
            _item("p#1", 1e-7, deadline_ms=99, group_id="g1"),  # no start: the deadline is both
            _item("big#0", 123456.789, pinned=True, group_id="g2"),
        ),
        "b": (_item("bare#0", 2.5, group_id="g3"), _item("bare#1", 0.0, group_id="g3")),
        "idle": (),
    }
    shared = (
        _item("s#0", 10.0, group_id="h1"),
        _item("s#1", 20.0, group_id="h2"),
        _item("s#2", 30.0, group_id="h1"),
        _item("t#0", 40.0, group_id="h2"),
    )
    return PublishedSchedule(
        schedule_id="lay",
        queues=own,
        shared=shared,
        lease=LeaseSettings(lease_ttl_ms=5000, max_attempts=2, retention_s=600),
        seconds_per_token={"a": 0.013, "b": 0.07},
        prefix_affinity=True,
        kv_capacity_tokens={"a": 50_000, "b": 70_000},
        predicted_makespan_s=9.5,
        planned_finish_s={"a": 9.5},
    )


def test_publish_stores_each_record_as_the_layout_says(redis_client: redis.Redis) -> None:
    delivery = Delivery(redis_client)
    schedule = _schedule()
    delivery.publish(schedule, now_ms=T0)
    keys = schedule_keys("lay")
    queues = [*schedule.queues.items(), (SHARED_QUEUE, schedule.shared)]
    items = [item for _, queue in queues for item in queue]

    records = {
        item.key: f"q|0|0|0|{float(item.predicted_tokens)!r}|{name}|{item.reservation_tokens}"
        for name, queue in queues
        for item in queue
    }
    assert redis_client.hgetall(keys.st) == records
    stored, payloads = stored_items(items)
    assert redis_client.hgetall(keys.items) == dict(zip([i.key for i in items], stored, strict=True))
    assert redis_client.hgetall(keys.prompts) == {
        str(ref): line for ref, line in enumerate(payloads.split("\n"), 1)
    }

    assert redis_client.lrange(keys.queue("a"), 0, -1) == ["p#0", "p#1", "big#0"]
    assert redis_client.lrange(keys.queue("b"), 0, -1) == ["bare#0", "bare#1"]
    assert redis_client.exists(keys.queue("idle")) == 0
    # under affinity the FIFO runs group by group, groups in the order of their first item
    assert redis_client.lrange(keys.queue(SHARED_QUEUE), 0, -1) == ["s#0", "s#2", "s#1", "t#0"]

    paces = {w: float(repr(p)) for w, p in schedule.paces().items()}
    work = {
        w: sum((float(i.predicted_tokens) for i in schedule.queues[w]), 0.0) * paces[w] for w in ("a", "b")
    }
    scores: Any = redis_client.zrange(keys.work, 0, -1, withscores=True)
    assert dict(scores) == work

    assert redis_client.hgetall(f"{keys.base}:pin") == {"big#0": "1"}
    assert redis_client.hgetall(f"{keys.base}:grp") == {i.key: i.group for i in items}
    assert redis_client.hgetall(f"{keys.base}:gsize") == {
        g: str(n) for g, n in Counter(i.group for i in items).items()
    }
    assert redis_client.hgetall(keys.due) == {"p#0": f"{T0}|{T0 + 1234}", "p#1": f"{T0 + 99}|{T0 + 99}"}
    assert redis_client.hgetall(keys.cap) == {"a": "50000", "b": "70000"}
    assert redis_client.hgetall(keys.need) == {"big#0": str(60_000 + 7)}  # 60,007 > a's 50,000

    counts = redis_client.hgetall(keys.counts)
    assert (counts["q"], counts["q:a"], counts["q:*"]) == (str(len(items)), "3", "4")
    assert counts["q:idle"] == counts["d:idle"] == "0"  # every announced worker is counted
    meta = redis_client.hgetall(keys.meta)
    assert (meta["total"], meta["published_ms"], meta["affinity"]) == (str(len(items)), str(T0), "1")
    assert (meta["makespan_s"], meta["planned_finish"]) == ("9.5", '{"a": 9.5}')
    for key in redis_client.keys(keys.pattern):
        assert redis_client.pttl(key) > 0, key  # every key of the schedule expires with it


def test_a_schedule_without_deadlines_pins_or_small_caches_stores_none_of_their_keys(
    redis_client: redis.Redis,
) -> None:
    delivery = Delivery(redis_client)
    delivery.publish(PublishedSchedule("plain", {"a": (_item("p#0", 3.0), _item("p#1", 4.0))}), now_ms=T0)
    keys = schedule_keys("plain")
    rules = [f"{keys.base}:{name}" for name in ("pin", "grp", "gsize")]  # no ScheduleKeys names
    for absent in (*rules, keys.due, keys.cap, keys.need):
        assert redis_client.exists(absent) == 0, absent
    assert redis_client.lrange(keys.queue("a"), 0, -1) == ["p#0", "p#1"]
