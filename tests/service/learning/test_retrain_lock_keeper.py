"""The retrain lock's fencing token and its keeper, on a real Redis: a token drawn is above every
token the store holds, a keeper renews nothing once its replica stops, and a lock found lost is
said once.

Why. The fencing token orders versions across replicas (``predictors.store``): a Redis that lost its
counter (restarted without its AOF) hands out tokens from where it restarted, and a token equal to the
store's highest would tie a new version with an old one. The keeper renews the lock every third of its
TTL so that a long fit keeps it; a replica that stops must let it lapse by its TTL (a minute at most)
whatever its abandoned fit still does, and a lapse is one line, not one a round until the fit ends.
The keeper's waits are an event that answers "not done" a set number of times: no test waits a TTL.
"""

from __future__ import annotations

import threading
from typing import Any

import redis

from service.delivery import keys
from service.learning.retrain_lock import RetrainLock
from service.metrics import Metrics

ROUNDS = 3  # the keeper's rounds before its fit is done


class _Rounds(threading.Event):
    """A fit's ``done`` that is not done for ``ROUNDS`` waits, then done: the keeper's rounds, untimed."""

    def __init__(self) -> None:
        super().__init__()
        self.waits = 0

    def wait(self, timeout: float | None = None) -> bool:
        self.waits += 1
        return self.waits > ROUNDS


def _lock(client: redis.Redis, halted: threading.Event, said: list[str]) -> RetrainLock:
    def say(level: int, message: str, *args: Any, **kwargs: Any) -> None:
        said.append(message % args)

    return RetrainLock(client, Metrics(), keys.DEFAULT_PREFIX, say, halted)


def test_a_fencing_token_is_above_the_stores_highest_where_the_counter_reaches_it_exactly(
    redis_client: redis.Redis,
) -> None:
    lock = _lock(redis_client, threading.Event(), [])
    redis_client.set(keys.retrain_fence(keys.DEFAULT_PREFIX), 4)  # the next count is 5
    assert lock.next_fence_token(5) == 6


def test_a_keeper_whose_replica_stops_renews_the_lock_no_more(redis_client: redis.Redis) -> None:
    halted, said = threading.Event(), list[str]()
    lock = _lock(redis_client, halted, said)
    token = lock.take()
    assert token is not None
    redis_client.expire(lock.key, 5)  # a renewal would set it back to the lock's TTL
    halted.set()
    lock.keep(token, _Rounds())
    assert redis_client.ttl(lock.key) <= 5
    assert said == []


def test_a_lock_found_lost_during_the_fit_is_said_once(redis_client: redis.Redis) -> None:
    said: list[str] = []
    lock = _lock(redis_client, threading.Event(), said)
    token = lock.take()
    assert token is not None
    redis_client.delete(lock.key)  # lapsed
    done = _Rounds()
    lock.keep(token, done)
    assert said == ["the retrain lock lapsed during the fit: its version will not be stored"]
    assert done.waits == 1  # and it renews no more
