"""The plateau pass offers an idle worker of the smallest cache a unit its cache holds.

``plateau``'s module doc: where caches differ, a worker of the smallest cache is offered only units no
longer than its own longest, since a longer one makes it cache-bound at once. An idle one has no
longest: ``_Pass.edge`` read it as 0 (``max(..., default=0)``), so it was offered nothing, and a pass
whose only earlier worker is such a one kept nothing, though one unit of 2,100 tokens fits its 40,000
(review67). Now no edge is kept for a worker whose queue is empty; this test failed before that.
"""

from __future__ import annotations

import math

from scheduler.devices import device_profile, model_preset
from scheduler.policies.plateau import lower
from scheduler.policies.problem import build_problem
from scheduler.types import Inventory, PlanRequest, Trajectory, Worker


def test_an_idle_worker_of_the_smallest_cache_takes_a_unit_its_cache_holds() -> None:
    small = Worker("w1", device_profile("H100"), max_num_seqs=64, kv_capacity_tokens=40_000)
    workers = (Worker("w0", device_profile("H100"), max_num_seqs=64), small)
    units = tuple(Trajectory(f"p{i}", 0, 100, 8_000, 2_000.0) for i in range(40))
    problem = build_problem(PlanRequest(units, Inventory(workers, model_preset("7b"))))
    queues: tuple[tuple[int, ...], ...] = (tuple(range(40)), ())  # w1 idle, w0 decides the makespan
    finishes = problem.finishes(queues, reserve=False)
    lowered = lower(problem, queues, finishes, False, math.inf)
    assert lowered is not None
    assert len(lowered[0][1]) >= 1
    assert max(lowered[1]) < max(finishes)
