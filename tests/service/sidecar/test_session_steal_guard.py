"""The session passes the steal deadline guard what the sidecar knows: its measured decode rate and
how long the work it holds still takes (docs/sidecar.md); real Redis, server clock."""

from __future__ import annotations

import asyncio
import dataclasses

import redis

from service.delivery.protocol import Delivery
from service.delivery.records import DeliveryItem, PublishedSchedule
from service.sidecar.holdings import Holdings
from service.sidecar.session import SessionSettings, WorkerSession


def _item(key: str, predicted: float, start_ms: int | None = None, end_ms: int | None = None) -> DeliveryItem:
    item = DeliveryItem(key, key.partition("#")[0], 0, 100, 16_384, predicted)
    return dataclasses.replace(item, planned_start_ms=start_ms, deadline_ms=end_ms)


def _session(delivery: Delivery, clock: list[float], rate: bool, worker: str = "thief") -> WorkerSession:
    holdings = Holdings(16, clock=lambda: clock[0])
    if rate:
        holdings.observe(1_000, 10.0)  # 100 tokens/s per sequence
    return WorkerSession(delivery, holdings, SessionSettings(worker, reap_when_idle=False))


def test_a_sidecar_leaves_an_item_it_cannot_finish_by_its_deadline(redis_client: redis.Redis) -> None:
    delivery = Delivery(redis_client)
    victim = tuple(_item(f"v-{i}#0", 1_000.0, 0, 5_000) for i in range(4))  # due 5 s after publication
    delivery.publish(PublishedSchedule("due", {"thief": (), "victim": victim}))
    measured = _session(delivery, [0.0], rate=True)
    assert asyncio.run(measured.claim(4)) == []  # 1,000 tokens at 100 tokens/s: 10 s > 5 s
    fresh = _session(delivery, [0.0], rate=False)
    assert len(asyncio.run(fresh.claim(4))) == 2  # no completion yet, no rate: steals as before


def test_a_sidecar_whose_held_work_ends_after_the_deadline_steals_nothing(redis_client: redis.Redis) -> None:
    delivery = Delivery(redis_client)
    for sid, own_tokens, expected in (("short", 3_000.0, 2), ("long", 8_000.0, 0)):
        thief = f"thief-{sid}"
        victim = tuple(_item(f"{sid}-{i}#0", 1_000.0, 50_000, 60_000) for i in range(4))  # due at 60 s
        queues = {thief: (_item(f"{sid}-own#0", own_tokens),), f"victim-{sid}": victim}
        delivery.publish(PublishedSchedule(sid, queues))
        clock = [0.0]
        session = _session(delivery, clock, rate=True, worker=thief)
        (own,) = asyncio.run(session.claim(1))
        session.holdings.start(own)
        clock[0] = 10.0  # 10 s into its own item: 20 s (short) or 70 s (long) of it left
        stolen = asyncio.run(session.claim(4))
        assert len(stolen) == expected, sid
