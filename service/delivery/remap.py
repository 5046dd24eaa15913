"""A Redis Cluster's slot map read again by a pass over keys when a master did not answer, so the pass
reaches a failover's new master at once rather than at its next run: the step keeper's tick
(``unanswered.Unanswered``), and a sidecar's heartbeat walk and a reaper's pass (``reach.Reach``).

The client's own path reads the map again on a connection error, but at most once a second
(redis-py's ``topology_refresh_min_interval``). While a master is down and not yet failed over, the
process's other calls on it (requests, claims) read the map about once a second, the old master still
named; a call within the second after the failover then went to the old master on every try, its
refresh not due. The keeper's keeps waited a tick (15 s: cluster52), a heartbeat's extension a beat (a
third of the lease's TTL: a lease whose master took a beat or more to fail over lapsed under a live
worker, its trajectory given to another: review52c). So the first such failure of each master in a
pass has the map read now (``NodesManager.initialize``, redis-py's public refresh, the failed master
asked last), and where the key's slot has another master in it, the key is sent once more, there.

Once a master a pass: a master down and not failed over costs a pass one read of the map, not one a
key. A read that reaches no node is the whole cluster down (``unreachable``: the caller passes the rest
over). A read a node answers but that cannot be used (nodes that disagree, slots no master serves, a
user refused ``CLUSTER SLOTS`` or its login on every node) keeps the last map, and the key its error.
A refused login is no node down: no read (each would be refused alike). The read is a blocking call:
only passes on a thread of their own make it (a walk that ``learns``).

Another master is asked first (``coverage.named_elsewhere``: one ``CLUSTER SLOTS`` on its own client,
one socket timeout at most): the map is read only where one that answers names another master for the
key's slot, or none answers (the cluster down, for the read to tell). redis-py's read asks the nodes in
a random order, the failed one last: with two masters stalled (SIGSTOPped), each read waited on the
other one first in one pass of two, a socket timeout (cluster53, docs/experiments.md), and a stalled
master is seldom failed over yet. The ask passes over the masters failed in the pass, and one that does
not answer it is told to ``on_silent`` (the caller passes its keys over, unasked) and not asked again:
a stalled master costs a pass one ask's timeout at most, whichever read meets it first.

A sidecar's claims, completions, failure reports and releases are calls of their own, not a pass
(``remapped``): each retries itself (a report or release at 50 ms doubling, a claim at the next claim),
so the client's paced read held the first of them after a failover to the old master for up to its
second, and a retrying report for its next pause, up to 2 s (cluster53: the first one 0.46-0.82 s after
the failover, 0.16-0.21 s read so). Such a call asks another master only where no ask for that master on
its client is under way or ended in the last ``RECENT_S`` (the reports in flight during an outage, 32 a
sidecar, each retrying, share one ask in that time, not one each), and reads the map only where the ask
names a new master: a cluster none of whose masters answers is the call's own retries' to find. The
window runs from the ask's end, and the masters found silent on the client (a call's own master, or one
that did not answer an ask) are not asked by its calls for a while after: with every master
stalled, each ask waited a socket timeout per master asked, and the window counted from the ask's start
had the calls that waited behind it ask again, two timeouts more a call at three masters (review54: a
GET 0.88 s alone, 1.39 s so, at a 0.25 s timeout; ~10 s a try at the sidecar's 5 s). A silent
master is remembered longer than the share, though (``silence_s``): a report's retry comes back one
try later (~3.5 socket timeouts of the client's own retries) and a pause (up to 2 s), so a memory of
``RECENT_S``, or of one socket timeout, had every retry of one report ask the stalled masters again
(cluster55: at a 1 s timeout 5.13 s a try for 3.13, every try). It lasts six socket timeouts (the
rest of the ask that found it, and a try) and the longest pause, and ends at once for a master that
answers a call of its own on the client (its key's call went through): a master that comes back is
asked again at its first answer, or at the memory's end where no call goes to it (meanwhile the
client's paced read finds a failover).

A read that names a new master is an INFO line (the failed master, the new one, the key: a failover met,
once a pass or client, as later calls go to the new master); a read refused (nodes that disagree, a user
refused ``CLUSTER SLOTS``) a WARNING; a read that reaches no node a DEBUG line only: the callers tell a
whole cluster down once an outage (the sidecar's heartbeat, ``OutageRetry``), and a pass meets it at
every beat."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar
from weakref import WeakKeyDictionary

import redis
from redis.cluster import ClusterNode, RedisCluster
from redis.crc import key_slot
from redis.exceptions import (
    AuthenticationError,
    AuthorizationError,
    RedisClusterException,
    RedisClusterUnreachableError,
)

from service.delivery.coverage import named_elsewhere
from service.delivery.errors import NODE_DOWN, down_node

log = logging.getLogger(__name__)
T = TypeVar("T")
_REFUSED = (AuthenticationError, AuthorizationError)  # ``ConnectionError``s: credentials, not a node
RECENT_S = 0.1  # a call of its own trusts another's ask about a master on its client this long
SILENT_TIMEOUTS = 6.0  # a silence remembered this many socket timeouts: the rest of its ask, a try
SILENT_PAUSE_S = 2.0  # and the longest pause of a report's retry (sidecar OutageRetry's LONGEST_PAUSE_S)
ASKING = float("inf")  # an ask's end while it is under way: the calls meanwhile share it
_ASKED: WeakKeyDictionary[RedisCluster, dict[str, float]] = WeakKeyDictionary()  # master -> ask's end
_SILENT: WeakKeyDictionary[RedisCluster, dict[str, float]] = WeakKeyDictionary()  # master -> silent since
_ASKED_LOCK = threading.Lock()


@dataclass
class Remap:
    """One pass's reads of the map: the masters whose failure had it read, and a read that reached no
    node (its cluster down)."""

    client: redis.Redis | RedisCluster
    on_silent: Callable[[ClusterNode, Exception], None] | None = None  # a master that did not answer the ask
    alone: bool = False  # a call of its own (``remapped``), not a pass
    # the read reaching no node: the client's own error for it (``errors.whole_cluster_down``'s), as a
    # call's retry raises where its refresh was due; the master's error had its callers take one master's
    unreachable: Exception | None = field(default=None, init=False)
    _read: set[str] = field(default_factory=set, init=False)  # masters whose failure read the map
    _silent: set[str] = field(default_factory=set, init=False)  # masters that did not answer the ask

    def moved(self, key: str, error: Exception) -> bool:
        """Whether ``key``'s master, which did not answer (``error``: ``NODE_DOWN``), has been replaced
        in the map read again now: the caller sends the key once more, to its new master. The first
        failure of each master in the pass reads the map; the others, and a single Redis, never; nor
        an error of another node than the key's master (``errors.IndexNodeDown``: the key's master
        answered, so it has not failed over, and the other node is the client's own read's to find)."""
        client = self.client
        if not isinstance(client, RedisCluster) or not isinstance(error, NODE_DOWN):
            return False
        if isinstance(error, _REFUSED) or self.unreachable is not None or down_node(error) is not None:
            return False  # credentials, not a node; the cluster down; another node's (its master answered)
        node = _master(client, key)
        if node is None or node.name in self._read:
            return False
        old = str(node.name)
        self._read.add(old)
        if self.alone:
            _found_silent(client, old)
            if not _ask_due(client, old):
                return False
        try:
            asked = named_elsewhere(client, key_slot(key.encode()), node, self._unasked(), self._silenced)
        finally:
            if self.alone:
                _asked(client, old)
        if asked is False or (asked is None and self.alone):  # no failover known: nothing to read
            return False
        try:
            client.nodes_manager.initialize(last_failed_node_name=old)
        except RedisClusterUnreachableError as unreached:
            log.debug(  # the whole cluster down: its callers tell the outage once, this came every beat
                "master %s did not answer (%s) and no node answers a read of the map: %s",
                old,
                error,
                unreached,
            )
            self.unreachable = unreached
            return False
        except RedisClusterException as refused:  # nodes that disagree, slots uncovered, a refused user
            log.warning(
                "master %s did not answer (%s); the map not read again, the last kept: %s",
                old,
                error,
                refused,
            )
            return False
        new = _master(client, key)
        if new is None or new.name == old:
            return False
        log.info(
            "master %s did not answer (%s); the map read again names %s for %s: sent there",
            old,
            error,
            new.name,
            key,
        )
        return True

    def _unasked(self) -> set[str]:
        """The masters the ask passes over: those failed or silent in the pass, and for a call of its
        own those found silent on its client and not answering since (``_silent_now``; a pass tells
        each silent master to ``on_silent`` itself, so it asks them)."""
        unasked = self._read | self._silent
        if self.alone and isinstance(self.client, RedisCluster):
            return unasked | _silent_now(self.client)
        return unasked

    def _silenced(self, node: ClusterNode, error: Exception) -> None:
        """``node`` did not answer the ask: not asked again in the pass (nor, where it did not answer,
        by its client's calls of their own for ``silence_s``), and told to ``on_silent`` where it did not
        answer (``NODE_DOWN``; a refusal is no node down)."""
        self._silent.add(str(node.name))
        down = isinstance(error, NODE_DOWN)
        if down and self.alone and isinstance(self.client, RedisCluster) and not isinstance(error, _REFUSED):
            _found_silent(self.client, str(node.name))
        if self.on_silent is not None and down:
            self.on_silent(node, error)


def resent(key: str, send: Callable[[], T], moved: Callable[[str, Exception], bool]) -> T:
    """``send()``, a call on ``key``; where its master did not answer and ``moved`` says its slot has
    a new master now, once more (to that one): its error raised otherwise, for the caller to record.
    Sent again only to another master: the call on the old one did not run, or ran on a node whose
    writes the failover dropped; every call sent so is one a pass would send again at its next run."""
    try:
        return send()
    except NODE_DOWN as error:
        if not moved(key, error):
            raise
    return send()


def remapped(client: redis.Redis | RedisCluster, key: str, send: Callable[[], T]) -> T:
    """``send()``, a call of its own on ``key`` (a sidecar's claim, completion, failure report or release,
    each retried by its caller); where its master did not answer and another master names a new one for its
    slot, the map read and the call sent once more, there (``resent``; the module doc says why, and
    why such calls share one ask of a master in ``RECENT_S``). A blocking call: run it on a thread."""
    answer = resent(key, send, Remap(client, alone=True).moved)
    if isinstance(client, RedisCluster):
        _answered(client, key)
    return answer


def _ask_due(client: RedisCluster, master: str) -> bool:
    """Whether a call of its own asks another master about ``master`` now: no ask about it under way
    on ``client``, nor ended in the last ``RECENT_S`` (then this one is taken as under way: ``_asked``
    ends it)."""
    with _ASKED_LOCK:
        asked = _ASKED.setdefault(client, {})
        end = asked.get(master)
        if end is not None and time.monotonic() - end < RECENT_S:
            return False
        asked[master] = ASKING
        return True


def _asked(client: RedisCluster, master: str) -> None:
    """The ask about ``master`` on ``client`` has ended: the window starts now, so the calls that
    waited behind a slow ask share it rather than ask again."""
    with _ASKED_LOCK:
        _ASKED.setdefault(client, {})[master] = time.monotonic()


def _found_silent(client: RedisCluster, master: str) -> None:
    """``master`` did not answer a call on ``client`` (its own, or an ask) just now."""
    with _ASKED_LOCK:
        _SILENT.setdefault(client, {})[master] = time.monotonic()


def _answered(client: RedisCluster, key: str) -> None:
    """A call of its own on ``key`` went through: its master (the map's now, where a redirect moved
    it) answers, so it is no longer taken for silent (asked again by the next call's ask)."""
    if not _SILENT.get(client):  # nothing silent: the common case takes no lock
        return
    node = _master(client, key)
    if node is not None:
        with _ASKED_LOCK:
            _SILENT.get(client, {}).pop(str(node.name), None)


def silence_s(client: RedisCluster) -> float:
    """How long a master found silent on ``client`` is passed over by its calls' asks unless it
    answers one of their calls first: ``SILENT_TIMEOUTS`` socket timeouts and ``SILENT_PAUSE_S``, the
    time a report's retry takes to come back (the module doc); ``RECENT_S`` for a client without a
    socket timeout (a stalled master then holds its calls for good: no retry comes back)."""
    timeout = client.nodes_manager.connection_kwargs.get("socket_timeout")
    if not timeout:
        return RECENT_S
    return max(RECENT_S, SILENT_TIMEOUTS * float(timeout) + SILENT_PAUSE_S)


def _silent_now(client: RedisCluster) -> set[str]:
    """The masters found silent on ``client`` in the last ``silence_s`` that none of its calls found
    answering since: its calls of their own do not ask them (one socket timeout each a memory, not one
    a call or a retry)."""
    now, memory = time.monotonic(), silence_s(client)
    with _ASKED_LOCK:
        return {master for master, since in _SILENT.get(client, {}).items() if now - since < memory}


def _master(client: RedisCluster, key: str) -> ClusterNode | None:
    """The master the client's map sends ``key`` to; None where it has none."""
    try:
        node: ClusterNode | None = client.get_node_from_key(key)  # type: ignore[no-untyped-call]
    except RedisClusterException:  # its slot map short of the slot
        return None
    return node
