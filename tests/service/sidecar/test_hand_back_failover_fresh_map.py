"""A sidecar's release at a drain, and its failure report of an unreadable item, reach a failed-over
schedule at its new master at their first try, on a real 3-master Redis Cluster, where the sidecar's
client's own refresh of its slot map is not due (paced to an hour, ``paced``: within the second after
a read in production); and a release whose answer was lost and that is sent again there is counted
``released``, not ``lost``.

Both go through ``remap.remapped``, as the session's claims, completions and failure reports do
(``test_reports_failover_fresh_map``): where the master did not answer and another master names a new
one for the slot, the map is read and the call sent once more, there. The release stayed on the
client's own read (cluster53): every try went to the old master until its paced refresh, up to a
second, of a drain's bound of seconds. Its repeat of a release that had landed was ``STALE``, counted
``lost`` beside a lease that had gone back; ``release.lua`` now answers it ``DUPLICATE``
(``P:released``), as it answers a repeated completion or failure. Each test sends one try (no retry
window): without the read, each fails with the old master's ``ConnectionError``."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from service.delivery.protocol import Delivery
from service.delivery.records import Lease
from service.redis_conn import connect
from service.settings import Settings
from service.sidecar.holdings import Held, Holdings
from service.sidecar.session import WorkerSession
from service.sidecar.session_settings import SessionSettings
from tests.cluster import LocalCluster, partly_served, slot_of
from tests.service.failover import TIMEOUT_S, copied, failed_over, on_dead, paced, restored
from tests.service.sidecar.procs import item, publish

pytestmark = pytest.mark.slow
TTL_MS = 30_000  # the lease's TTL: it lives through the test, so only the call's reach is measured
NOT_UTF8 = b"\xff\xfe"  # no UTF-8 text holds either byte (as test_stored_bytes_items writes it)


@pytest.fixture
def cluster() -> Iterator[LocalCluster]:
    """A cluster of the test's own: it kills a master and moves a slot for good."""
    with partly_served() as local:
        yield local


def _session(cluster: LocalCluster) -> tuple[WorkerSession, str]:
    """A session of worker ``w`` (one try a report) on a cluster client whose own map refresh is
    paced, and a schedule on the last master with items p#0 and q#0 queued for ``w``."""
    delivery = Delivery(
        connect(Settings(redis_url=cluster.url, redis_cluster=True, redis_timeout_s=TIMEOUT_S))
    )
    paced(delivery)
    sid = on_dead()
    publish(delivery, sid, {"w": [item("p", 0, 5), item("q", 0, 5)]}, lease_ttl_ms=TTL_MS)
    return WorkerSession(delivery, Holdings(2), SessionSettings("w", retry_for_s=0.0)), sid


def _fail_over(cluster: LocalCluster, delivery: Delivery, sid: str) -> None:
    """``sid``'s master killed and its slot failed over to another master with the schedule's keys as
    they are now (its replica's copy); the client's map still names the old master."""
    old = delivery.client.get_node_from_key(delivery.keys(sid).meta).port  # type: ignore[union-attr]
    live = [node.port for node in cluster.nodes if node.port != old]  # the first takes its slot
    keys = copied(old, slot_of(sid))
    next(node for node in cluster.nodes if node.port == old).kill()
    failed_over(live, {slot_of(sid)})
    restored(live[0], keys)


def _claimed_then_failed_over(
    cluster: LocalCluster, before: Callable[[Lease], object]
) -> tuple[WorkerSession, Held]:
    """A session that claimed p#0 of the last master's schedule; ``before`` run on its lease (on the
    old master), then that master failed over (``_fail_over``)."""
    session, sid = _session(cluster)
    (held,) = asyncio.run(session.claim(1))
    before(held.lease)
    _fail_over(cluster, session.delivery, sid)
    return session, held


def test_a_release_at_a_drain_after_a_failover_lands_at_the_new_master(cluster: LocalCluster) -> None:
    session, held = _claimed_then_failed_over(cluster, lambda _: None)
    dead = asyncio.run(session.release([held]))
    again = asyncio.run(session.claim(2))
    session.delivery.client.close()
    assert (dead, session.stats.released, session.stats.lost) == (0, 1, 0)
    assert [h.lease.key for h in again] == ["p#0", "q#0"]  # back at the head, at the new master


def test_a_release_sent_again_after_its_answer_was_lost_is_counted_released_not_lost(
    cluster: LocalCluster,
) -> None:
    """The release ran on the old master and was replicated (the copy), its answer lost with the
    master: the sidecar, still holding the lease, sends it again, to the new master."""
    session, held = _claimed_then_failed_over(cluster, lambda lease: _released_alone(cluster, lease))
    asyncio.run(session.release([held]))
    again = asyncio.run(session.claim(2))
    session.delivery.client.close()
    assert (session.stats.released, session.stats.lost) == (1, 0)
    assert [h.lease.key for h in again] == ["p#0", "q#0"]  # handed back once, at the head
    assert [h.lease.attempt for h in again] == [1, 1]  # one refund, not two


def _released_alone(cluster: LocalCluster, lease: Lease) -> None:
    """``lease`` released by a client of its own (the first try, whose answer the test drops)."""
    delivery = Delivery(connect(Settings(redis_url=cluster.url, redis_cluster=True)))
    delivery.release([lease])
    delivery.client.close()


def test_an_unreadable_items_failure_after_a_failover_lands_at_the_new_master(
    cluster: LocalCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """p#0's stored prompt is not UTF-8: the claim's failure report of it (``Claims._fail_unreadable``)
    is the first call after the failover, which comes between the claim's answer and the report (the
    claim's call fails the master over as it returns: real commands on the real cluster)."""
    session, sid = _session(cluster)
    delivery, prompts = session.delivery, session.delivery.keys(sid).prompts
    stored: dict[str, str] = delivery.client.hgetall(prompts)  # type: ignore[assignment]
    [(ref, payload)] = [(r, v) for r, v in stored.items() if "prompt p" in v]
    delivery.client.hset(prompts, ref, payload.encode().replace(b"prompt p", b"prompt " + NOT_UTF8))
    claim, calls = delivery.claim, list[list[Lease]]()

    def claim_then_fail_over(*args: Any, **kwargs: Any) -> list[Lease]:
        leases = claim(*args, **kwargs)
        if not calls:
            calls.append(leases)
            _fail_over(cluster, delivery, sid)
        return leases

    monkeypatch.setattr(delivery, "claim", claim_then_fail_over)
    got = asyncio.run(session.claim(2))
    delivery.client.close()
    assert [[lease.key for lease in leases] for leases in calls] == [["p#0", "q#0"]]
    assert [held.lease.key for held in got] == ["q#0"]
    assert (session.stats.failed, session.stats.lost) == (1, 0)
    assert len(session.resends) == 0  # no failure report kept unanswered, to be sent again
