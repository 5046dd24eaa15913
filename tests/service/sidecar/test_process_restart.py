"""A real push sidecar SIGKILLed while it holds leases and restarted under the same worker id (a pod's
container restarted): the items come back at its start, not a lease TTL later, and run once.

valkey-server, engine-sim servers and two sidecar processes on loopback, with 30 s leases (the
default), so a step that waited for them to lapse would fail the test's bound.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest
import redis

from service.delivery.protocol import Delivery
from tests.service.sidecar.procs import cluster, item, publish, tally, wait_finished, wait_until

pytestmark = pytest.mark.slow
LEASE_TTL_MS = 30_000


def test_a_sigkilled_push_sidecar_restarted_under_its_worker_id_gets_its_leases_back_at_once(
    redis_client: redis.Redis, redis_url: str, tmp_path: Path
) -> None:
    delivery = Delivery.from_url(redis_url)
    items = [item("restart", i, 4000) for i in range(4)]  # ~40 s each on the first engine: still running
    with cluster(tmp_path) as procs:
        urls = procs.engine_threads({"slow": 1.0, "fast": 0.01})
        first = procs.sidecar("w0", urls["slow"], redis_url)
        publish(delivery, "restart", {"w0": items}, lease_ttl_ms=LEASE_TTL_MS)
        wait_until(lambda: delivery.progress("restart").running == 4, 30, "all four leased")
        first.signal(signal.SIGKILL)
        first.popen.wait()
        killed_at = time.monotonic()
        args = ["sidecar", "--worker-id", "w0", "--engine-url", urls["fast"], "--redis-url", redis_url]
        second = procs.spawn("sidecar-w0-restarted", [*args, "--idle-poll", "0.05"])
        # the restarted process's start (imports, on a loaded host) plus at most the dead one's presence
        wait_finished(delivery, "restart", LEASE_TTL_MS / 1000 / 2)
        back_s = time.monotonic() - killed_at
        second.signal(signal.SIGTERM)
        stats = second.stats()
    print(f"kill -> all four finished by the restarted process: {back_s:.1f} s (lease ttl 30 s)")
    assert back_s < LEASE_TTL_MS / 1000 / 2
    assert stats["reset"] == 4  # handed back by the restart, not lapsed
    assert "handed back 4 leases" in second.log.read_text()
    results = delivery.read_results("restart")
    assert {r.attempt for r in results} == {1}  # the killed process's attempts were refunded
    assert {r.worker_id for r in results} == {"w0"}
    assert tally(delivery, "restart", {i.key for i in items}) == (0, 0)
