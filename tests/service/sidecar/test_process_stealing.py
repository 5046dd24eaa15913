"""A 40x slower worker does not set the makespan: idle sidecars steal its queued work.

Three real sidecar processes (two sequences in flight each) run equal queues on simulated engines,
one forty times slower. Without stealing the slow worker finishes last by far; with it, the makespan
stays near the ideal: perfect stealing, where the slow worker runs the share of the work that
finishes soonest (at least the one round it starts before anyone can steal) and the others the rest.
The speeds are the ones the engines achieved in the graded run itself (each item's engine time,
which leaves out the sidecars' claims and steals), not the cost model's: on a loaded host the fast
engines' short modelled steps stretch far more than the slow engine's long ones, so a modelled ideal
would grade the host's load, not the stealing; and speeds measured in the other run would grade how
the load changed in between.

The run without stealing is shorter than the graded one: two rounds a worker (``NO_STEAL_PER_WORKER``),
enough to show a ``--no-steal`` sidecar leaves a queued round alone and that the engine never runs
faster than the model. Without stealing the graded queues' makespan is at least the slow worker's own
twelve items at the model's speed (``slow_alone``), so stealing is held to half of that: the bound
the full run's measured makespan gave, less the host's stretch of the slow engine (ci65).
"""

from __future__ import annotations

import math
import signal
import statistics
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis

from service.delivery.protocol import Delivery
from service.engine_sim.app import build_config
from tests.service.sidecar.procs import Cluster, cluster, item, publish, tally, wait_finished, warm_up

pytestmark = pytest.mark.slow

# Engine time scales: the slow worker's steps take 40x longer, so its first round (3.7 s modelled)
# outlasts the fast workers' drain of the rest even on a loaded host. At 10x (0.93 s) a host at load
# ~24 had the fast sidecars still on their own queues when the slow one's first and second rounds
# ended: it ran 5 items for a best share of 2, a graded load, not a stealing fault.
FAST, SLOW = 0.03, 1.2
# Two thieves, not three: each run starts a sidecar process per worker (~1.5 CPU-s with its run), and
# two drain the rest (34 items) at about the share three had (46), 17 items a thief for 15 (ci59b).
WORKERS = {"w0": FAST, "w1": FAST, "w-slow": SLOW}
PER_WORKER, TOKENS, SLOTS = 12, 400, 2
# Without stealing, two rounds a worker: the slow worker's second round waits a whole slow round
# (3.7 s modelled) while the fast workers have idled since their ~0.1 s of work, so a sidecar that
# stole despite --no-steal takes it. Six rounds (the graded size) waited ~22 s for the same answer.
NO_STEAL_PER_WORKER = 2 * SLOTS


def _round_s(time_scale: float) -> float:
    """Modelled seconds for one round of SLOTS items of TOKENS tokens on one engine."""
    cost = build_config("H100", time_scale=time_scale).cost
    prompt = 100
    steps = sum(cost.step_time(SLOTS, SLOTS * (prompt + i)) for i in range(TOKENS))
    return cost.prefill_time(prompt) * SLOTS + steps


@dataclass(frozen=True)
class Run:
    """One schedule's timings on the Redis server's clock, from its publish."""

    finish_s: dict[str, float]  # worker -> when its last accepted result was written
    done: dict[str, int]  # worker -> how many of the accepted results were its
    engine_s: dict[str, list[float]]  # worker -> its items' engine times (request to reply)

    @property
    def makespan_s(self) -> float:
        return max(self.finish_s.values())


def _run(procs: Cluster, urls: dict[str, str], redis_url: str, schedule_id: str, steal: bool) -> Run:
    delivery = Delivery.from_url(redis_url)
    flags = ["--max-num-seqs", str(SLOTS), *([] if steal else ["--no-steal"])]
    sidecars = [procs.sidecar(w, urls[w], redis_url, *flags) for w in WORKERS]
    warm_up(delivery, list(WORKERS), tag=schedule_id)
    per_worker = PER_WORKER if steal else NO_STEAL_PER_WORKER
    queues = {w: [item(f"{w}-{i}", 0, TOKENS) for i in range(per_worker)] for w in WORKERS}
    published_ms = _server_ms(delivery)
    publish(delivery, schedule_id, queues)
    wait_finished(delivery, schedule_id, 60)
    for sidecar in sidecars:
        sidecar.signal(signal.SIGTERM)
    for sidecar in sidecars:
        sidecar.stats()
    lost, twice = tally(delivery, schedule_id, {i.key for q in queues.values() for i in q})
    assert (lost, twice) == (0, 0)
    return _timings(delivery, schedule_id, published_ms)


def _server_ms(delivery: Delivery) -> int:
    """The Redis server's clock, in ms: the one its result stream ids carry."""
    seconds, micros = delivery.client.time()
    return int(seconds) * 1000 + int(micros) // 1000


def _timings(delivery: Delivery, schedule_id: str, published_ms: int) -> Run:
    """Each worker's results: when its last was accepted (its stream id's ms, from the publish), how
    many it ran, and what each took on its engine."""
    finish: dict[str, float] = {}
    engine_s: dict[str, list[float]] = {}
    for record in delivery.read_results(schedule_id, count=1_000_000):
        at_s = (int(record.stream_id.split("-")[0]) - published_ms) / 1000
        finish[record.worker_id] = max(finish.get(record.worker_id, 0.0), at_s)
        engine_s.setdefault(record.worker_id, []).append(record.result.wall_time_s)
    return Run(finish, {w: len(times) for w, times in engine_s.items()}, engine_s)


def _ideal_s(run: Run, slow_items: int) -> float:
    """The makespan of perfect stealing at the speeds the engines achieved in ``run`` (``SLOTS``
    items per mean engine time of an item) when the slow worker runs ``slow_items`` of the work, in
    whole rounds, the fast workers the rest: it never hands back an item it started."""
    fast_rate = sum(SLOTS / statistics.fmean(run.engine_s[w]) for w in WORKERS if w != "w-slow")
    slow_rounds = math.ceil(slow_items / SLOTS) * statistics.fmean(run.engine_s["w-slow"])
    return max(slow_rounds, (PER_WORKER * len(WORKERS) - slow_items) / fast_rate)


def _best_slow_items(run: Run) -> int:
    """How much of the work the slow worker should run at ``run``'s speeds: at least its first round."""
    return min(range(SLOTS, PER_WORKER + 1, SLOTS), key=lambda n: _ideal_s(run, n))


def test_stealing_keeps_the_makespan_near_the_ideal_when_one_worker_is_40x_slower(
    redis_client: redis.Redis, redis_url: str, tmp_path: Path
) -> None:
    with cluster(tmp_path) as procs:
        urls = procs.engine_threads(WORKERS)
        alone = _run(procs, urls, redis_url, "nosteal", steal=False)
        stealing = _run(procs, urls, redis_url, "steal", steal=True)
    assert alone.done == dict.fromkeys(WORKERS, NO_STEAL_PER_WORKER)  # nobody stole
    without, with_steal, slow_items = alone.makespan_s, stealing.makespan_s, stealing.done["w-slow"]
    best, ideal = _best_slow_items(stealing), _ideal_s(stealing, slow_items)
    rates = [SLOTS / _round_s(scale) for scale in WORKERS.values()]  # for the log: what the model says
    modelled = max(PER_WORKER * len(WORKERS) / sum(rates), _round_s(SLOW))
    slow_alone = PER_WORKER / SLOTS * _round_s(SLOW)  # the graded queues' least makespan unstolen
    slow_alone_short = NO_STEAL_PER_WORKER / SLOTS * _round_s(SLOW)
    fast_round = statistics.fmean(t for w, sc in WORKERS.items() if sc == FAST for t in stealing.engine_s[w])
    print(
        f"makespan: ideal {ideal:.2f}s (modelled {modelled:.2f}s; a fast engine's item took "
        f"{fast_round:.3f}s, modelled {_round_s(FAST):.3f}s), with stealing "
        f"{with_steal:.2f}s ({with_steal / ideal:.2f}x); slow worker's queue alone {slow_alone:.2f}s "
        f"({with_steal / slow_alone:.2f}x); {NO_STEAL_PER_WORKER} items a worker without stealing "
        f"{without:.2f}s (modelled {slow_alone_short:.2f}s); items run with stealing {stealing.done} "
        f"(the slow worker's best share: {best})"
    )
    assert without >= slow_alone_short * 0.98  # the engine never runs faster than the model
    # Thieves took the slow worker's queue: it ran at most one round more than its best share, the
    # round it starts when its first ends before the others have drained its queue (at 10x, on a
    # loaded host, they often had not: that round doubled the makespan, 1.93 s for 0.96 s).
    assert slow_items <= best + SLOTS  # a sidecar that does not steal: 12 items for a best share of 2
    assert with_steal <= 2.0 * ideal  # and no worker idled while work was queued: ~1.05x when idle
    # at least halved against the queues run without stealing, whose makespan is at least the slow
    # worker's own queue at the model's speed (the engine is never faster: asserted above): ~0.2x on
    # an idle host; a loaded one slows the fast workers' loops, not the slow engine's modelled sleeps
    # (0.36x of the measured makespan without stealing seen at a load average of 15 on 2 cores)
    assert with_steal <= 0.5 * slow_alone
