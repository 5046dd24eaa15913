"""The announce's mark at its edges (``service/delivery/announcing.py``, ``DeliveryIndexes._announce``),
on a real server: what a replayed or expiring schedule leaves in the indexes, and what one reaper pass
over the announcing index does. Found by mutation testing of round 65's code (docs/experiments.md,
"Mutation testing of round 65's new code"): each test states a behaviour no earlier test reached.
"""

from __future__ import annotations

import socket
from collections.abc import Mapping, Sequence

import pytest
import redis
from redis.backoff import NoBackoff
from redis.cluster import RedisCluster
from redis.exceptions import ClusterDownError, ClusterError
from redis.retry import Retry

from service.delivery import Delivery, keys
from service.delivery.announcing import reannounce
from service.delivery.errors import IndexNodeDown
from tests.service.delivery.conftest import schedule
from tests.service.finished import RESULT

SID = "s"
LISTED = keys.announcing_index()
SHORT_MS = 10_000  # an inbox's expiry the test set: a replay must not push it out


def test_a_replay_of_a_finished_schedule_writes_no_inbox(delivery: Delivery) -> None:
    """A schedule whose every item is done (``total`` equal to the settled count) is retired, never
    announced: its inboxes' expiry is not pushed out to its retention by a write undone after."""
    delivery.publish(schedule("other", {"a": 1}))
    delivery.publish(schedule(SID, {"a": 1}))
    for lease in delivery.claim(SID, "a", 10):
        delivery.complete(lease, RESULT)
    delivery.client.pexpire(keys.inbox("a"), SHORT_MS)
    assert delivery.announce(SID, keys.DEFAULT_RETENTION_S) is False
    assert 0 < delivery.client.pttl(keys.inbox("a")) <= SHORT_MS
    assert delivery.schedules_for("a") == ["other"]
    assert delivery.client.hget(keys.schedule_keys(SID).meta, keys.ANNOUNCING) is None


def test_a_replay_of_a_settled_schedule_its_retire_missed_retires_it(delivery: Delivery) -> None:
    """Its entries left where the retire at its settling did not land (a node down then): the replay
    takes them out, so no worker claims from it and no reaper walks it."""
    delivery.publish(schedule(SID, {"a": 1}))
    for lease in delivery.claim(SID, "a", 10):
        delivery.complete(lease, RESULT)
    delivery.client.zadd(keys.inbox("a"), {SID: 1})
    delivery.client.zadd(keys.active_index(), {SID: 1})
    assert delivery.announce(SID, keys.DEFAULT_RETENTION_S) is False
    assert delivery.schedules_for("a") == []
    assert delivery.client.zscore(keys.active_index(), SID) is None


def test_a_cancel_takes_the_schedule_out_of_the_announcing_index(delivery: Delivery) -> None:
    """Listed by its announce (until a reaper sees its mark cleared), the schedule leaves the list
    with the other indexes at its retire: the reapers have nothing of it to read again."""
    delivery.publish(schedule(SID, {"a": 1}))
    assert delivery.client.zscore(LISTED, SID) is not None
    delivery.cancel(SID)
    assert delivery.client.zscore(LISTED, SID) is None


class _ExpiringMidway(Delivery):
    """A delivery whose schedule's keys expire while its announce writes the indexes (the retention
    ending between the mark and the check after the writes)."""

    def _each_node(
        self,
        writes: Mapping[str, Sequence[tuple[object, ...]]],
        doing: str,
        hold_back: str | None = None,
        missed: list[str] | None = None,
    ) -> None:
        super()._each_node(writes, doing, hold_back, missed)
        if doing.startswith("announcing"):
            gone = keys.schedule_keys(SID)
            self.client.delete(gone.meta, gone.counts)


def test_a_schedule_whose_keys_expire_during_its_announce_is_retired_not_announced(
    delivery: Delivery,
) -> None:
    delivery.publish(schedule(SID, {"a": 1}))
    expiring = _ExpiringMidway(delivery.client)
    assert expiring.announce(SID, keys.DEFAULT_RETENTION_S) is False
    assert delivery.client.zscore(keys.active_index(), SID) is None
    assert delivery.client.zscore(LISTED, SID) is None


def _listed(delivery: Delivery, *schedule_ids: str) -> None:
    """Schedules published whose announce missed an inbox: their mark held, their entry listed."""
    for schedule_id in schedule_ids:
        delivery.publish(schedule(schedule_id, {"a": 1}))
        delivery.client.hset(keys.schedule_keys(schedule_id).meta, keys.ANNOUNCING, keys.DEFAULT_RETENTION_S)


class _Failing(Delivery):
    """A delivery whose announce fails with ``error`` (a node down, a slot not served, a redirect too
    many: what a cluster's inbox write raises), the schedules it was asked for recorded."""

    def __init__(self, client: redis.Redis | RedisCluster, error: Exception) -> None:
        super().__init__(client)
        self.error, self.asked = error, list[str]()

    def announce(self, schedule_id: str, retention_s: int) -> bool:
        self.asked.append(schedule_id)
        raise self.error


FAILURES = {
    "a node down": IndexNodeDown("127.0.0.1:7001", redis.ConnectionError("refused"), "announcing"),
    "a slot not served": ClusterDownError("The cluster is down"),
    "a redirect too many": ClusterError("TTL exhausted."),
}


@pytest.mark.parametrize("error", FAILURES.values(), ids=FAILURES.keys())
def test_a_pass_stops_at_the_first_announce_redis_failed_the_rest_wait_a_pass(
    delivery: Delivery, error: Exception
) -> None:
    """A dead master costs a pass one failed call, not one per listed schedule."""
    _listed(delivery, "s1", "s2", "s3")
    failing = _Failing(delivery.client, error)
    done = reannounce(failing, after_ms=0)
    assert failing.asked == ["s1"]
    assert list(done.missed) == ["s1"]
    assert (done.announced, done.dropped) == ([], [])
    assert delivery.client.zcard(LISTED) == 3


def test_a_pass_whose_read_of_the_index_fails_answers_it_missed() -> None:
    """The index's node down: the pass ends there, its error kept, nothing raised into the reaper's
    pass (whose reaps were done and are still to be reported)."""
    with socket.socket() as probe:  # a local port nothing listens on: a connection there is refused
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    down = Delivery(redis.Redis(port=port, retry=Retry(NoBackoff(), 0)))
    done = reannounce(down, after_ms=0)
    assert list(done.missed) == [LISTED]
    assert isinstance(done.missed[LISTED], redis.ConnectionError)


class _ExpiringFirst(Delivery):
    """A delivery whose listed schedule's keys expire after the pass read its mark, before its
    announce again."""

    def announce(self, schedule_id: str, retention_s: int) -> bool:
        gone = keys.schedule_keys(schedule_id)
        self.client.delete(gone.meta, gone.counts)
        return super().announce(schedule_id, retention_s)


def test_a_schedule_expired_between_its_mark_read_and_its_announce_is_dropped(delivery: Delivery) -> None:
    _listed(delivery, SID)
    done = reannounce(_ExpiringFirst(delivery.client), after_ms=0)
    assert (done.announced, done.dropped, done.missed) == ([], [SID], {})
    assert delivery.client.zcard(LISTED) == 0


def test_a_schedule_announced_again_is_reported_announced_only_and_stays_listed(delivery: Delivery) -> None:
    """Its entry rewritten by the announce again: the next pass, which finds its mark cleared, drops it."""
    _listed(delivery, SID)
    delivery.client.zadd(LISTED, {SID: 1})
    done = reannounce(delivery, after_ms=0)
    assert (done.announced, done.dropped) == ([SID], [])
    assert (delivery.client.zscore(LISTED, SID) or 0) > 1
    assert reannounce(delivery, after_ms=0).dropped == [SID]


class _CancelledMidway(Delivery):
    """A delivery whose announce meets a cancel and a node down: the cancel's retire runs before the
    announce's writes, which undo it, and one node does not answer them."""

    def _each_node(
        self,
        writes: Mapping[str, Sequence[tuple[object, ...]]],
        doing: str,
        hold_back: str | None = None,
        missed: list[str] | None = None,
    ) -> None:
        if not doing.startswith("announcing"):
            super()._each_node(writes, doing, hold_back, missed)
            return
        self.cancel(SID)
        super()._each_node(writes, doing, hold_back, missed)
        raise IndexNodeDown("127.0.0.1:7001", redis.ConnectionError("refused"), doing)


def test_a_schedule_cancelled_during_an_announce_a_node_missed_is_retired_from_the_rest(
    delivery: Delivery,
) -> None:
    """The node's error is raised, and the indexes that answered hold the cancelled schedule no more:
    no worker claims from it, no reaper walks it."""
    delivery.publish(schedule(SID, {"a": 1, "b": 1}))
    with pytest.raises(IndexNodeDown):
        _CancelledMidway(delivery.client).announce(SID, keys.DEFAULT_RETENTION_S)
    assert delivery.schedules_for("a") == delivery.schedules_for("b") == []
    assert delivery.client.zscore(keys.active_index(), SID) is None
    assert delivery.client.zscore(LISTED, SID) is None
