"""The inbox's outage at its edges (``service/sidecar/inbox.py``; a real cluster, ``cluster-require-full-
coverage no``): a session whose known schedules are all gone meanwhile; a master that does not answer
at all (SIGSTOPped: it accepts and says nothing), whose background read is still under way as the
next claims come, or was cancelled with its event loop; a background read that fails again, or answers
an error that is no outage, or is never taken (the session ends); the first claim after the inbox
answers again; a known schedule a claim missed; and the whole cluster down.

test_cluster_inbox_down.py holds the outage's main line; these are the cases its three tests left
open (mutation testing of round 64's code, helper mutants65, docs/experiments.md).
"""

from __future__ import annotations

import asyncio
import gc
import logging
import signal
import time
from collections.abc import Iterator

import pytest
import redis
from redis.cluster import RedisCluster
from redis.crc import key_slot
from redis.exceptions import RedisClusterUnreachableError

from service.delivery import Delivery, keys
from service.delivery.retries import short_retry
from service.sidecar import inbox
from service.sidecar.holdings import Holdings
from service.sidecar.session import SessionSettings, WorkerSession
from tests.cluster import (
    LocalCluster,
    commands_sent,
    key_owner,
    partly_served,
    schedule_off,
    serve_everywhere,
    unserve_range,
)
from tests.service.sidecar.procs import InboxReads, item, publish

pytestmark = pytest.mark.slow
SOCKET_S = 1.0  # the session's socket timeout: what a silent master holds each read it answers not
# The socket timeout of the session under a silent master (SIGSTOPped): each read of it waits out three
# tries (``short_retry``), 1.5 s here, three reads in the test (3 s each at SOCKET_S); a claim that
# waited on one took 1.5 s, one that did not a few ms.
SILENT_S = 0.5


@pytest.fixture
def cluster() -> Iterator[LocalCluster]:
    """A cluster of the test's own: it kills or stops the inbox's master."""
    with partly_served() as local:
        yield local


def _session(cluster: LocalCluster, socket_s: float = SOCKET_S) -> WorkerSession:
    """Worker ``w``'s session on a client that retries as the sidecar's, a read timing out at ``socket_s``."""
    client = RedisCluster(
        startup_nodes=cluster.startup_nodes,
        decode_responses=True,
        retry=short_retry(),
        socket_timeout=socket_s,
    )
    return WorkerSession(InboxReads(client), Holdings(64), SessionSettings("w"))


def _known(
    cluster: LocalCluster, start: str, items: int, socket_s: float = SOCKET_S
) -> tuple[WorkerSession, str, int]:
    """A session (reads timing out at ``socket_s``) that knows one schedule of ``items`` items (not on
    the inbox's master), and that master's port."""
    port = key_owner(cluster, keys.inbox("w"))
    sid = schedule_off(cluster, start, port)
    publish(
        Delivery(cluster.client()), sid, {"w": [item(sid, i, 5) for i in range(items)]}, lease_ttl_ms=60_000
    )
    session = _session(cluster, socket_s)
    assert [info.schedule_id for info in asyncio.run(session.schedules())] == [sid]
    return session, sid, port


def test_a_claim_raises_the_inbox_masters_error_once_every_known_schedule_is_gone(
    cluster: LocalCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The inbox's master killed, the one known schedule's keys then deleted (as an expiry leaves it):
    the claim that finds it gone forgets it and leases nothing; the next knows nothing to walk, so it
    asks the inbox and raises its master's error (the runner's outage), as a session that never knew
    one does, rather than answering an empty claim while no schedule can be learned."""
    monkeypatch.setattr(inbox, "RETRY_S", 60.0)  # the inbox not asked again in the background meanwhile
    session, sid, port = _known(cluster, "g", 2)
    its_master = key_owner(cluster, keys.schedule_keys(sid).meta)
    next(node for node in cluster.nodes if node.port == port).kill()
    with redis.Redis(port=its_master) as owner:
        owner.delete(*owner.keys(f"{keys.schedule_keys(sid).base}:*"))
    assert asyncio.run(session.claim(1)) == []  # the inbox failed: the known walked, found gone
    with pytest.raises(redis.ConnectionError):
        asyncio.run(session.claim(1))


def test_claims_go_on_from_the_known_while_the_inbox_is_read_again_from_a_silent_master(
    cluster: LocalCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The inbox's master stopped: the first claim's read waits out the socket timeout, then walks
    the known; the next claims start the read again in the background and, in one event loop as the
    sidecar runs, lease from the known without waiting for it: each within one try of the read
    (``SILENT_S``; a claim that waited on the read, its three tries, took 1.5 s), while the read started
    by the first of them is still under way."""
    monkeypatch.setattr(inbox, "RETRY_S", 0.0)  # asked again at every claim's turn
    session, sid, port = _known(cluster, "q", 6, SILENT_S)
    node = next(node for node in cluster.nodes if node.port == port)
    node.signal(signal.SIGSTOP)

    async def claims() -> tuple[list[str], list[float]]:
        taken = [h.lease.key for h in await session.claim(1)]  # the read waited out, then the known
        took: list[float] = []
        for _ in range(3):
            began = time.monotonic()
            taken += [h.lease.key for h in await session.claim(1)]
            took.append(time.monotonic() - began)
        return taken, took

    try:
        taken, took = asyncio.run(claims())
        # that loop's end cancelled the read under way: a claim in another loop asks again, as
        # tests and one-shot callers drive a session (the sidecar runs one loop)
        taken += [h.lease.key for h in asyncio.run(session.claim(1))]
    finally:
        node.signal(signal.SIGCONT)
    assert taken == [f"{sid}#{i}" for i in range(5)]
    assert max(took) < SILENT_S, took  # the 0.5 s that SOCKET_S / 2 allowed a claim on a loaded host


def test_a_failed_background_read_is_asked_again_only_retry_s_later_and_told_once(
    cluster: LocalCluster, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The inbox's master killed, claims every 20 ms for 1.5 ``RETRY_S``: the inbox is read by the
    first claim, then once in the background ``RETRY_S`` later, which fails too and puts the next
    read ``RETRY_S`` after it, past the window; one warning for the whole outage. Asked at once after
    a failed background read, a master down cost a read at every claim turn again."""
    retry_s = 1.0
    monkeypatch.setattr(inbox, "RETRY_S", retry_s)
    session, _, port = _known(cluster, "r", 500)
    next(node for node in cluster.nodes if node.port == port).kill()
    assert isinstance(session.delivery, InboxReads)
    session.delivery.reads = 0
    caplog.set_level(logging.INFO, logger="service.sidecar")

    async def claims() -> int:
        began, taken = time.monotonic(), 0
        while time.monotonic() - began < 1.5 * retry_s:
            taken += len(await session.claim(1))
            await asyncio.sleep(0.02)
        return taken

    assert asyncio.run(claims()) > 2
    assert session.delivery.reads == 2
    ours = [r for r in caplog.records if r.name == "service.sidecar" and r.levelno >= logging.WARNING]
    assert [r.getMessage().split(" (")[0] for r in ours] == ["claims cannot read worker w's inbox"]


def test_an_error_of_the_background_read_that_is_no_outage_is_raised_by_the_claim(
    cluster: LocalCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The inbox's slot unserved, then served again holding a string (a bug's write): the read asked
    again in the background answers ``WRONGTYPE``, no slot or master down, and the claim that takes
    its answer raises it, as a claim whose own read met it does; not taken for the outage going on."""
    monkeypatch.setattr(inbox, "RETRY_S", 0.0)
    session, _, port = _known(cluster, "b", 50)
    slot = key_slot(keys.inbox("w").encode())
    unserve_range(cluster, range(slot, slot + 1))
    served = False

    async def claims() -> None:
        nonlocal served
        await session.claim(1)  # the inbox fails: the known walked
        serve_everywhere(cluster, slot, port)
        served = True
        cluster.client().set(keys.inbox("w"), "not a sorted set")
        for _ in range(200):  # until a claim takes the background read's answer
            await session.claim(1)
            await asyncio.sleep(0.05)

    try:
        with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
            asyncio.run(claims())
    finally:
        if not served:
            serve_everywhere(cluster, slot, port)


def test_once_the_inbox_answered_again_the_next_claim_reads_it_itself(
    cluster: LocalCluster, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The inbox's slot unserved, the one known item claimed; served again, claims (finding nothing)
    until one takes the background read's answer. Then a schedule is published, and the very next
    claim leases it: the outage is over, so that claim asked the inbox itself, not the known alone
    while another background read was under way."""
    monkeypatch.setattr(inbox, "RETRY_S", 0.0)
    session, sid, port = _known(cluster, "k", 1)
    slot = key_slot(keys.inbox("w").encode())
    unserve_range(cluster, range(slot, slot + 1))
    caplog.set_level(logging.INFO, logger="service.sidecar")
    served = False

    async def claims() -> tuple[list[str], list[str]]:
        nonlocal served
        first = [h.lease.key for h in await session.claim(1)]  # the inbox fails: the known walked
        serve_everywhere(cluster, slot, port)
        served = True
        for _ in range(200):  # until a claim took the background read's answer
            assert await session.claim(1) == []
            if "claims read worker w's inbox again" in caplog.text:
                break
            await asyncio.sleep(0.05)
        later = schedule_off(cluster, "l", port)
        publish(Delivery(cluster.client()), later, {"w": [item(later, 0, 5)]}, lease_ttl_ms=60_000)
        return first, [h.lease.key for h in await session.claim(1)]

    try:
        first, then = asyncio.run(claims())
    finally:
        if not served:
            serve_everywhere(cluster, slot, port)
    assert first == [f"{sid}#0"]
    assert [key.split("#")[0][0] for key in then] == ["l"]


def test_a_known_schedule_a_claim_missed_is_walked_after_the_others_while_the_inbox_is_down(
    cluster: LocalCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The inbox's master killed; two known schedules, the older on a master stopped for one claim,
    the younger on the third. That claim misses the older and leases the younger's first item; the
    master answering again, the next claim walks the older last, as the inbox's walk puts the
    schedules claims missed last (``known_order``): it leases the younger's second item. Walked
    first, a master that stays silent held every claim back by its timeout first."""
    monkeypatch.setattr(inbox, "RETRY_S", 60.0)
    port = key_owner(cluster, keys.inbox("w"))
    old = schedule_off(cluster, "o", port)
    its = key_owner(cluster, keys.schedule_keys(old).meta)
    young = next(
        f"y{i}"
        for i in range(10_000)
        if key_owner(cluster, keys.schedule_keys(f"y{i}").meta) not in (port, its)
    )
    delivery = Delivery(cluster.client())
    for sid in (old, young):  # published in this order: the inbox's order too
        publish(delivery, sid, {"w": [item(sid, i, 5) for i in range(3)]}, lease_ttl_ms=60_000)
        time.sleep(0.002)
    session = _session(cluster, socket_s=0.2)
    assert [info.schedule_id for info in asyncio.run(session.schedules())] == [old, young]
    next(node for node in cluster.nodes if node.port == port).kill()
    stopped = next(node for node in cluster.nodes if node.port == its)
    stopped.signal(signal.SIGSTOP)
    try:
        first = [h.lease.key for h in asyncio.run(session.claim(1))]
    finally:
        stopped.signal(signal.SIGCONT)
    second = [h.lease.key for h in asyncio.run(session.claim(1))]
    assert (first, second) == ([f"{young}#0"], [f"{young}#1"])


def test_a_claim_on_a_cluster_wholly_down_raises_at_the_inbox_read_and_asks_nothing_more(
    cluster: LocalCluster, caplog: pytest.LogCaptureFixture
) -> None:
    """Every master killed, the client's own map read due (as at every claim in production, the
    last a second or more before): the inbox's read raises ``RedisClusterUnreachableError``, the whole
    cluster down, and so does the claim, with that one command sent and no inbox outage told: every
    known schedule would fail the same, so none is asked (edges64 counted the same claim with the map
    read just now: there the inbox's error is one master's, and the known are walked)."""
    session, _, _ = _known(cluster, "d", 2)
    client = session.delivery.client
    assert isinstance(client, RedisCluster)
    client.nodes_manager._topology_refresh_min_interval = 0.0
    for node in cluster.nodes:
        node.kill()
    asked = commands_sent(client)
    caplog.set_level(logging.INFO, logger="service.sidecar")
    try:
        with pytest.raises(RedisClusterUnreachableError):
            asyncio.run(session.claim(1))
    finally:
        client.close()
    assert asked == ["ZRANGE"]
    assert "inbox" not in caplog.text


def test_a_failed_background_read_no_claim_came_for_leaves_no_unretrieved_error(
    cluster: LocalCluster, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The inbox's master killed; a claim starts the background read, which fails, and no claim
    comes after it (the session ends). Its error is retrieved as it fails: asyncio logs no "Task
    exception was never retrieved" when the session is dropped, a false alarm at every stop during
    an outage."""
    monkeypatch.setattr(inbox, "RETRY_S", 0.0)
    session, _, port = _known(cluster, "e", 4)
    next(node for node in cluster.nodes if node.port == port).kill()
    caplog.set_level(logging.ERROR, logger="asyncio")
    # the outage's warning is not logged: pytest keeps each record, whose error's frames hold the
    # session past the test
    monkeypatch.setattr(logging.getLogger("service.sidecar"), "disabled", True)

    async def claims(session: WorkerSession) -> None:
        await session.claim(1)  # the inbox fails: the known walked
        await session.claim(1)  # the read started again in the background
        for _ in range(500):  # until it failed too
            asking = session._inbox._asking
            if asking is None or asking.done():
                break
            await asyncio.sleep(0.01)

    asyncio.run(claims(session))
    del session
    gc.collect()
    assert "never retrieved" not in caplog.text
