"""A publish cut short after any of its round trips (the service's process killed, its host lost)
leaves no worker's inbox without an expiry: the inbox is pruned only by a later announce to the
same worker, so one left without a TTL stays for good when its worker never comes back."""

from __future__ import annotations

from typing import Any

import redis

from service.delivery import Delivery
from tests.service.delivery.conftest import schedule


class _DiedError(Exception):
    """The process that was publishing is gone: it sends nothing more."""


class _DiesAfter(redis.Redis):
    """A real client whose process dies after ``round_trips`` round trips (a command, or a whole
    pipeline): what it sent before reached the server whole, nothing after it does."""

    def __init__(self, url: str, round_trips: int) -> None:
        super().__init__(connection_pool=redis.ConnectionPool.from_url(url, decode_responses=True))
        self.left = round_trips

    def _spend(self) -> None:
        if self.left == 0:
            raise _DiedError
        self.left -= 1

    def execute_command(self, *args: Any, **options: Any) -> Any:
        self._spend()
        return super().execute_command(*args, **options)  # type: ignore[no-untyped-call]  # redis-py untyped

    def pipeline(self, transaction: bool = True, shard_hint: Any = None) -> Any:
        pipe = super().pipeline(transaction, shard_hint)
        execute = pipe.execute

        def execute_unless_dead(raise_on_error: bool = True) -> Any:
            self._spend()
            return execute(raise_on_error)

        pipe.execute = execute_unless_dead  # type: ignore[method-assign]  # the death, on a real pipeline
        return pipe


def _inboxes_without_expiry(client: redis.Redis) -> list[str]:
    return [str(key) for key in client.keys("rs:inbox:*") if int(client.pttl(key)) < 0]


def test_a_publish_cut_short_after_any_round_trip_leaves_no_inbox_without_an_expiry(
    redis_client: redis.Redis, redis_url: str
) -> None:
    round_trips, whole = 0, False
    while not whole and round_trips < 30:  # a whole publish takes fewer
        redis_client.flushdb()
        try:
            Delivery(_DiesAfter(redis_url, round_trips)).publish(schedule("s", {"a": 1, "b": 1}))
            whole = True
        except _DiedError:
            pass
        assert _inboxes_without_expiry(redis_client) == [], f"died after {round_trips} round trips"
        round_trips += 1
    assert whole, "the publish never ran to its end"
    assert sorted(redis_client.keys("rs:inbox:*")) == ["rs:inbox:{a}", "rs:inbox:{b}"]
