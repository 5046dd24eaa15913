"""A 10x slower worker does not set the makespan: idle sidecars steal its queued work.

Four real sidecar processes (two sequences in flight each) run equal queues on simulated engines,
one ten times slower. Without stealing the slow worker finishes last by far; with it, the makespan
stays near the ideal (total work over total speed from the cost model, but at least the one round
the slow worker starts before anyone can steal).
"""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest
import redis

from service.delivery.protocol import Delivery
from service.engine_sim.app import build_config
from tests.service.sidecar.procs import Cluster, cluster, item, publish, tally, wait_finished, warm_up

pytestmark = pytest.mark.slow

FAST, SLOW = 0.03, 0.3  # engine time scales: the slow worker's steps take 10x longer
WORKERS = {"w0": FAST, "w1": FAST, "w2": FAST, "w-slow": SLOW}
PER_WORKER, TOKENS, SLOTS = 12, 400, 2


def _round_s(time_scale: float) -> float:
    """Modelled seconds for one round of SLOTS items of TOKENS tokens on one engine."""
    cost = build_config("H100", time_scale=time_scale).cost
    prompt = 100
    steps = sum(cost.step_time(SLOTS, SLOTS * (prompt + i)) for i in range(TOKENS))
    return cost.prefill_time(prompt) * SLOTS + steps


def _run(procs: Cluster, urls: dict[str, str], redis_url: str, schedule_id: str, steal: bool) -> float:
    delivery = Delivery.from_url(redis_url)
    flags = ["--max-num-seqs", str(SLOTS), *([] if steal else ["--no-steal"])]
    sidecars = [procs.sidecar(w, urls[w], redis_url, *flags) for w in WORKERS]
    warm_up(delivery, list(WORKERS), tag=schedule_id)
    queues = {w: [item(f"{w}-{i}", 0, TOKENS) for i in range(PER_WORKER)] for w in WORKERS}
    start = time.monotonic()
    publish(delivery, schedule_id, queues)
    wait_finished(delivery, schedule_id, 60)
    makespan = time.monotonic() - start
    for sidecar in sidecars:
        sidecar.signal(signal.SIGTERM)
    for sidecar in sidecars:
        sidecar.stats()
    lost, twice = tally(delivery, schedule_id, {i.key for q in queues.values() for i in q})
    assert (lost, twice) == (0, 0)
    return makespan


def test_stealing_keeps_the_makespan_near_the_ideal_when_one_worker_is_10x_slower(
    redis_client: redis.Redis, redis_url: str, tmp_path: Path
) -> None:
    with cluster(tmp_path) as procs:
        urls = procs.engine_threads(WORKERS)
        without = _run(procs, urls, redis_url, "nosteal", steal=False)
        with_steal = _run(procs, urls, redis_url, "steal", steal=True)
    # Ideal: the fluid bound (total work over total speed), but never below the one round of items
    # the slow worker starts at once, which no steal can take back.
    rates = [SLOTS / _round_s(scale) for scale in WORKERS.values()]
    ideal = max(PER_WORKER * len(WORKERS) / sum(rates), _round_s(SLOW))
    slow_alone = PER_WORKER / SLOTS * _round_s(SLOW)
    print(
        f"makespan: ideal {ideal:.2f}s, with stealing {with_steal:.2f}s ({with_steal / ideal:.2f}x), "
        f"without {without:.2f}s ({without / ideal:.2f}x); slow worker's queue alone {slow_alone:.2f}s"
    )
    assert without >= slow_alone * 0.98  # the engine never runs faster than the model
    # at least halved: ~0.2x on an idle host; a loaded one slows the fast workers' loops, not the
    # slow engine's modelled sleeps (0.36x seen at a load average of 15 on 2 cores)
    assert with_steal <= 0.5 * without
    assert with_steal <= 2.0 * ideal
