"""What an announce that fails part-way keeps in memory (``DeliveryIndexes.unlisted``) and which failure
it raises (``DeliveryIndexes._each_node``), on a real server and a real 3-master cluster; and the clock
a reaper pass reads the announcing index by (``walk_for_reaping``). Found by mutation testing of round
66's code (docs/experiments.md, "Mutation testing of round 66's new code"): the active-down and
slot-out cluster tests passed with a slot not served left out of ``unlisted``, an announce that lists
the schedule leaving it there, the last failure raised for the first, and the announcing entries'
age read on the lease clock given for the reaps.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pytest
import redis
from redis.cluster import RedisCluster
from redis.exceptions import ClusterDownError

from service.delivery import Delivery, announcing, keys
from service.delivery.errors import IndexNodeDown
from tests.service.delivery.conftest import schedule

SID = "s"


class _InboxDown(Delivery):
    """A delivery whose announces reach every index but worker ``b``'s inbox, whose node does not
    answer: the active index's writes land, the schedule is listed for the reapers."""

    def _each_node(
        self,
        writes: Mapping[str, Sequence[tuple[object, ...]]],
        doing: str,
        hold_back: str | None = None,
        missed: list[str] | None = None,
    ) -> None:
        lost = keys.inbox("b", self.prefix)
        if not doing.startswith("announcing") or lost not in writes:
            super()._each_node(writes, doing, hold_back, missed)
            return
        super()._each_node({k: v for k, v in writes.items() if k != lost}, doing, hold_back, missed)
        if missed is not None:
            missed.append(lost)
        raise redis.ConnectionError("b's node did not answer")


def test_an_announce_that_lists_the_schedule_leaves_unlisted_though_an_inbox_failed(
    redis_client: redis.Redis,
) -> None:
    """Held in ``unlisted`` by an earlier announce whose active index's node did not answer, the
    schedule is listed by this one (only an inbox's node failed): it leaves ``unlisted``, the
    reapers' index and its mark now say what to repair, and no second announce is owed by ``relist``."""
    delivery = _InboxDown(redis_client)
    delivery.unlisted[SID] = keys.DEFAULT_RETENTION_S
    with pytest.raises(redis.ConnectionError):
        delivery.publish(schedule(SID, {"a": 1, "b": 1}))
    assert delivery.unlisted == {}
    assert delivery.active_schedules() == [SID]
    assert delivery.client.zscore(keys.announcing_index(), SID) is not None
    assert delivery.client.hget(keys.schedule_keys(SID).meta, keys.ANNOUNCING) is not None
    assert delivery.schedules_for("a") == [SID]


class _SlotOut(Delivery):
    """A delivery whose index writes meet a slot not served (the cluster client's ``CLUSTERDOWN``,
    its retries and map refresh spent) while ``out`` holds."""

    out = True

    def _send(
        self, names: Sequence[str], writes: Mapping[str, Sequence[tuple[object, ...]]], last: str | None
    ) -> None:
        if self.out:
            raise ClusterDownError("Hash slot not served")
        super()._send(names, writes, last)


def test_an_announce_whose_active_index_slot_is_not_served_is_kept_unlisted(
    redis_client: redis.Redis,
) -> None:
    """A slot not served is a failed group as a node down is (ops66): where it holds the active index,
    nothing lists the schedule, so this process keeps it for ``relist``, and the slot's error is the
    one raised."""
    delivery = _SlotOut(redis_client)
    with pytest.raises(ClusterDownError):
        delivery.publish(schedule(SID, {"a": 1}))
    assert delivery.unlisted == {SID: keys.DEFAULT_RETENTION_S}
    assert delivery.active_schedules() == []
    delivery.out = False
    assert delivery.announce(SID, delivery.unlisted[SID]) is True
    assert delivery.unlisted == {}
    assert delivery.schedules_for("a") == delivery.active_schedules() == [SID]


class _EveryNodeDown(Delivery):
    """A cluster delivery whose index pipelines all fail, each with its own error, in the order sent."""

    sent: list[str]

    def _send(
        self, names: Sequence[str], writes: Mapping[str, Sequence[tuple[object, ...]]], last: str | None
    ) -> None:
        self.sent.append(names[0])
        raise redis.ConnectionError(f"pipeline {len(self.sent)} refused")


def test_of_several_nodes_that_fail_the_first_sent_is_the_one_raised(cluster_client: RedisCluster) -> None:
    """Every node is sent its pipeline whatever the others answer, and the first failure is raised
    after them all (``_each_node``): the active index's node, sent first."""
    delivery = _EveryNodeDown(cluster_client)
    delivery.sent = []
    workers = {f"w{i}": 1 for i in range(16)}  # inboxes on every master
    with pytest.raises(IndexNodeDown) as raised:
        delivery.publish(schedule(SID, workers))
    assert len(delivery.sent) == 3
    assert "pipeline 1 refused" in str(raised.value)
    assert delivery.sent[0] == keys.active_index()
    assert delivery.unlisted == {SID: keys.DEFAULT_RETENTION_S}


def test_the_announcing_entries_age_is_read_on_the_server_s_clock_not_the_lease_clock_given(
    delivery: Delivery,
) -> None:
    """``now_ms`` is the lease clock the reaps are judged by (a test's, or a skewed one): an entry
    just written is not ``after_ms`` old however far that clock runs, so it is not listed."""
    delivery.publish(schedule(SID, {"a": 1}))
    far = 10**13  # a lease clock centuries ahead: every lease lapsed
    walk = delivery.walk_for_reaping(now_ms=far, after_ms=60_000)
    assert walk.due == [SID]
    assert walk.listed == []
    assert [sid for sid, _ in delivery.walk_for_reaping(now_ms=far, after_ms=0).listed] == [SID]


class _ListedMeanwhile(Delivery):
    """A delivery whose announce of ``s1`` lists ``s2`` too, as another thread's announce of it (a
    retried publish) does while ``relist`` walks what it copied of ``unlisted``."""

    def announce(self, schedule_id: str, retention_s: int) -> bool:
        if schedule_id == "s1":
            self.unlisted.pop("s2", None)
        return super().announce(schedule_id, retention_s)


def test_relist_passes_over_a_schedule_another_announce_listed_meanwhile(redis_client: redis.Redis) -> None:
    """``s2`` left ``unlisted`` after the walk copied it: it is neither announced again nor dropped
    (the announce that listed it did both's work), and nothing is sent for it."""
    delivery = _ListedMeanwhile(redis_client)
    for sid in ("s1", "s2"):
        delivery.publish(schedule(sid, {"a": 1}))
        delivery.unlisted[sid] = keys.DEFAULT_RETENTION_S
    done = announcing.relist(delivery)
    assert (done.announced, done.dropped, done.missed) == (["s1"], [], {})
    assert delivery.unlisted == {}
