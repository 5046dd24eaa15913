"""End to end on real processes: plan, publish, 4 simulated engines with 4 sidecars, one killed mid-run.

The batch is planned by the core (``lpt`` over 2 H100 + 2 A100 workers) on noisy predicted lengths,
published with the delivery publisher, and run by ``rollout-scheduler sidecar`` processes against
``rollout-scheduler engine-sim`` processes that take each trajectory's true length from a trace file.
One sidecar is SIGKILLed once a quarter of the batch is done. Every trajectory must be accepted
exactly once, with the length the engine really generated.

Four workers, not eight: each worker is two processes (~1.4 CPU-s to start an engine-sim, ~1.7 a
sidecar with its run), and eight of each were a sixth of the sidecar tests' CPU (ci59b). Half the
batch keeps each worker at two rounds of its slots, so the kill still lands mid-run.
"""

from __future__ import annotations

import json
import random
import signal
from pathlib import Path

import pytest
import redis

from scheduler.devices import device_profile, model_preset
from scheduler.planner import plan
from scheduler.types import Inventory, PlanRequest, Trajectory, Worker
from service.delivery.protocol import Delivery
from service.delivery.publisher import publish_plan
from service.delivery.records import LeaseSettings
from service.engines import SERVICE_ENGINE
from tests.service.sidecar.procs import cluster, tally, wait_finished, wait_until, warm_up

pytestmark = pytest.mark.slow

PROMPTS, SAMPLES, CAP, SLOTS, TIME_SCALE = 16, 4, 6000, 8, 0.05
DEVICES = {f"h100-{i}": "H100" for i in range(2)} | {f"a100-{i}": "A100-80GB" for i in range(2)}


def _batch(trace: Path) -> tuple[list[Trajectory], dict[str, int]]:
    """Trajectories with noisy predictions, and their true lengths (also written as a trace)."""
    rng = random.Random(7)
    actual: dict[str, int] = {}
    trajectories = []
    with trace.open("w") as out:
        for p in range(PROMPTS):
            typical = rng.lognormvariate(6.3, 0.7)  # prompts differ: ~550 tokens median
            for s in range(SAMPLES):
                length = min(CAP, max(1, round(typical * rng.lognormvariate(0, 0.4))))
                row = {"step": 0, "prompt_id": f"p{p}", "sample_idx": s, "prompt_tokens": 200}
                out.write(json.dumps({**row, "output_tokens": length, "max_new_tokens": CAP}) + "\n")
                actual[f"p{p}#{s}"] = length
                trajectories.append(Trajectory(f"p{p}", s, 200, CAP, predicted_tokens=typical))
    return trajectories, actual


def test_four_sidecars_with_one_killed_complete_every_trajectory_exactly_once(
    redis_client: redis.Redis, redis_url: str, tmp_path: Path
) -> None:
    trajectories, actual = _batch(tmp_path / "truth.jsonl")
    workers = tuple(Worker(w, device_profile(d), max_num_seqs=SLOTS) for w, d in DEVICES.items())
    request = PlanRequest(tuple(trajectories), Inventory(workers, model_preset("7b")))
    planned = plan(request, "lpt")
    delivery = Delivery.from_url(redis_url)
    with cluster(tmp_path) as procs:
        specs = {w: (device, TIME_SCALE) for w, device in DEVICES.items()}
        urls = procs.engines(specs, "--trace", str(tmp_path / "truth.jsonl"), "--max-num-seqs", str(SLOTS))
        sidecars = {w: procs.sidecar(w, urls[w], redis_url, "--max-num-seqs", str(SLOTS)) for w in DEVICES}
        warm_up(delivery, list(DEVICES), tag="e2e")
        payloads = {f"p{p}": {"prompt": f"Solve problem {p}."} for p in range(PROMPTS)}
        publish_plan(
            delivery,
            "e2e",
            planned,
            trajectories,
            payloads,
            # 10 s: a heartbeat every 3.3 s leaves 6.7 s of slack; with 1 s leases (0.67 s) each
            # stall of a loaded host lapsed what a live sidecar held, and three lapses of one item
            # dead-letter it (failed 1). The victim's in-flight items are redelivered 10 s on.
            LeaseSettings(lease_ttl_ms=10_000),
            engine=SERVICE_ENGINE,
        )
        victim = max(planned.workers, key=lambda w: w.predicted_finish_s).worker_id

        def mid_run() -> bool:
            progress = delivery.progress("e2e")
            return progress.done >= len(trajectories) // 4 and progress.workers[victim].running > 0

        wait_until(mid_run, 60, "a quarter done with the victim running items")
        sidecars[victim].signal(signal.SIGKILL)
        wait_finished(delivery, "e2e", 90)
        for worker, sidecar in sidecars.items():
            if worker != victim:
                sidecar.signal(signal.SIGTERM)
        stats = {w: s.stats() for w, s in sidecars.items() if w != victim}
    progress = delivery.progress("e2e")
    results = delivery.read_results("e2e", count=10_000)
    assert (progress.done, progress.failed) == (len(trajectories), 0)
    assert {r.key: r.result.output_tokens for r in results} == actual
    assert any(r.attempt > 1 for r in results)  # the victim's in-flight items ran again elsewhere
    print({w: (s["accepted"], s["stolen"]) for w, s in stats.items()})
    lost, twice = tally(delivery, "e2e", set(actual))
    assert (lost, twice) == (0, 0)
