"""A prompt's payload is stored once per schedule, and every claim still hands over whole items."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import Any

import pytest
import redis

from service.delivery import Delivery, DeliveryItem, PublishedSchedule, ScheduleConflictError
from service.delivery import keys as keyspace
from tests.service.delivery.conftest import item

MESSAGES = {"messages": [{"role": "user", "content": "Prove that sqrt(2) is irrational.\tShow every step."}]}


def samples(prompt: str, n: int, payload: Mapping[str, Any]) -> tuple[DeliveryItem, ...]:
    """``n`` samples of one prompt, all carrying ``payload``."""
    return tuple(dataclasses.replace(item(f"{prompt}#{i}"), sample_idx=i, payload=payload) for i in range(n))


def by_key(one: DeliveryItem) -> str:
    return one.key


def test_the_samples_of_a_prompt_share_one_stored_payload_and_each_claim_returns_it(
    delivery: Delivery, redis_client: redis.Redis
) -> None:
    first, second = samples("p1", 8, MESSAGES), samples("p2", 8, {"prompt": "What is 7 * 6?\nAnswer:"})
    delivery.publish(PublishedSchedule("s", {"a": first[:4] + second[:4], "b": first[4:] + second[4:]}))
    keys = keyspace.schedule_keys("s")
    assert redis_client.hlen(keys.prompts) == 2
    assert all("irrational" not in value for value in redis_client.hvals(keys.items))
    stolen = delivery.claim("s", "a", 8) + delivery.steal("s", "a", 8)  # a claims its own, then steals
    claimed = stolen + delivery.claim("s", "b", 8)
    assert len(stolen) > 8
    assert sorted((lease.item for lease in claimed), key=by_key) == sorted(first + second, key=by_key)


def test_samples_of_one_prompt_with_different_payloads_each_keep_their_own(delivery: Delivery) -> None:
    odd = dataclasses.replace(samples("p", 2, MESSAGES)[1], payload={"prompt": "other"})
    delivery.publish(PublishedSchedule("s", {"a": (samples("p", 1, MESSAGES)[0], odd)}))
    assert [lease.item.payload for lease in delivery.claim("s", "a", 2)] == [MESSAGES, {"prompt": "other"}]


def test_items_without_a_payload_are_claimed_with_an_empty_one_and_store_none(
    delivery: Delivery, redis_client: redis.Redis
) -> None:
    bare = samples("p", 3, {})
    delivery.publish(PublishedSchedule("s", {"a": bare}))
    assert not redis_client.exists(keyspace.schedule_keys("s").prompts)
    assert [lease.item for lease in delivery.claim("s", "a", 3)] == list(bare)


def test_a_schedule_stored_with_whole_item_jsons_is_still_claimed_whole(
    delivery: Delivery, redis_client: redis.Redis
) -> None:
    """Values written before payloads were shared hold the whole JSON, with no ref in front."""
    (one,) = samples("p", 1, MESSAGES)
    delivery.publish(PublishedSchedule("s", {"a": (one,)}))
    redis_client.hset(keyspace.schedule_keys("s").items, one.key, json.dumps(one.to_json()))
    assert [lease.item for lease in delivery.claim("s", "a", 1)] == [one]


def test_the_same_id_published_with_another_payload_is_refused_and_changes_nothing(
    delivery: Delivery,
) -> None:
    delivery.publish(PublishedSchedule("s", {"a": samples("p", 2, MESSAGES)}))
    with pytest.raises(ScheduleConflictError):
        delivery.publish(PublishedSchedule("s", {"a": samples("p", 2, {"prompt": "changed"})}))
    assert [lease.item.payload for lease in delivery.claim("s", "a", 2)] == [MESSAGES, MESSAGES]
