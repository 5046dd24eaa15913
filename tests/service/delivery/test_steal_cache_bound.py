"""A thief's cache holds an item that needs exactly its capacity: the steal takes it, and passes over
one token more, as the simulator's ``can_hold`` (``need <= cap``) and a claim do: the thief's list of
what its cache holds (``lua/index.lua``) keeps it (mutation testing, helper mutants63: no test put an
item's need at a cache's capacity)."""

from __future__ import annotations

import dataclasses

import redis

from service.delivery import Delivery, DeliveryItem, PublishedSchedule
from tests.service.delivery.audit import assert_sound
from tests.service.delivery.conftest import item

CAP = 3_000  # the thief's KV tokens


def _needing(key: str, need: int) -> DeliveryItem:
    it = item(key)
    return dataclasses.replace(it, max_new_tokens=need - it.prompt_tokens)


def test_a_steal_takes_an_item_that_needs_the_thief_s_whole_cache_and_passes_one_token_more(
    delivery: Delivery, redis_client: redis.Redis
) -> None:
    victim = (_needing("a#0", 2_000), _needing("b#0", CAP), _needing("c#0", CAP + 1), _needing("d#0", CAP))
    caps = {"thief": CAP, "owner": 100_000, "tiny": 2_500}  # tiny holds neither: their needs are kept
    queues = {"thief": (), "owner": victim, "tiny": ()}
    delivery.publish(PublishedSchedule("s", queues, kv_capacity_tokens=caps))
    assert [le.key for le in delivery.steal("s", "thief", 2)] == ["d#0", "b#0"]
    assert [le.key for le in delivery.claim("s", "owner", 9)] == ["a#0", "c#0"]
    assert_sound(redis_client, "s")
