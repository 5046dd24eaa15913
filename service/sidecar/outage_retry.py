"""A sidecar's reports to Redis, retried through a transient outage and told once per outage.

Every running item reports on its own (a completion, a failure, a release), so an outage meets many
calls at once, each retrying every 50 ms to 2 s. A warning per retry made a one-minute outage
hundreds of identical lines per worker, and a warning per call still wrote one per item in flight
(91 for a 1.5 s valkey restart beside 8 sidecars of 32 slots), with no line saying that they had
gone through. So the outage is one warning for all of them, and one line once a call goes through
again; every other failure is a debug line. Only idempotent calls are retried here: a report whose
reply was lost is sent again and answered as a repeat, never applied twice.

``TRANSIENT`` is "Redis is not serving this key now", whichever way a client learns it; each is safe to
send again, and none says that the reaper can reach the key's schedule (``resends.py`` does not age a
kept report on one). No answer, the command may have landed: ``ConnectionError``, ``TimeoutError``.
Refused, not run: ``BusyLoadingError`` (a server loading its data), and a cluster node's
``CLUSTERDOWN`` (``ClusterDownError``: no master serves the slot), ``TRYAGAIN`` (``TryAgainError``: a
slot mid-migration), and ``ClusterError`` itself (the client's redirections ran out, each one a
``MOVED``/``ASK`` that ran nothing). Not sent at all: a cluster client's own ``RedisClusterException``,
no ``RedisError``, raised before a byte of the command went out: its slot map has no node for the
key's slot (``SlotNotCoveredError``), no node answers (``RedisClusterUnreachableError``), or, a bare
one, the map it rebuilt after a ``CLUSTERDOWN`` is short of a slot ("All slots are not covered", what
a slot no master serves raises on a real cluster: ``test_cluster_unserved_reports.py``). Its other
bare uses refuse a command no cluster can route (keys of two slots): a bug the cluster tests of the
delivery scripts would show, retried here for nothing but harmless, as the report never ran. Left out,
a report that met a reshard was not retried, a resend counted it as Redis answering, and a heartbeat
raised it every beat.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import ParamSpec, TypeVar

import redis
from redis.exceptions import ClusterError, RedisClusterException, TryAgainError

log = logging.getLogger("service.sidecar")  # the session's logger: operators grep its lines there
P = ParamSpec("P")
T = TypeVar("T")
TRANSIENT: tuple[type[Exception], ...] = (  # the module docstring says why each
    redis.ConnectionError,
    redis.TimeoutError,
    redis.BusyLoadingError,
    ClusterError,  # and its ClusterDownError, MasterDownError
    TryAgainError,
    RedisClusterException,  # and its SlotNotCoveredError, RedisClusterUnreachableError
)
FIRST_PAUSE_S = 0.05  # the first retry's wait, doubled each time up to LONGEST_PAUSE_S
LONGEST_PAUSE_S = 2.0


@dataclass
class OutageRetry:
    """Retries of one session's reports; ``failing`` while an outage is on (its warning written)."""

    retry_for_s: float  # how long a call is retried before its error is raised
    failing: bool = False

    async def call(self, what: str, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """``fn`` on a worker thread, through transient Redis errors for up to ``retry_for_s``."""
        deadline = time.monotonic() + self.retry_for_s
        pause = FIRST_PAUSE_S
        while True:
            try:
                answer = await asyncio.to_thread(fn, *args, **kwargs)
            except TRANSIENT as exc:
                if time.monotonic() + pause > deadline:
                    raise
                self._report(what, exc)
                await asyncio.sleep(pause)
                pause = min(pause * 2, LONGEST_PAUSE_S)
                continue
            if self.failing:
                self.failing = False
                log.info("redis reachable again: reports go through (%s)", what)
            return answer

    def _report(self, what: str, exc: Exception) -> None:
        """A warning for the first failure of an outage, a debug line for each one after it."""
        level = logging.DEBUG if self.failing else logging.WARNING
        self.failing = True
        log.log(
            level, "redis unavailable during %s, retrying for up to %.0fs: %s", what, self.retry_for_s, exc
        )
