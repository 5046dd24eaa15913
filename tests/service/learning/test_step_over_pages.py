"""The rule's read for unreported results (``step_over._said_nothing``) is bounded by bytes, not only
by count: results with token ids and logprobs in ``extra`` run to tens of KB each, and a page of
1,024 of them was one reply of tens of MB. On the real embedded valkey, with Redis holding a normal
client's output to 8 MB, as an operator's ``client-output-buffer-limit`` does."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
import redis

from service.delivery import CompletionOutcome, Delivery, Lease, TrajectoryResult, keys
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


def test_an_old_unreported_result_is_read_from_its_lease_s_deadline_not_from_the_stream_s_newest(
    redis_client: redis.Redis,
) -> None:
    """A trajectory aborted as the step began, its record as an older release left it (its lease's
    deadline, not its result's millisecond), the rest (2,000 results of ~4 KB, 8 MB) finished after
    that deadline and reported: the read for it starts at that deadline (no result of its is
    newer), and Redis sends a small part of the stream, where it sent the whole of it (at 4,096 x 32,
    18 s of reading on a loaded 2-core host)."""
    delivery = Delivery(redis_client)
    delivery.publish(schedule("s", {"w": 2001}, ttl_ms=2_000))
    delivery.enter_step(2, "s", 3600)
    [early] = delivery.claim("s", "w", 1)
    assert delivery.complete(early, TrajectoryResult(0, "abort")) is CompletionOutcome.ACCEPTED
    _as_an_older_release_left_it(redis_client, early)
    while _server_ms(redis_client) <= early.deadline_ms:  # the rest finish after the early one's deadline
        time.sleep(0.01)
    late: list[Lease] = []
    while len(late) < 2000:  # each batch completed at once, well within its 2 s leases
        leases = delivery.claim("s", "w", 50)
        entries = [(lease.key, lease.token, TrajectoryResult(40, output="y" * 4096)) for lease in leases]
        assert set(delivery.complete_many("s", entries)) == {CompletionOutcome.ACCEPTED}
        late += leases
    sent = _sent(redis_client)
    assert over(_reported(late), 2, delivery)
    assert _sent(redis_client) - sent < 2000 * 4096 // 10


def _as_an_older_release_left_it(redis_client: redis.Redis, lease: Lease) -> None:
    """The done record of ``lease`` with its lease's deadline where this release writes its result's
    millisecond (``lua/complete.lua``)."""
    st = keys.schedule_keys("s").st
    fields = str(redis_client.hget(st, lease.key)).split("|")
    fields[3] = str(lease.deadline_ms)
    redis_client.hset(st, lease.key, "|".join(fields))


def test_two_unreported_results_far_apart_under_leases_as_long_as_the_step_are_each_read_alone(
    redis_client: redis.Redis,
) -> None:
    """Leases of an hour (the deadline past every result), a trajectory aborted as the step began and
    one as it ended, 2,000 results of ~4 KB between them reported: each is read at the millisecond
    its record names, and Redis sends a small part of the stream, where the read from the latest
    deadline down to the oldest result sent the whole of it (131,072 results: 12-18 s)."""
    delivery = Delivery(redis_client)
    delivery.publish(schedule("s", {"w": 2002}, ttl_ms=3_600_000))
    delivery.enter_step(2, "s", 3600)
    [first] = delivery.claim("s", "w", 1)
    assert delivery.complete(first, TrajectoryResult(0, "abort")) is CompletionOutcome.ACCEPTED
    middle: list[Lease] = []
    while len(middle) < 2000:
        leases = delivery.claim("s", "w", 50)
        entries = [(lease.key, lease.token, TrajectoryResult(40, output="y" * 4096)) for lease in leases]
        assert set(delivery.complete_many("s", entries)) == {CompletionOutcome.ACCEPTED}
        middle += leases
    [last] = delivery.claim("s", "w", 1)
    assert delivery.complete(last, TrajectoryResult(0, "abort")) is CompletionOutcome.ACCEPTED
    sent = _sent(redis_client)
    assert over(_reported(middle), 2, delivery)
    assert _sent(redis_client) - sent < 2000 * 4096 // 10
    assert not over(_reported(middle[1:]), 2, delivery)  # one between them says a length, unreported


def _server_ms(redis_client: redis.Redis) -> int:
    seconds, micros = redis_client.time()
    return int(seconds) * 1000 + int(micros) // 1000


def _sent(redis_client: redis.Redis) -> int:
    """The bytes Redis has sent its clients so far (``INFO stats``)."""
    return int(redis_client.info("stats")["total_net_output_bytes"])


@pytest.mark.parametrize("older", [False, True], ids=["this-release", "older-release"])
@pytest.mark.parametrize(
    ("first", "is_over"),
    [(TrajectoryResult(0, "abort"), True), (TrajectoryResult(40), False)],
    ids=["abort", "stop"],
)
def test_a_result_stamped_past_its_lease_s_deadline_is_still_read(
    redis_client: redis.Redis, first: TrajectoryResult, is_over: bool, older: bool
) -> None:
    """Leased and completed on a clock its caller pinned an hour back (``now_ms``): this release's
    record names its result's millisecond whatever the pin. An older release's names the deadline,
    an hour before the result's stream id, so the read from the deadline down misses it, and the
    results newer than the deadline are read after: aborted, the step is over; a length, it is not."""
    delivery = Delivery(redis_client)
    delivery.publish(schedule("s", {"w": 3}))
    delivery.enter_step(2, "s", 3600)
    hour_ago = _server_ms(redis_client) - 3_600_000
    leases = delivery.claim("s", "w", 3, now_ms=hour_ago)
    for lease, result in zip(leases, (first, TrajectoryResult(40), TrajectoryResult(40)), strict=True):
        assert delivery.complete(lease, result, now_ms=hour_ago) is CompletionOutcome.ACCEPTED
    if older:
        _as_an_older_release_left_it(redis_client, leases[0])
    assert over(_reported(leases[1:]), 2, delivery) is is_over
