"""The retrain lock shared by replicas, and the fencing token each lock taken draws.

``keys.retrain_lock`` (``SET NX`` with ``RETRAIN_LOCK_TTL_S``, renewed while the fit runs and
released after it and when the replica stops, so a replica stopped or killed mid-retrain holds it
back a minute at most) allows one retrain at a time across replicas; a fit that finds it lost before
storing its version stores nothing, since another replica may have fitted newer actuals meanwhile.
Each lock taken draws a fencing token from ``keys.retrain_fence``, stored with the version: a fit
whose lock lapsed between that check and the rename lands a version of a lower token than the newer
one stored meanwhile, which no replica serves (``predictors.store``). The retrain that holds it is
``service.learning.retrain``'s.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable

from service.delivery import keys
from service.delivery.errors import REDIS_FAILED
from service.metrics import Metrics
from service.problems.table import ConflictError
from service.redis_conn import RedisClient

_RENEW = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('EXPIRE', KEYS[1], ARGV[2]) end
return 0
"""
# the next fencing token, past every token the store holds: a Redis that lost the counter (restarted
# without its AOF) would otherwise hand out tokens below the stored versions', superseding each new one
_NEXT_FENCE = """
local token = redis.call('INCR', KEYS[1])
local floor = tonumber(ARGV[1])
if token <= floor then token = floor + 1 redis.call('SET', KEYS[1], token) end
return token
"""
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


class RetrainLock:
    """This replica's hold on the shared retrain lock (module doc)."""

    def __init__(
        self,
        client: RedisClient,
        metrics: Metrics,
        prefix: str,
        say: Callable[..., None],
        halted: threading.Event,
    ) -> None:
        self._redis = client
        self._metrics = metrics
        self._say = say  # a retrain's line, unless the stop abandoned it (``Retrainer._say``)
        self._halted = halted  # the replica stops: the keeper renews no more
        self.key = keys.retrain_lock(prefix)
        self._fence_key = keys.retrain_fence(prefix)
        self._renew = client.register_script(_RENEW)
        self._next_fence = client.register_script(_NEXT_FENCE)
        self._release = client.register_script(_RELEASE)
        self._token: str | None = None  # the lock's owner token while this replica holds it
        self._unreleased: str | None = None  # a token whose release failed (Redis was down then)

    def take(self) -> str | None:
        """The lock's owner token, taken now; None while another replica holds it."""
        token = uuid.uuid4().hex
        if not self._redis.set(self.key, token, nx=True, ex=keys.RETRAIN_LOCK_TTL_S):
            return None
        self._token = token
        return token

    def next_fence_token(self, floor: int) -> int:
        """The fencing token for the lock just taken, above ``floor`` (the store's highest)."""
        return int(self._next_fence(keys=[self._fence_key], args=[floor]))

    def still_held(self, token: str) -> None:
        """``ConflictError`` unless this fit still holds the retrain lock, renewed by this check.

        The lock can lapse under a fit (Redis down or the process paused past its TTL, so renewals
        failed), and another replica then takes it and fits on newer actuals. Publishing anyway
        stored two versions out of order: the stale one, finishing last, got the higher number,
        and every replica served it. The check and the store's rename are not one atomic step: a
        fit paused between them still renames its version in, and the version's fencing token
        (taken with the lock, lower than the other replica's) makes every reader pass it over
        (``predictors.store``); checked again after the rename, this fit then takes it back."""
        if not self._renew(keys=[self.key], args=[token, keys.RETRAIN_LOCK_TTL_S]):
            self._metrics.retrains.labels("busy").inc()
            raise ConflictError(
                f"the retrain lock lapsed while this replica fitted (held past its "
                f"{keys.RETRAIN_LOCK_TTL_S} s without a renewal); another replica may have retrained "
                "on newer actuals since, so this fit was not stored",
                field="retrain_lock",
            )

    def keep(self, token: str, done: threading.Event) -> None:
        """Renew the lock every third of its TTL until ``done``: a short TTL frees it soon after a
        crash, renewal keeps it through a long fit. A lock found lost is said once; the fit goes on
        and is not stored (``still_held``)."""
        while not done.wait(keys.RETRAIN_LOCK_TTL_S / 3) and not self._halted.is_set():
            try:
                held = self._renew(keys=[self.key], args=[token, keys.RETRAIN_LOCK_TTL_S])
            except Exception as error:  # Redis down: the lock may lapse; the fit itself goes on
                self._say(
                    logging.WARNING,
                    "could not renew the retrain lock: %s",
                    brief(error),
                    exc_info=_unexpected(error),
                )
                continue
            if not held:
                self._say(
                    logging.WARNING, "the retrain lock lapsed during the fit: its version will not be stored"
                )
                return

    def release(self) -> None:
        """Give the retrain lock back if this replica holds it (after a fit, and at shutdown: a
        replica stopped mid-retrain must not block every other's for the lock's life)."""
        token, self._token = self._token, None
        if token is not None:
            try:
                self._release(keys=[self.key], args=[token])
            except Exception as error:  # Redis down: the lock expires by itself, or at our next attempt
                self._unreleased = token
                self._say(
                    logging.WARNING,
                    "could not release the retrain lock (it lapses by itself): %s",
                    brief(error),
                    exc_info=_unexpected(error),
                )

    def release_leftover(self) -> None:
        """Give back a lock whose release failed. A Redis restarted from its AOF keeps the lock for
        its whole TTL, and this replica's next boundary would find its own lock and skip the retrain
        as "running in another replica"."""
        token, self._unreleased = self._unreleased, None
        if token is not None:
            self._release(keys=[self.key], args=[token])


def brief(error: Exception) -> str:
    """The error as one line: its type and message."""
    return f"{type(error).__name__}: {error}"


def _unexpected(error: Exception) -> bool:
    """Whether a failure to keep or give back the lock deserves a traceback. A Redis error does not:
    an outage is an expected event there (the lock lapses by itself), and the client's internals,
    40 lines a failure, only buried the one thing an operator needs, which error it was. Anything
    else is a bug, and keeps its traceback."""
    return not isinstance(error, REDIS_FAILED)
