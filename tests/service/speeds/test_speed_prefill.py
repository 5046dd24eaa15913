"""A worker that runs exactly as the cost model says is learned at its true speed, long prompts and all.

Every prompt admitted into a running batch is prefilled before the next decode step, so it stalls
every sequence running then (the planner's simulator and ``engine-sim`` both do so). A report's
modelled time used to count its own prefill once: a batch with a few long prompts then read ~10%
slow (a live walk, engine-sim at time scale 0.2: 1.10x with one prompt in eight of 6,000 tokens,
1.04x with short prompts alone), and plans, which add those stalls themselves, counted them twice.
"""

from __future__ import annotations

import random
from typing import Any

from fastapi.testclient import TestClient

from scheduler.devices import device_profile, model_preset
from scheduler.simulator import simulate_worker
from scheduler.types import Trajectory, Worker
from tests.service.api_helpers import batch_body, played_report

TRUE_SCALE = 0.5


def _mean_in_flight(starts: tuple[float, ...], ends: tuple[float, ...], i: int) -> float:
    """Mean number of items running while item ``i`` ran (itself included): what a sidecar reports."""
    overlap = sum(max(0.0, min(e, ends[i]) - max(s, starts[i])) for s, e in zip(starts, ends, strict=True))
    return overlap / (ends[i] - starts[i])


def _reports_of_a_simulated_step(long_prompt_every: int) -> list[dict[str, Any]]:
    """Worker w0's reports of one step played by the planner's own simulator at ``TRUE_SCALE``:
    heavy-tailed outputs, and one prompt in ``long_prompt_every`` of 6,000 tokens."""
    rng = random.Random(0)
    items = [
        Trajectory(
            prompt_id=f"p{i}",
            sample_idx=0,
            prompt_tokens=6000 if i % long_prompt_every == 0 else 100 + rng.randrange(330),
            max_new_tokens=4096,
            predicted_tokens=min(4096, max(1, round(rng.lognormvariate(6.2, 1.0)))),
        )
        for i in range(160)
    ]
    worker = Worker("w0", device_profile("H100"), max_num_seqs=16, time_scale=TRUE_SCALE)
    run = simulate_worker(worker, model_preset("7b"), items)
    return [
        played_report(t, run.ends_s[i] - run.starts_s[i], _mean_in_flight(run.starts_s, run.ends_s, i))
        for i, t in enumerate(items)
    ]


def _learned(client: TestClient, reports: list[dict[str, Any]]) -> float:
    client.post("/schedule", json=batch_body(workers=2))  # the service learns w0's profile (H100)
    scale: float = client.post("/actuals", json={"actuals": reports}).json()["time_scales"]["w0"]
    return scale


def test_a_batch_with_long_prompts_is_learned_at_the_workers_true_speed(client: TestClient) -> None:
    learned = _learned(client, _reports_of_a_simulated_step(long_prompt_every=8))
    assert abs(learned / TRUE_SCALE - 1.0) < 0.02, learned  # counted once, each prefill read as slowness


def test_a_batch_of_short_prompts_is_learned_at_the_workers_true_speed(client: TestClient) -> None:
    learned = _learned(client, _reports_of_a_simulated_step(long_prompt_every=10**6))
    assert abs(learned / TRUE_SCALE - 1.0) < 0.02, learned
