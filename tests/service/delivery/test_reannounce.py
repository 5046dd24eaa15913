"""The announce's mark and the reapers' announce again (``service/delivery/announcing.py``), on a real
server: a full announce clears its mark and its entry is dropped, writing nothing; an announce that
missed an inbox (left here as a node that did not answer leaves it: the inbox without the schedule, the
mark held) is announced again, once, and its items are claimed once; a schedule cancelled or finished
meanwhile is not written back. The cluster case, a master killed: ``test_cluster_reannounce.py``."""

from __future__ import annotations

import pytest
import redis

from service.delivery import CompletionOutcome, Delivery, announcing, keys
from service.delivery.announcing import reannounce
from tests.service.delivery.conftest import schedule
from tests.service.delivery.cut_pipeline import cut_after_first
from tests.service.finished import RESULT

SID = "s"
LISTED = keys.announcing_index()


def _missed(delivery: Delivery, worker: str) -> None:
    """What an announce whose node of ``worker``'s inbox did not answer leaves: the schedule in every
    other index, not in that inbox, its mark held (``BEGIN``'s, the retention) and its entry listed."""
    delivery.publish(schedule(SID, {"a": 2, "b": 2}))
    delivery.client.zrem(keys.inbox(worker), SID)
    delivery.client.hset(keys.schedule_keys(SID).meta, keys.ANNOUNCING, keys.DEFAULT_RETENTION_S)


def test_a_full_announce_clears_its_mark_and_a_reaper_drops_its_entry_writing_nothing(
    delivery: Delivery,
) -> None:
    delivery.publish(schedule(SID, {"a": 1}))
    assert delivery.client.hget(keys.schedule_keys(SID).meta, keys.ANNOUNCING) is None
    assert delivery.client.zscore(LISTED, SID) is not None
    assert reannounce(delivery).dropped == []  # younger than REANNOUNCE_AFTER_MS: its announce's
    done = reannounce(delivery, after_ms=0)
    assert (done.announced, done.dropped) == ([], [SID])
    assert delivery.client.zcard(LISTED) == 0
    assert delivery.schedules_for("a") == [SID]


def test_an_announce_that_missed_an_inbox_is_made_again_once_and_its_items_claimed_once(
    delivery: Delivery,
) -> None:
    _missed(delivery, "b")
    assert delivery.schedules_for("b") == []
    assert reannounce(delivery, after_ms=0).announced == [SID]
    assert delivery.schedules_for("b") == [SID]
    assert delivery.client.hget(keys.schedule_keys(SID).meta, keys.ANNOUNCING) is None
    assert reannounce(delivery, after_ms=0).dropped == [SID]  # the entry the announce again wrote
    # an inbox holding it already (a's): a sorted set, one entry, whatever the announces
    delivery.announce(SID, keys.DEFAULT_RETENTION_S)
    assert delivery.client.zcard(keys.inbox("a")) == 1
    leases = delivery.claim(SID, "b", 10)
    assert sorted(lease.item.key for lease in leases) == ["b-0#0", "b-1#0"]
    assert delivery.claim(SID, "b", 10) == []
    assert [delivery.complete(lease, RESULT) for lease in leases] == [CompletionOutcome.ACCEPTED] * 2


def test_a_schedule_cancelled_while_its_mark_held_is_not_written_back(delivery: Delivery) -> None:
    """The cancel's retire left the entry (its node held back where another did not answer): the
    reaper's announce finds the schedule settled, clears the mark, retires it, writes no inbox."""
    _missed(delivery, "b")
    delivery.cancel(SID)
    delivery.client.zadd(LISTED, {SID: 1})
    done = reannounce(delivery, after_ms=0)
    assert (done.announced, done.dropped) == ([], [SID])
    assert delivery.schedules_for("a") == delivery.schedules_for("b") == []
    assert delivery.client.zscore(keys.active_index(), SID) is None
    assert delivery.client.zcard(LISTED) == 0
    assert delivery.client.hget(keys.schedule_keys(SID).meta, keys.ANNOUNCING) is None


def test_a_schedule_finished_or_expired_while_its_mark_held_is_not_written_back(delivery: Delivery) -> None:
    _missed(delivery, "b")
    for worker in ("a", "b"):
        for lease in delivery.claim(SID, worker, 10):
            delivery.complete(lease, RESULT)
    delivery.client.zadd(LISTED, {SID: 1, "gone": 1})  # and one whose keys expired
    done = reannounce(delivery, after_ms=0)
    assert sorted(done.dropped) == ["gone", SID]
    assert delivery.schedules_for("b") == []
    assert delivery.client.zcard(LISTED) == 0


def test_an_entry_rewritten_by_a_later_announce_is_not_dropped(
    delivery: Delivery, redis_client: redis.Redis
) -> None:
    """The drop names the score it read: an announce begun since (a new score, perhaps short of an
    inbox again) keeps its entry."""
    delivery.publish(schedule(SID, {"a": 1}))
    score = delivery.client.zscore(LISTED, SID)
    assert score is not None
    drop = announcing.MarkScripts.on(redis_client).drop
    assert drop(keys=[LISTED], args=[SID, int(score) - 1]) == 0
    assert delivery.client.zscore(LISTED, SID) == score
    assert drop(keys=[LISTED], args=[SID, int(score)]) == 1


def test_a_listed_schedule_whose_keys_are_damaged_is_skipped_and_the_others_announced(
    delivery: Delivery,
) -> None:
    """A script's error reply on one schedule (its meta not a hash) is that schedule's: logged and
    skipped, not the pass's end (it is listed first at every pass: a break there starved the rest)."""
    delivery.client.set(keys.schedule_keys("bad").meta, "x")
    delivery.client.zadd(LISTED, {"bad": 1})
    _missed(delivery, "b")
    done = reannounce(delivery, after_ms=0)
    assert list(done.missed) == ["bad"]
    assert done.announced == [SID]
    assert delivery.schedules_for("b") == [SID]


def test_a_schedule_its_announce_could_not_list_is_announced_by_relist_once(delivery: Delivery) -> None:
    """What an announce whose active index's node did not answer leaves (``DeliveryIndexes.unlisted``:
    neither index holds it, nor the inbox there): ``relist`` announces it to every index, once; a
    settled one is retired instead, and one gone leaves ``unlisted`` (``announcing.relist``)."""
    _missed(delivery, "b")
    delivery.client.zrem(keys.active_index(), SID)
    delivery.client.zrem(LISTED, SID)
    delivery.unlisted.update({SID: keys.DEFAULT_RETENTION_S, "gone": keys.DEFAULT_RETENTION_S})
    done = announcing.relist(delivery)
    assert (done.announced, done.dropped) == ([SID], ["gone"])
    assert delivery.unlisted == {}
    assert delivery.active_schedules() == [SID]
    assert delivery.schedules_for("b") == [SID]
    assert delivery.client.hget(keys.schedule_keys(SID).meta, keys.ANNOUNCING) is None
    assert announcing.relist(delivery) == announcing.Reannounced()  # nothing held: nothing sent
    delivery.cancel(SID)
    delivery.unlisted[SID] = keys.DEFAULT_RETENTION_S
    assert announcing.relist(delivery).dropped == [SID]
    assert delivery.schedules_for("a") == delivery.schedules_for("b") == delivery.active_schedules() == []


def test_an_announce_cut_short_after_its_first_command_has_listed_the_schedule(
    delivery: Delivery, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One Redis whose connection drops once the announce's pipeline has run its first command (a
    node that died mid-pipeline): that command is the announcing index's entry, so the reapers find
    the schedule and announce it to every inbox. It was the active index's entry until ops66: the
    reapers walked the schedule and never announced it again, its inboxes empty."""
    cut_after_first(delivery, monkeypatch)
    with pytest.raises(redis.ConnectionError):
        delivery.publish(schedule(SID, {"a": 1, "b": 1}))
    monkeypatch.undo()
    assert delivery.schedules_for("a") == delivery.schedules_for("b") == []
    assert reannounce(delivery, after_ms=0).announced == [SID]
    assert delivery.schedules_for("a") == delivery.schedules_for("b") == delivery.active_schedules() == [SID]
