"""Fixtures of the delivery tests: a ``Delivery`` on a flushed real server and schedule builders."""

from __future__ import annotations

import pytest
import redis

from service.delivery import Delivery, DeliveryItem, LeaseSettings, PublishedSchedule


def item(key: str, predicted: float = 100.0) -> DeliveryItem:
    """A small item whose prompt id is the key's prefix."""
    prompt, _, idx = key.partition("#")
    return DeliveryItem(
        key=key,
        prompt_id=prompt,
        sample_idx=int(idx or 0),
        prompt_tokens=32,
        max_new_tokens=4096,
        predicted_tokens=predicted,
        payload={"prompt": f"question {prompt}"},
    )


def schedule(
    schedule_id: str,
    sizes: dict[str, int],
    ttl_ms: int = 10_000,
    max_attempts: int = 3,
    predicted: float = 100.0,
) -> PublishedSchedule:
    """A schedule with ``sizes[w]`` items queued for each worker ``w``, keys ``w-i#0``."""
    queues = {w: tuple(item(f"{w}-{i}#0", predicted) for i in range(n)) for w, n in sizes.items()}
    return PublishedSchedule(
        schedule_id=schedule_id,
        queues=queues,
        lease=LeaseSettings(lease_ttl_ms=ttl_ms, max_attempts=max_attempts),
    )


@pytest.fixture
def delivery(redis_client: redis.Redis) -> Delivery:
    """The protocol on a flushed database of the session's real server."""
    return Delivery(redis_client)
