"""A report that settles its schedule is answered as its script answered, even where a node of the
schedule's indexes (another slot's: the active index, a worker's inbox) does not answer the retire
that follows, on a real 3-master Redis Cluster with the inbox's master killed; the schedule stays in
the active index, so a reaper's pass over it retires it again once that node answers.

Why. The retire ran after the script had answered and its error was raised to the caller, whose retry
ran the script again: the completion accepted on the first try was answered ``DUPLICATE`` and raised
again as long as the node was down, so a sidecar held an accepted result as unanswered for its whole
retry window (and then kept it to resend); a heartbeat's walk lost the beat's answer. The answer is
the script's, once; the retire is the indexes' repair, which a reap of a settled schedule makes
(``lua/common.lua``'s settled flag is the schedule's state, not the call's change)."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
import redis
from redis.cluster import RedisCluster

from service.delivery import Delivery, keys, remap
from service.delivery.outcomes import CompletionOutcome
from service.redis_conn import connect
from service.settings import Settings
from tests.cluster import LocalCluster, serve_the_rest
from tests.service.delivery.conftest import schedule
from tests.service.delivery.cut_pipeline import cut_after_first
from tests.service.failover import TIMEOUT_S, paced
from tests.service.finished import RESULT

pytestmark = pytest.mark.slow
T0 = 1_000_000  # explicit clock (ms)


@pytest.fixture
def inbox_down() -> Iterator[tuple[Delivery, str, str]]:
    """A schedule of one item for a worker whose inbox is on a master that holds neither the schedule
    nor the active index, that master killed; the delivery (the service's client, its own map refresh
    paced), the worker and the killed node's name."""
    with LocalCluster() as local:
        serve_the_rest(local)
        delivery = Delivery(
            connect(Settings(redis_url=local.url, redis_cluster=True, redis_timeout_s=TIMEOUT_S))
        )
        client = paced(delivery)
        active = _node(client, keys.active_index())
        worker = next(f"w{n}" for n in range(1000) if _node(client, keys.inbox(f"w{n}")) != active)
        inbox = _node(client, keys.inbox(worker))
        sid = next(f"s{n}" for n in range(1000) if _node(client, keys.schedule_keys(f"s{n}").meta) != inbox)
        delivery.publish(schedule(sid, {worker: 1}), now_ms=T0)
        next(node for node in local.nodes if f"127.0.0.1:{node.port}" == inbox).kill()
        try:
            yield delivery, worker, inbox
        finally:
            client.close()


def test_the_settling_completion_is_answered_once_and_its_schedule_left_for_the_reapers(
    inbox_down: tuple[Delivery, str, str], caplog: pytest.LogCaptureFixture
) -> None:
    delivery, worker, inbox = inbox_down
    (sid,) = delivery.active_schedules()
    (lease,) = delivery.claim(sid, worker, 1)
    meta = delivery.keys(sid).meta
    with caplog.at_level(logging.WARNING, logger="service.delivery"):
        answer = remap.remapped(delivery.client, meta, lambda: delivery.complete(lease, RESULT))
    assert answer is CompletionOutcome.ACCEPTED
    assert delivery.progress(sid).done == 1
    assert delivery.active_schedules() == [sid]  # kept: a reaper's pass retires it again
    [told] = [r for r in caplog.records if r.name.startswith("service.delivery")]
    assert sid in told.getMessage()
    assert inbox in told.getMessage()


def _node(client: RedisCluster, key: str) -> str:
    """The name of the node the client's map sends ``key`` to."""
    return str(client.get_node_from_key(key).name)  # type: ignore[no-untyped-call]


def test_a_reapers_pass_retires_a_settled_schedule_the_retire_left_behind(delivery: Delivery) -> None:
    """One Redis: the schedule settled and its retire undone (as a node that did not answer leaves
    it: still active, still in the worker's inbox); the reapers find it due and their reap retires it."""
    delivery.publish(schedule("s", {"a": 1}), now_ms=T0)
    (lease,) = delivery.claim("s", "a", 1, now_ms=T0)
    assert delivery.complete(lease, RESULT, now_ms=T0) is CompletionOutcome.ACCEPTED
    delivery.client.zadd(keys.active_index(), {"s": T0})
    delivery.client.zadd(keys.inbox("a"), {"s": T0})
    assert delivery.due_for_reaping(T0) == ["s"]
    delivery.reap("s", now_ms=T0)
    assert (delivery.active_schedules(), delivery.schedules_for("a")) == ([], [])


def test_a_retire_cut_short_on_a_node_leaves_the_schedule_to_the_reapers(
    delivery: Delivery, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One Redis whose connection drops once the retire's pipeline has run its first command (a
    node that died mid-pipeline; on a cluster, a command of it redirected to a node down): the
    schedule stays in the active index, sent last on its node too, so the reapers' pass retires it
    from the inboxes the cut left it in. Sent first there, the active index's went and the others
    stayed: an inbox held the cancelled schedule with nothing left to retire it (review65)."""
    delivery.publish(schedule("s", {"a": 1, "b": 1}), now_ms=T0)
    cut_after_first(delivery, monkeypatch)
    with pytest.raises(redis.ConnectionError):
        delivery.cancel("s")
    monkeypatch.undo()
    assert delivery.due_for_reaping(T0) == ["s"]
    delivery.reap("s", now_ms=T0)
    left = (delivery.active_schedules(), delivery.schedules_for("a"), delivery.schedules_for("b"))
    assert left == ([], [], [])
