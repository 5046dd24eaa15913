"""The rule's read for unreported results (``step_over._said_nothing``) is bounded by bytes, not only
by count: results with token ids and logprobs in ``extra`` run to tens of KB each, and a page of
1,024 of them was one reply of tens of MB. On the real embedded valkey, with Redis holding a normal
client's output to 8 MB, as an operator's ``client-output-buffer-limit`` does."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from service.delivery import CompletionOutcome, Delivery, Lease, TrajectoryResult
from service.learning.step_over import LastStep, over
from tests.service.delivery.conftest import schedule

BIG = 100_000  # characters of output in each result: ~100 KB stored
RESULTS = 200  # 20 MB of results in all


@pytest.fixture
def output_limit(redis_client: redis.Redis) -> Iterator[None]:
    """A normal client's replies held to 8 MB of output (Redis closes a client past it); put back."""
    redis_client.config_set("client-output-buffer-limit", "normal 8mb 0 0")
    yield
    redis_client.config_set("client-output-buffer-limit", "normal 0 0 0")


def _run(delivery: Delivery, aborted_first: bool) -> list[Lease]:
    """Step 2's one schedule ``s`` of ``RESULTS`` trajectories, each done with a ~100 KB result; the
    oldest one aborted (it says nothing of length) where ``aborted_first``. Its leases, oldest first."""
    delivery.publish(schedule("s", {"w": RESULTS}, ttl_ms=600_000))
    delivery.enter_step(2, "s", 3600)
    leases = delivery.claim("s", "w", RESULTS)
    for n, lease in enumerate(leases):
        tokens, reason = (0, "abort") if aborted_first and n == 0 else (40, "stop")
        result = TrajectoryResult(tokens, reason, output="y" * BIG)
        assert delivery.complete(lease, result) is CompletionOutcome.ACCEPTED
    return leases


def _reported(leases: list[Lease]) -> LastStep:
    return LastStep(2, 0, {"s": frozenset(lease.key for lease in leases)}, frozenset({"s"}))


@pytest.mark.usefixtures("output_limit")
def test_an_aborted_oldest_result_behind_20_mb_of_results_is_found_in_replies_redis_allows(
    redis_client: redis.Redis,
) -> None:
    """Every result but the aborted oldest is reported: the read walks the whole stream, newest
    first, in replies of about 4 MB each (pages of 16, 32, 64, 128 were 12.8 MB by the fourth)."""
    delivery = Delivery(redis_client)
    leases = _run(delivery, aborted_first=True)
    assert over(_reported(leases[1:]), 2, delivery)


@pytest.mark.usefixtures("output_limit")
def test_a_length_giving_result_not_yet_reported_still_keeps_the_step_open(redis_client: redis.Redis) -> None:
    """The oldest result says a length and is not reported: read to it, and the step is not over."""
    delivery = Delivery(redis_client)
    leases = _run(delivery, aborted_first=False)
    assert not over(_reported(leases[1:]), 2, delivery)
    assert over(_reported(leases), 2, delivery)


def test_the_read_goes_on_past_pages_of_1024_to_an_aborted_oldest_result(redis_client: redis.Redis) -> None:
    """2,100 small results: pages of 16, 32 ... 1,024, then 1,024 again, and the oldest is found."""
    delivery = Delivery(redis_client)
    delivery.publish(schedule("s", {"w": 2100}, ttl_ms=600_000))
    delivery.enter_step(2, "s", 3600)
    leases: list[Lease] = []
    while len(leases) < 2100:
        leases += delivery.claim("s", "w", 1000)
    aborted = TrajectoryResult(0, "abort")
    entries = [
        (lease.key, lease.token, aborted if n == 0 else TrajectoryResult(40))
        for n, lease in enumerate(leases)
    ]
    assert set(delivery.complete_many("s", entries)) == {CompletionOutcome.ACCEPTED}
    assert over(_reported(leases[1:]), 2, delivery)
    assert not over(_reported(leases[2:]), 2, delivery)  # the second oldest says a length, unreported
