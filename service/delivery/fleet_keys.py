"""The service's own fleet-wide keys: its actuals log, the workers' profiles and learned speeds, the
retrain coordination and each step's parts; named, with their types and time-to-live, in the second
table of ``service/delivery/keys.py``, which re-exports every name here (callers import it from there).

A family apart from the delivery protocol's keys: no sidecar or Lua script of the protocol reads them,
and none lives in a schedule's hash slot. Each is touched by single-key commands or single-key scripts
(the actuals append script touches the stream and its ``seen`` zset, which share a hash slot), so they
work on Redis Cluster too. A key added here goes in keys.py's table and its re-exports.
"""

from __future__ import annotations

from service.delivery.key_prefix import DEFAULT_PREFIX

RETRAIN_LOCK_TTL_S = 60  # the retrain lock's life, renewed every third of it while the fit runs:
# a replica that dies mid-retrain holds it back at most this long (1M rows fit in ~30 s on 2 cores)


def actuals_stream(prefix: str = DEFAULT_PREFIX) -> str:
    """Stream of reported actuals, the predictor's training history (no TTL; length-capped)."""
    return f"{prefix}:actuals"


def actuals_seen(prefix: str = DEFAULT_PREFIX) -> str:
    """Zset: digest of each report the actuals stream holds -> its entry's ordinal (trimmed with it).

    Tagged ``{<prefix>:actuals}``: the stream's name has no braces, so it hashes on its whole name,
    and this key lands in its slot: the append script may touch both on Redis Cluster.
    """
    return f"{prefix}:actuals:seen:{{{actuals_stream(prefix)}}}"


def worker_profiles(prefix: str = DEFAULT_PREFIX) -> str:
    """Hash: worker id -> the profile it was last planned with, to compare its actuals against."""
    return f"{prefix}:workers"


def learned_speeds(prefix: str = DEFAULT_PREFIX) -> str:
    """Hash: worker id -> learned time scale (EWMA of log ratios), shared by every replica."""
    return f"{prefix}:speed"


def worker_seen(prefix: str = DEFAULT_PREFIX) -> str:
    """Zset: worker id -> when a publish last named it (ms); workers unnamed for the retention are
    dropped from it and from ``worker_profiles`` and ``learned_speeds`` (``service/speeds/learner.py``)."""
    return f"{prefix}:workers:seen"


def retrain_step(prefix: str = DEFAULT_PREFIX) -> str:
    """String: the last step an automatic retrain covered (replicas compare-and-set it)."""
    return f"{prefix}:retrain:step"


def retrain_lock(prefix: str = DEFAULT_PREFIX) -> str:
    """String: held with ``RETRAIN_LOCK_TTL_S`` while one replica retrains."""
    return f"{prefix}:retrain:lock"


def retrain_fence(prefix: str = DEFAULT_PREFIX) -> str:
    """String: a counter; each retrain takes the next value with the lock, its version's fencing token."""
    return f"{prefix}:retrain:fence"


def step_schedules(step: int | str, prefix: str = DEFAULT_PREFIX) -> str:
    """Set: the schedules published for ``step``, every part an asked-for retrain must see over."""
    return f"{prefix}:step:{step}"


def step_planning(step: int | str, prefix: str = DEFAULT_PREFIX) -> str:
    """Zset: ``step``'s requests that will publish, arrived and not ended (``<schedule_id> <request id>``
    -> deadline, Redis's clock): parts not yet in ``step_schedules`` or the active index (``step_part``)."""
    return f"{prefix}:step:{step}:planning"
