"""Learned scales that differ only by measurement noise, planned as one scale.

Each worker's learned time scale is its own EWMA (``service/speeds.py``), so after the first actuals
every worker of a fleet of identical engines holds a slightly different one, and the planner, which
groups workers into kinds by identical coefficients (``scheduler.policies.problem.worker_kinds``),
saw one kind per worker: at 4,096 trajectories x 32 workers cpsat's plan went from 1.03x the lower
bound to 1.33x (it fell back to lpt), and at 16,384 x 128 planning took 2-3 s against a 1 s budget.
A plan gains nothing from a difference of a few percent that is noise, so workers of one profile
fingerprint whose learned log scales lie within ``SNAP_TOLERANCE`` of their group's centre are
planned with one scale, their group's geometric mean weighted by each one's reports; a worker
outside it (a straggler, a throttled GPU) keeps its own.

The tolerance is measured, not guessed: 8 identical engine-sim H100 engines (``SimulatedEngine``
in one process at time scale 0.02, 64 heavy-tailed trajectories each a step, each report's wall
time and mean concurrency taken as the sidecar takes them, each batch folded as the learner folds
it, 8 steps) gave one batch's log ratio a spread
of 0.03-0.05 (sd across workers), learned scales 0.01-0.04 apart (sd) and at most 0.07 from their
median. 0.15 is about four of the batch's sd: identical workers stay in their group through their
first, noisiest batches, and a worker 2x slow (0.69) is far outside it.

Stable from step to step without stored state: the centre is the weighted median (one noisy worker
does not move it, as it would a mean), so a worker changes group only when its own scale crosses the
tolerance: noise of a few hundredths does not do it to a worker of the fleet's speed, and a worker
that really runs ~16% off (on the boundary) is planned either with its own scale or with one ~16%
away, a plan's difference of the order of the noise. The groups are drawn one at a time, each around
the weighted median of the workers not yet grouped, so two real speed classes in one profile (half
the fleet throttled) plan as two kinds, and the result depends on neither the order of the workers
nor of the request. A group whose logs are all equal keeps that value exactly: grouping then changes
no plan.
"""

from __future__ import annotations

from collections.abc import Mapping

# How far (natural log) a learned scale may lie from its group's centre and still be planned with the
# group's scale: ~4x the sd of one batch's log ratio across identical workers (module docstring).
SNAP_TOLERANCE = 0.15


def snap(logs: Mapping[str, float], weights: Mapping[str, int]) -> dict[str, float]:
    """Worker -> its group's log scale, for each worker of ``logs`` (learned log scales of workers of
    one profile) in a group of two or more; a worker absent from the answer keeps its own. Groups are
    drawn around the weighted median of the workers left, one after another (module docstring)."""
    left = sorted(logs, key=lambda wid: (logs[wid], wid))
    grouped: dict[str, float] = {}
    while left:
        centre = _weighted_median([logs[wid] for wid in left], [max(1, weights[wid]) for wid in left])
        members = [wid for wid in left if abs(logs[wid] - centre) <= SNAP_TOLERANCE]
        left = [wid for wid in left if abs(logs[wid] - centre) > SNAP_TOLERANCE]
        if len(members) > 1:
            total = sum(max(1, weights[wid]) for wid in members)
            # offsets from the centre: equal logs give back exactly their value, not a rounding of it
            mean = centre + sum(max(1, weights[wid]) * (logs[wid] - centre) for wid in members) / total
            grouped.update(dict.fromkeys(members, mean))
    return grouped


def _weighted_median(values: list[float], weights: list[int]) -> float:
    """The first of ``values`` (sorted ascending) at which the running weight reaches half the total."""
    half, running = sum(weights) / 2.0, 0
    for value, weight in zip(values, weights, strict=True):
        running += weight
        if running >= half:
            return value
    return values[-1]
