"""Under prefix affinity, an in-process sidecar finishes the group a dead worker started.

A worker ("ghost") claims part of its group and dies: no heartbeat, no completion. The live sidecar,
against real Redis and a real engine-sim server, reaps the lapsed leases when idle and, once the
ghost has abandoned its group (a lease TTL after its leases ended), steals what is left of it, all
of it. Every sample is accepted exactly once, and the ghost's late completions are refused.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from service.delivery import CompletionOutcome, LeaseSettings, PublishedSchedule
from service.delivery.protocol import Delivery
from service.sidecar.engine_client import EngineClient, EngineOptions
from service.sidecar.holdings import Holdings
from service.sidecar.runner import RunnerSettings, Sidecar
from service.sidecar.session import SessionSettings, WorkerSession
from tests.service.finished import RESULT
from tests.service.sidecar.procs import cluster, item, run_until, tally

TTL_MS = 500


@pytest.fixture
def engine_url(tmp_path: Path) -> Iterator[str]:
    with cluster(tmp_path) as procs:
        yield procs.engine_threads({"engine": 0.001})["engine"]


def _rescuer(redis_url: str, engine: str) -> Sidecar:
    session = WorkerSession(Delivery.from_url(redis_url), Holdings(8, None), SessionSettings("rescuer"))
    client = EngineClient.open(EngineOptions(engine))
    return Sidecar(session, client, RunnerSettings(idle_poll_s=0.02))


def test_a_live_sidecar_finishes_the_group_a_dead_worker_started(
    redis_client: redis.Redis, redis_url: str, engine_url: str
) -> None:
    delivery = Delivery.from_url(redis_url)
    group = [item("q", i, 50) for i in range(3)]
    lease = LeaseSettings(lease_ttl_ms=TTL_MS, max_attempts=5)
    queues = {"ghost": tuple(group), "rescuer": ()}
    delivery.publish(PublishedSchedule("dead", queues, lease=lease, prefix_affinity=True))
    ghost = delivery.claim("dead", "ghost", 2)  # q#0 and q#1 start on the ghost, which then dies
    stats = run_until(_rescuer(redis_url, engine_url), lambda: delivery.progress("dead").finished, 20.0)
    assert delivery.progress("dead").finished
    results = {r.key: r for r in delivery.read_results("dead", count=100)}
    assert {(k, r.worker_id, r.attempt) for k, r in results.items()} == {
        ("q#0", "rescuer", 2),
        ("q#1", "rescuer", 2),
        ("q#2", "rescuer", 1),
    }
    assert stats.stolen == 3
    late = [delivery.complete(lease, RESULT) for lease in ghost]
    assert late == [CompletionOutcome.STALE] * 2
    assert tally(delivery, "dead", {i.key for i in group}) == (0, 0)
