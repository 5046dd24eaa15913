"""Errors of the delivery protocol, typed so the HTTP layer maps them to problem responses."""

from __future__ import annotations

import redis
from redis.exceptions import (
    AskError,
    ClusterDownError,
    ClusterError,
    RedisClusterException,
    RedisClusterUnreachableError,
    TryAgainError,
)

from scheduler.errors import InvalidInputError, SchedulerError

__all__ = [
    "NODE_DOWN",
    "OUT_OF_MEMORY",
    "REDIS_FAILED",
    "SLOT_NOT_SERVED",
    "InvalidInputError",
    "LateMarkError",
    "MarkLapsedError",
    "ScheduleConflictError",
    "ScheduleWithdrawnError",
    "UnknownScheduleError",
    "nothing_ran",
]


# "Redis did not do it": what every ``except`` on a path a Redis Cluster client can take catches. A
# cluster client raises its own errors, no ``RedisError``, when it cannot reach a command's node (a
# slot not covered during a reshard, ``SlotNotCoveredError``; no node to ask, its slot map being
# rebuilt): caught as ``RedisError`` alone, such an error escaped a take-back, a log-and-go-on, or a
# request's answer as a 500. The problem table answers both 503 (``service/problems/table.py``).
REDIS_FAILED: tuple[type[Exception], ...] = (redis.RedisError, RedisClusterException)
# A Redis Cluster's slot not served now, as a node answers it (CLUSTERDOWN as its master fails over,
# TRYAGAIN mid-reshard) or the cluster client finds it (``RedisClusterException``: its slot map short of
# the slot). The first two are ``ResponseError``s, so a catch of a script's error reply (a schedule
# damaged in Redis: logged as an error and skipped) took them for that; the last ended a walk over
# every schedule (a reaper pass, a heartbeat) at the first of that slot. It is an outage of that slot's
# schedules only: a walk skips them, goes on with the others, and tells the outage once it is over.
SLOT_NOT_SERVED: tuple[type[Exception], ...] = (ClusterDownError, TryAgainError, RedisClusterException)
# One node not answering, on a Redis Cluster (its process gone: connection refused, after the client's
# retries; or a timeout): its slots' keys fail, the other masters' answer (``reach.py``). On a single
# Redis the same errors are the whole server.
NODE_DOWN: tuple[type[Exception], ...] = (redis.ConnectionError, redis.TimeoutError)
# A node at its ``maxmemory`` (policy ``noeviction``, as deploy sets it) refusing a write that may grow
# it (ZADD, a script whose first write is one): nothing of that command ran, the node answers the
# rest (a ZREM, a read). One node's refusal, on a Redis Cluster: each master has its own memory, so
# a walk over nodes (``DeliveryIndexes._each_node``) sends the others' writes and raises it after
# them, as a node down's (ops67: it was raised at once, the nodes after it not sent).
OUT_OF_MEMORY: tuple[type[Exception], ...] = (redis.exceptions.OutOfMemoryError,)
# Redis's answers that a cluster client raises only once its own retries are spent: a TimeoutError is
# retried too (``RedisCluster.ERRORS_ALLOW_RETRY``), so the try before may have run the command, its
# answer lost (CLUSTERDOWN as a slot's master fails over, TRYAGAIN mid-reshard, a redirect too many).
CLUSTER_DOWN = "The cluster is down"  # a node's CLUSTERDOWN for every slot (its cluster_state fail)
_AFTER_RETRIES: tuple[type[Exception], ...] = (ClusterError, TryAgainError, AskError)


def nothing_ran(error: BaseException) -> bool:
    """Whether Redis answered ``error`` to the command itself, so none of it ran (a refusal: out of
    memory), and there is nothing to take back. A cluster client's CLUSTERDOWN or TRYAGAIN is such an
    answer too, but to its last try: told as a refusal, a mark or a step's entry an earlier try wrote
    was left to lapse, where a take-back of nothing would have written nothing."""
    return isinstance(error, redis.ResponseError) and not isinstance(error, _AFTER_RETRIES)


def cluster_down(error: BaseException) -> bool:
    """Whether ``error`` is, or was raised while handling, a node's "CLUSTERDOWN The cluster is down"
    (the cluster client raises its own "slots not covered" after it, the node's error its context)."""
    return any(CLUSTER_DOWN in str(refusal) for refusal in _refusals(error))


def whole_cluster_down(error: BaseException) -> bool:
    """Whether ``error`` says no key of the cluster is served now: a node's "The cluster is down"
    (``cluster_down``), or the client's own read of the map reaching no node
    (``RedisClusterUnreachableError``, which its retry raises in place of the master's
    ``ConnectionError`` once a refresh since reached none: every call on a dead cluster whose
    client's refresh was due). Taken for one key's or schedule's error, a pass (``unanswered.py``:
    flaky62) or a walk (``reach.py``: reach62) asked every other one, each failing the same."""
    return cluster_down(error) or isinstance(error, RedisClusterUnreachableError)


def not_served(error: BaseException) -> bool:
    """Whether a node answered ``error``'s call that its slot is not served (a ``ClusterDownError``
    under the client's own error, not the whole cluster down): what ``coverage.py`` tells ahead."""
    refusals = _refusals(error)
    return bool(refusals) and not any(CLUSTER_DOWN in str(refusal) for refusal in refusals)


def _refusals(error: BaseException) -> list[ClusterDownError]:
    """The ``ClusterDownError``s in ``error``'s chain: the client's error, the node's under it."""
    found: list[ClusterDownError] = []
    seen: BaseException | None = error
    for _ in range(4):  # a short chain
        if seen is None:
            break
        if isinstance(seen, ClusterDownError):
            found.append(seen)
        seen = seen.__cause__ or seen.__context__
    return found


class IndexNodeDown(redis.ConnectionError):
    """A node that did not answer (``NODE_DOWN``: its error the cause) while a stored schedule was announced
    (``DeliveryIndexes._announce``, ``doing`` says so) or a settled schedule was retired
    from the indexes (``DeliveryIndexes._retire``: the active and lapse indexes, its workers' inboxes,
    keys of other slots than the schedule's), after the schedule's own script had run and answered on
    its master. Raised as that node's, not the schedule's master's: a walk (``reach.Reach``: heartbeats,
    reaps) passed the schedule's master's other schedules over as down for the rest of it and counted it
    among the masters failed, and a call of its own (``remap.remapped``) spent an ask of another master,
    and its share of asks, on a master that had answered (review53b). A ``ConnectionError``: every retry
    and ``except`` of ``NODE_DOWN`` takes it as before. A settling script's caller does not meet it
    (``ScriptCalls._settled`` warns it and answers the script's reply: cluster55); a publish's announce
    and a cancel, each repaired by its own repeat, raise it."""

    def __init__(self, node: str, error: Exception, doing: str) -> None:
        self.node = node  # its name, host:port, as the cluster client's map names it
        super().__init__(f"node {node} did not answer {doing}: {error}")


def down_node(error: BaseException) -> str | None:
    """The node ``error`` says did not answer, where that is not the node of the key it was raised for
    (``IndexNodeDown``); None otherwise: the key's own master."""
    return error.node if isinstance(error, IndexNodeDown) else None


class UnknownScheduleError(SchedulerError, LookupError):
    """The schedule id was never published here, or its keys expired (retention passed)."""

    def __init__(self, schedule_id: str) -> None:
        self.schedule_id = schedule_id
        super().__init__(f"schedule_id={schedule_id!r}: unknown or expired schedule")


class ScheduleConflictError(SchedulerError):
    """A publish reused a schedule id that already holds a different schedule; nothing was written."""

    def __init__(self, schedule_id: str) -> None:
        self.schedule_id = schedule_id
        super().__init__(f"schedule_id={schedule_id!r}: already published with different content")


class ScheduleWithdrawnError(SchedulerError):
    """A publish under an id that a DELETE met before it was published (``P:withdrawn``): the trainer
    gave the step up while this request planned it; nothing was written."""

    def __init__(self, schedule_id: str) -> None:
        self.schedule_id = schedule_id
        super().__init__(f"schedule_id={schedule_id!r}: cancelled before it was published")


class LateMarkError(redis.TimeoutError):
    """A ``POST /schedule``'s in-flight mark was answered later than the service's command timeout
    after Redis wrote it, so its entry may have lapsed before the request could extend it (a DELETE
    meanwhile found the id free): the request answers 503, as for a Redis that did not answer."""

    def __init__(self, schedule_id: str) -> None:
        self.schedule_id = schedule_id
        super().__init__(f"schedule_id={schedule_id!r}: the in-flight mark's answer came too late")


class MarkLapsedError(SchedulerError):
    """A publish under a caller-chosen id whose request's in-flight mark ``P:planning`` no longer
    holds (lapsed while Redis failed its keeps, ``service/pipeline/in_flight.py``): a DELETE meanwhile
    found the id free (404) and its trainer may have given the step up, so nothing was written. The
    route answers 503, as for a mark lost at arrival: a retry under the id marks it again."""

    def __init__(self, schedule_id: str) -> None:
        self.schedule_id = schedule_id
        super().__init__(
            f"schedule_id={schedule_id!r}: the request's in-flight mark lapsed before it was published"
        )
