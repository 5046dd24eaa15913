"""A ``Delivery`` as the service builds one on a test cluster, and a worker's inbox as its sidecar
reads it through a master outage: what the cluster announce and reaper tests (reannounce65's,
ops66's) each wrote out beside the other."""

from __future__ import annotations

from service.delivery import Delivery
from service.delivery.errors import REDIS_FAILED
from service.redis_conn import connect
from service.settings import Settings
from tests.cluster import LocalCluster


def service_delivery(cluster: LocalCluster) -> Delivery:
    """A ``Delivery`` on a client built as the service's (``short_retry``: a dead master fails a call
    in ~0.13 s, so a test sees an outage in its passes, not in retries)."""
    return Delivery(connect(Settings(redis_url=cluster.url, redis_cluster=True, redis_timeout_s=1.0)))


def inbox(delivery: Delivery, worker: str) -> list[str]:
    """The worker's inbox as its sidecar reads it; [] while its master does not answer."""
    try:
        return delivery.schedules_for(worker)
    except REDIS_FAILED:
        return []
