"""``read_results`` bounded by bytes: every result that fits, the first always, in stream order."""

from __future__ import annotations

from typing import Any

import redis

from service.delivery import Delivery, Lease
from tests.service.delivery.conftest import schedule
from tests.service.finished import finished_with


def _stored_sizes(delivery: Delivery, client: redis.Redis, outputs: list[int]) -> list[int]:
    """Results of one item each with an output of ``outputs[i]`` characters; the length of each one's
    stored JSON, in stream order."""
    delivery.publish(schedule("s", {"a": len(outputs)}))
    leases: list[Lease] = []
    while len(leases) < len(outputs):
        leases += delivery.claim("s", "a", 1000)
    for lease, size in zip(leases, outputs, strict=True):
        delivery.complete(lease, finished_with(output="x" * size))
    entries: Any = client.xrange(delivery.keys("s").results)
    return [len(fields["result"]) for _, fields in entries]


def _fitting(sizes: list[int], max_bytes: int) -> int:
    """How many of ``sizes`` from the first fit ``max_bytes`` together (the first always)."""
    total = 0
    for n, size in enumerate(sizes):
        total += size
        if n and total > max_bytes:
            return n
    return len(sizes)


def test_a_byte_bound_read_takes_every_result_that_fits_across_many_chunks(
    delivery: Delivery, redis_client: redis.Redis
) -> None:
    sizes = _stored_sizes(delivery, redis_client, [100 + (i * 37) % 900 for i in range(1000)])  # uneven
    every = delivery.read_results("s", count=1000)
    page = delivery.read_results("s", count=1000, max_bytes=300_000)
    assert len(page) == _fitting(sizes, 300_000) > 64  # past the first chunk
    assert [r.stream_id for r in page] == [r.stream_id for r in every[: len(page)]]
    rest = delivery.read_results("s", page[-1].stream_id, count=1000, max_bytes=300_000)
    assert len(rest) == _fitting(sizes[len(page) :], 300_000)
    assert rest[0].stream_id == every[len(page)].stream_id


def test_count_still_bounds_a_page_of_small_results(delivery: Delivery, redis_client: redis.Redis) -> None:
    _stored_sizes(delivery, redis_client, [10] * 300)
    assert len(delivery.read_results("s", count=150, max_bytes=10**9)) == 150
    assert len(delivery.read_results("s", count=300, max_bytes=10**9)) == 300
    assert len(delivery.read_results("s", count=150)) == 150
