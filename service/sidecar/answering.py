"""Since when Redis has answered for a schedule: the clock a kept report ages on (``resends.py``).

A kept report is given up once Redis has answered for long enough that its lease must have lapsed
and been requeued: the service's reaper reaches its schedule each second. One Redis answers for all
of its schedules or for none, so any answer (a heartbeat, a refusal) started that clock for every
kept report. A Redis Cluster serves each schedule's hash slot (its keys' ``{schedule_id}`` tag,
``service/delivery/keys.py``) from the slot's own master, and one slot can go unserved while the
others answer (its master lost before a replica is promoted, a reshard, ``cluster-require-full-
coverage no``): the reaper cannot reach that schedule either, so a heartbeat through for the leases
of other slots says nothing of it. A kept result whose slot stayed unserved was given up ``lost``
two TTLs and two reaper passes after its keep, a result that would still have landed.

So the clock runs per answer domain: a cluster's hash slot, or the whole of a single Redis (one
domain, as before). Only an answer for a domain starts its clock; an outage stops it.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, field

from redis.cluster import RedisCluster
from redis.crc import key_slot

from service.delivery import keys
from service.delivery.protocol import Delivery

WHOLE = -1  # the one domain of a single Redis: every schedule answers with the others

Where = Callable[[str], Hashable]  # a schedule id's answer domain


def where_of(delivery: Delivery) -> Where:
    """Each schedule's answer domain on ``delivery``'s Redis: its slot on a cluster (the slot of its
    keys, whatever the prefix), ``WHOLE`` on a single Redis."""
    if not isinstance(getattr(delivery, "client", None), RedisCluster):
        return lambda schedule_id: WHOLE
    prefix = delivery.prefix
    return lambda schedule_id: key_slot(keys.schedule_keys(schedule_id, prefix).meta.encode())


@dataclass
class Answering:
    """Per domain, since when Redis has answered it unbroken (None: not since its last outage)."""

    where: Where
    _since: dict[Hashable, float | None] = field(default_factory=dict, init=False)
    # a domain not heard of since the session's start, or since a whole outage: answering from the
    # start (as a session assumes), or not until it answers
    _others: float | None = field(default=0.0, init=False)

    def since(self, schedule_id: str) -> float | None:
        """Since when Redis has answered for ``schedule_id``'s domain; None while it does not."""
        return self._since.get(self.where(schedule_id), self._others)

    def answered(self, schedule_ids: Iterable[str], now: float) -> None:
        """Redis answered for these schedules: their domains' clocks run from ``now`` unless they ran."""
        for domain in {self.where(sid) for sid in schedule_ids}:
            if self._since.get(domain, self._others) is None:
                self._since[domain] = now

    def unreachable(self, schedule_ids: Iterable[str]) -> None:
        """Redis did not answer for these schedules: their domains' clocks stop."""
        for sid in schedule_ids:
            self._since[self.where(sid)] = None

    def outage(self) -> None:
        """Redis did not answer, for all that tells (a heartbeat failed, one slot or all): every clock
        stops, and a domain not heard of runs only once it answers."""
        self._since.clear()
        self._others = None

    def covers(self, schedule_id: str, schedule_ids: Iterable[str]) -> bool:
        """Whether an answer for ``schedule_ids`` was one for ``schedule_id``'s domain too."""
        return self.where(schedule_id) in {self.where(sid) for sid in schedule_ids}
