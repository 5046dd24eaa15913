"""A poison trajectory: an item whose run kills its push sidecar every time (an OOM of the pod, a crash
on that input), with the sidecar restarted under its worker id after each death, as a pod's container
is. The restart hands back what its predecessor held (``takeover``) and refunded the attempt every
time, so the item came back for ever and the step never finished; now only its first hand-back is
free and it is dead-lettered after ``max_attempts``, saying why, while the other items run once.

valkey-server, an engine-sim thread and real sidecar processes, SIGKILLed by the test whenever the
poison item runs.
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
import redis

from service.delivery.keys import RESET_REFUNDS, schedule_keys
from service.delivery.protocol import Delivery
from service.delivery.records import LeaseSettings, PublishedSchedule
from tests.service.sidecar.procs import Proc, cluster, item, tally, wait_until

pytestmark = pytest.mark.slow
LEASE_TTL_MS = 30_000  # the default: nothing here waits for a lease to lapse
ATTEMPTS = 2
SID = "poison"


def _token(client: redis.Redis | redis.RedisCluster, key: str) -> tuple[str, str]:
    """The item's state and lease token, from its packed ``P:st`` record."""
    state, token, *_ = str(client.hget(schedule_keys(SID).st, key)).split("|")
    return state, token


def _kill_when_it_runs(delivery: Delivery, proc: Proc, key: str, before: str, done: int) -> str:
    """SIGKILL ``proc`` once it runs ``key`` under a lease other than ``before`` and ``done`` items
    are done (the short ones run beside it finished: the poison kills it while it generates, as an
    OOM late in a long output does); the new token."""
    client = delivery.client

    def running() -> bool:
        state, token = _token(client, key)
        return state == "r" and token != before and delivery.progress(SID).done == done

    wait_until(running, 60, "the poison runs alone")
    proc.signal(signal.SIGKILL)
    proc.popen.wait()
    return _token(client, key)[1]


def test_an_item_that_kills_its_sidecar_at_every_run_is_dead_lettered_after_max_attempts_not_looped(
    redis_client: redis.Redis, redis_url: str, tmp_path: Path
) -> None:
    delivery = Delivery.from_url(redis_url)
    poison = item("poison", 0, 4000)  # ~40 s on the engine: the test kills its sidecar before it ends
    others = [item("fine", i, 1) for i in range(3)]
    lease = LeaseSettings(lease_ttl_ms=LEASE_TTL_MS, max_attempts=ATTEMPTS)
    delivery.publish(PublishedSchedule(SID, queues={"w0": (poison, *others)}, lease=lease))
    deaths = ATTEMPTS + RESET_REFUNDS  # the refunded runs, then one per attempt
    with cluster(tmp_path) as procs:
        url = procs.engine_threads({"engine": 1.0})["engine"]
        args = ["sidecar", "--worker-id", "w0", "--engine-url", url, "--redis-url", redis_url]
        token = ""
        for death in range(deaths):
            sidecar = procs.spawn(f"sidecar-w0-{death}", [*args, "--idle-poll", "0.05"])
            token = _kill_when_it_runs(delivery, sidecar, poison.key, token, len(others))
        # refunded for ever, the poison would run here again and the step would never finish
        last = procs.spawn("sidecar-w0-last", [*args, "--idle-poll", "0.05"])
        wait_until(lambda: delivery.progress(SID).finished, 30, "the step finished")
        # the dead letter lands in Redis before the process counts it: a SIGTERM between loses the count
        wait_until(lambda: "handed back" in last.log.read_text(), 10, "the hand-back counted")
        last.signal(signal.SIGTERM)
        stats = last.stats()
    (dead,) = delivery.progress(SID).dead_letters
    print(f"poison dead-lettered after {deaths} sidecar deaths: {dead.reason}")
    assert (dead.key, dead.attempts) == (poison.key, ATTEMPTS)
    assert dead.reason == (
        f"its sidecar died holding it {deaths} times (handed back at each restart), after {ATTEMPTS} attempts"
    )
    assert stats["reset"] == 1  # the last process handed back the poison, dead-lettering it
    assert "1 dead-lettered" in last.log.read_text()
    assert tally(delivery, SID, {i.key for i in others}) == (0, 0)
    assert poison.key not in {r.key for r in delivery.read_results(SID)}
