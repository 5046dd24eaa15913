"""Four long-predicted trajectories among 396 short ones on four H100s, as on math100, and two ways to
queue them: the long ones apart and the short ones crowded on one worker (``CROWDED``), or spread
evenly (``EVEN``).

The robust choice's tests and the judge's (its drawn finishes against a queue's estimate) plan this
batch; they share it here rather than through one test module's private names, so a change to the
batch reaches both.
"""

from __future__ import annotations

from scheduler.devices import device_profile, model_preset
from scheduler.policies.problem import Problem, build_problem
from scheduler.types import Inventory, PlanRequest, Trajectory, Worker

POOL = Inventory(tuple(Worker(f"h100-{i}", device_profile("H100")) for i in range(4)), model_preset("7b"))
LONG, SHORT = 4, 396  # as on math100: four long-predicted trajectories, the rest short


def long_and_short(short_spread: float) -> tuple[Trajectory, ...]:
    """Long ones predicted at 3,000 tokens, sure of it; short ones at 500, p90 at ``short_spread`` x."""
    long = [Trajectory(f"L{i}", 0, 300, 4_096, 3_000.0, {0.5: 3_000.0, 0.9: 3_100.0}) for i in range(LONG)]
    quantiles = {0.5: 500.0, 0.9: 500.0 * short_spread}
    short = [Trajectory(f"S{i}", 0, 300, 4_096, 500.0, quantiles) for i in range(SHORT)]
    return (*long, *short)


def problem_of(batch: tuple[Trajectory, ...]) -> Problem:
    """The planning problem of ``batch`` on ``POOL``, KV admission on."""
    return build_problem(PlanRequest(batch, POOL, kv_admission=True))


CROWDED = ((0, 1), (2,), (3,), tuple(range(LONG, LONG + SHORT)))  # the long ones apart, the rest on one
EVEN = tuple(tuple(range(w, LONG + SHORT, 4)) for w in range(4))  # a hundred each, long ones spread
