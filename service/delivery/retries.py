"""The retries of every Redis client the service, its sidecars and its tools build (``short_retry``).

A module of its own, below ``service.delivery``'s package: ``redis_conn`` imports the package (its
errors), whose ``calls`` builds clients too (``Delivery.from_url``), so the policy could not live in
``redis_conn`` for both without an import cycle.
"""

from __future__ import annotations

from redis.backoff import ExponentialBackoff
from redis.retry import Retry


def short_retry() -> Retry:
    """Two retries, 40 and 80 ms apart (redis-py computes the first wait after one failure: base x 2).

    A cluster client given none keeps redis-py's own (ten, jittered, up to 1 s apart): a
    call to a master that is down (its connection refused) then failed after ~4 s (3.3-4.7 s measured:
    reaper49, review49b), paid once a walk (a sidecar's heartbeat, each claim, a reaper pass) before it
    went on with the other masters' schedules. Failover is not the retries' to wait out: each failed
    call asks the client for a new slot map, and the next call after a replica was promoted goes to it.
    (A plain client built from a URL without one retries nothing: redis-py's default applies to a
    client built from its arguments only.)"""
    return Retry(ExponentialBackoff(cap=0.2, base=0.02), retries=2)
