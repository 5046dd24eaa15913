"""A steal index out of step with its queue (kept by an older release's script: a sidecar not yet
upgraded pops the lists by its own rule) never makes a steal lease an item that is not queued on the
victim: such an entry is passed over, with or without prefix affinity."""

from __future__ import annotations

import dataclasses

import pytest
import redis

from service.delivery import Delivery, DeliveryItem, PublishedSchedule
from service.delivery.keys import schedule_keys
from tests.service.delivery.conftest import item

SMALL = 3_000


def _short(key: str) -> DeliveryItem:
    return dataclasses.replace(item(key), max_new_tokens=2_000)  # a SMALL cache holds it


@pytest.mark.parametrize("affinity", [False, True])
def test_a_steal_never_leases_an_item_its_index_names_but_its_queue_no_longer_holds(
    delivery: Delivery, redis_client: redis.Redis, affinity: bool
) -> None:
    victim = (_short("a#0"), _short("b#0"), item("x#0"))  # x#0: too big for SMALL, so there is a list
    caps = {"small": SMALL, "big": 100_000}
    schedule = PublishedSchedule(
        "s", {"small": (), "big": victim}, prefix_affinity=affinity, kv_capacity_tokens=caps
    )
    delivery.publish(schedule)
    (running,) = delivery.claim("s", "big", 1)  # a#0 leaves the queue and its list
    redis_client.rpush(f"{schedule_keys('s').base}:h:{SMALL}:big", running.key)  # an out-of-step entry
    stolen = [le.key for le in delivery.steal("s", "small", 1)]
    assert stolen == ["b#0"]
    assert delivery.progress("s").running == 2  # a#0 still big's, b#0 small's: none leased twice
