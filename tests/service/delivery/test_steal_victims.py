"""A steal tries at most ``VICTIMS`` (4) queues besides the thief's own, busiest first: the next only
while the one before has nothing the thief may ever take (steal.lua's victim loop).

The thief's own queue is empty (a worker with queued work cannot steal), so its entry in P:work can
only be a stale score, one no script's write-back removed: it is passed, and not counted as one of
the four. Counted, a busy fourth queue behind three of pins was never tried where such an entry ranked
among the busiest (mutants63 left this mutant alive, its set-up judged costly; a stale score written
in is the whole of it: mutants64)."""

from __future__ import annotations

import redis

from service.delivery import Delivery, DeliveryItem, PublishedSchedule, keys
from tests.service.delivery.conftest import item
from tests.service.delivery.test_steal_rules import _pin

PINNED_S = 900.0  # each item of the queues of pins: busier than the queue the thief may take from


def _pins(worker: str) -> tuple[DeliveryItem, ...]:
    """A queue of two pinned items: nothing a thief may ever take, so the steal tries the next."""
    return tuple(_pin(item(f"{worker}-{i}#0", PINNED_S)) for i in range(2))


def test_a_thiefs_own_stale_score_is_not_one_of_the_queues_a_steal_tries(
    delivery: Delivery, redis_client: redis.Redis
) -> None:
    queues = {"b": _pins("b"), "c": _pins("c"), "d": _pins("d"), "e": (item("e-0#0"), item("e-1#0")), "z": ()}
    delivery.publish(PublishedSchedule("s", queues))
    redis_client.zadd(keys.schedule_keys("s").work, {"z": 10 * PINNED_S})  # the thief ranked busiest
    assert [le.key for le in delivery.steal("s", "z", 4)] == ["e-1#0"]  # the fourth queue it tried
    # (a fifth is not tried: test_claim_capacity.py, test_a_steal_looks_at_no_more_than_four_queues)
