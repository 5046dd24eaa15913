"""Calls of their own on one client (a sidecar's claims and reports: ``remap.remapped``) on a real
3-master Redis Cluster whose every master is stalled (SIGSTOPped: they accept and do not answer) ask
each other master at most once a window, not once a call.

Why. Each such call whose master did not answer asks another master about it (``CLUSTER SLOTS``); on a
stalled master each ask waits a socket timeout. The window that shares an ask (``RECENT_S``) ran from
the ask's start, so a call that met its master's silence while the ask was still waiting asked again,
and every call asked the masters the last call had just found silent: review54 measured a GET at a
0.25 s timeout 0.88 s alone and 1.39 s through ``remapped`` (at the sidecar's 5 s, ~10 s more a try of
every report in flight). Now the window runs from the ask's end (an ask under way is shared), and a
master found silent is not asked by the client's calls for a memory as long as a report's retry takes
to come back (``remap.silence_s``; a memory of the 0.1 s window had every retry of one report ask the
stalled masters again: cluster55), then asked again, or at once where it answers a call of its own, so
one that comes back is seen. The asks are counted as they are sent (``coverage.slots_of``, the one call
each ask makes of a master); the windows are set, never timed."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from redis.cluster import ClusterNode, RedisCluster

from service.delivery import Delivery, coverage, keys, remap
from service.delivery.errors import NODE_DOWN
from service.redis_conn import connect
from service.settings import Settings
from service.sidecar.outage_retry import LONGEST_PAUSE_S
from tests.cluster import LocalCluster, serve_the_rest
from tests.service.failover import TIMEOUT_S, answering, paced

pytestmark = pytest.mark.slow


class Stalled:
    """The service's client (its own refresh paced: ``paced``) on a cluster whose masters are all
    stalled, a key on each master (in the client's order of masters), and the asks sent so far."""

    def __init__(self, local: LocalCluster, monkeypatch: pytest.MonkeyPatch) -> None:
        settings = Settings(redis_url=local.url, redis_cluster=True, redis_timeout_s=TIMEOUT_S)
        self.client = paced(Delivery(connect(settings)))
        self.masters: list[str] = [node.name for node in self.client.get_primaries()]  # type: ignore[no-untyped-call]
        self.keys = [_key_on(self.client, master) for master in self.masters]
        self.asks: list[str] = []  # the masters asked, in order
        self.while_asking: list[str] = []  # keys called while the first ask waits
        self.failed_while_asking: list[str] = []  # those whose call failed as it should
        slots_of = coverage.slots_of

        def counted(client: RedisCluster, node: ClusterNode) -> Any:
            self.asks.append(str(node.name))
            if len(self.asks) == 1:
                for key in self.while_asking:
                    done = threading.Thread(target=self.call, args=(key, self.failed_while_asking))
                    done.start()
                    done.join()
            return slots_of(client, node)

        monkeypatch.setattr(coverage, "slots_of", counted)

    def call(self, key: str, failed: list[str] | None = None) -> None:
        """One call of its own on ``key`` (a GET through ``remapped``), which its stalled master and
        the silent cluster fail (``key`` then added to ``failed``)."""
        with pytest.raises(NODE_DOWN):
            remap.remapped(self.client, key, lambda: self.client.get(key))
        if failed is not None:
            failed.append(key)


@pytest.fixture
def stalled(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Stalled, LocalCluster]]:
    """A cluster of the test's own, every master stalled after the client read its map; they go on
    at the end."""
    with LocalCluster() as local:
        serve_the_rest(local)
        cluster = Stalled(local, monkeypatch)
        for node in local.nodes:
            node.signal(signal.SIGSTOP)
        try:
            yield cluster, local
        finally:
            for node in local.nodes:
                node.signal(signal.SIGCONT)
            cluster.client.close()


def test_a_call_made_while_an_ask_waits_on_stalled_masters_shares_it(
    stalled: tuple[Stalled, LocalCluster], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The window set to nothing: only the ask under way is shared. The second call on the same master
    fails while the first call's ask waits on its first stalled master, and asks no one."""
    cluster, _ = stalled
    monkeypatch.setattr(remap, "RECENT_S", 0.0)
    cluster.while_asking.append(cluster.keys[0])
    cluster.call(cluster.keys[0])
    assert cluster.failed_while_asking == cluster.keys[:1]
    assert cluster.asks == cluster.masters[1:]


def test_masters_found_silent_are_not_asked_by_the_clients_next_calls_in_the_window(
    stalled: tuple[Stalled, LocalCluster], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A call on each master in turn: the first asks the other two, which do not answer; the next
    calls' masters are all known silent (their own call, or that ask), so none is asked again."""
    cluster, _ = stalled
    monkeypatch.setattr(remap, "RECENT_S", 3600.0)
    monkeypatch.setattr(remap, "SILENT_PAUSE_S", 3600.0)
    for key in cluster.keys:
        cluster.call(key)
    assert cluster.asks == cluster.masters[1:]


def test_a_reports_retry_asks_no_master_its_last_try_found_silent(
    stalled: tuple[Stalled, LocalCluster], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The share window set to nothing, the silence remembered (as a retry comes back within
    ``silence_s``): the same call sent again, as its caller's retry sends it, asks no one, where the
    first try asked the other two masters, which did not answer."""
    cluster, _ = stalled
    monkeypatch.setattr(remap, "RECENT_S", 0.0)
    monkeypatch.setattr(remap, "SILENT_PAUSE_S", 3600.0)
    for _ in range(3):
        cluster.call(cluster.keys[0])
    assert cluster.asks == cluster.masters[1:]


def test_a_master_that_answers_a_call_of_its_own_is_asked_again_within_the_memory(
    stalled: tuple[Stalled, LocalCluster], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The last master goes on after the first call found it silent, and a call on a key of its own
    goes through: the next call on the first (still stalled) master asks it at once, though the
    memory of its silence is far from over, and it answers (no map read, the call's error raised)."""
    cluster, local = stalled
    monkeypatch.setattr(remap, "RECENT_S", 0.0)
    monkeypatch.setattr(remap, "SILENT_PAUSE_S", 3600.0)
    cluster.call(cluster.keys[0])
    first = list(cluster.asks)
    back = cluster.masters[-1]
    next(node for node in local.nodes if node.port == int(back.rsplit(":", 1)[1])).signal(signal.SIGCONT)
    answering(cluster.client, back)  # live again: its answer waited for, however late the host is
    assert (
        remap.remapped(cluster.client, cluster.keys[-1], lambda: cluster.client.get(cluster.keys[-1])) is None
    )
    kept = cluster.client.nodes_manager.nodes_cache
    cluster.call(cluster.keys[0])
    assert first == cluster.masters[1:]
    assert cluster.asks[len(first) :] == [back]
    assert cluster.client.nodes_manager.nodes_cache is kept


def test_a_stalled_master_back_is_asked_again_once_its_window_is_over(
    stalled: tuple[Stalled, LocalCluster], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The last master goes on after the first call found it silent; once the memory is over the next
    call asks it again (the other master, still stalled, may be asked first), and it answers: the
    key's slot still its stalled master's, no map read, the call's error raised."""
    cluster, local = stalled
    monkeypatch.setattr(remap, "RECENT_S", 3600.0)
    cluster.call(cluster.keys[0])
    first = list(cluster.asks)
    back = cluster.masters[-1]
    next(node for node in local.nodes if node.port == int(back.rsplit(":", 1)[1])).signal(signal.SIGCONT)
    answering(cluster.client, back)  # live again: its answer waited for, however late the host is
    monkeypatch.setattr(remap, "RECENT_S", 0.0)
    monkeypatch.setattr(remap, "SILENT_TIMEOUTS", 0.0)  # the memory of its silence over
    monkeypatch.setattr(remap, "SILENT_PAUSE_S", 0.0)
    kept = cluster.client.nodes_manager.nodes_cache
    cluster.call(cluster.keys[0])
    assert first == cluster.masters[1:]
    assert cluster.asks[len(first) :][-1:] == [back]
    assert cluster.client.nodes_manager.nodes_cache is kept


def _key_on(client: RedisCluster, master: str) -> str:
    """A schedule's meta key whose slot ``master`` serves in ``client``'s map."""
    return next(
        key
        for key in (keys.schedule_keys(f"s{n}").meta for n in range(100_000))
        if client.get_node_from_key(key).name == master  # type: ignore[no-untyped-call]
    )


def test_the_silence_memory_covers_a_reports_longest_pause() -> None:
    """``remap.silence_s`` counts the longest pause of a report's retry (the sidecar's
    ``OutageRetry``): a longer pause there would bring the retry back after the memory, to ask the
    stalled masters again."""
    assert remap.SILENT_PAUSE_S == LONGEST_PAUSE_S
