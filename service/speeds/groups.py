"""Learned scales that differ only by measurement noise, planned as one scale.

Each worker's learned time scale is its own EWMA (``service/speeds/learner.py``), so after the first actuals
every worker of a fleet of identical engines holds a slightly different one. The planner copes with
that (``scheduler.policies.problem.worker_kinds`` groups speeds within 25% for its aggregate models
and keeps each worker's own speed where it estimates a finish), but a plan made on a noisy scale
is a plan made on a wrong one: a worker planned x% faster than it runs ends about x% late. So
workers of one profile fingerprint whose learned log scales lie within ``SNAP_TOLERANCE`` of their
group's centre are planned with one scale, their group's geometric mean weighted by each one's
reports (the noise averages out); a worker outside it (a straggler, a throttled GPU) keeps its own.

The tolerance trades the two errors, both measured. Noise: 8 identical engine-sim H100 engines
(``SimulatedEngine`` in one process at time scale 0.02 on a loaded 2-core host, 64 heavy-tailed
trajectories each a step, each report's wall time and mean concurrency taken as the sidecar takes
them, each batch folded as the learner folds it, 8 steps) gave learned scales 0.01-0.04 apart (sd)
and at most 0.07 from their median. A real difference grouped away: 4 of 32 workers of a 4,096 x 32
bench batch truly 5% / 10% / 15% slow, planned at the group's scale and played at their own, ran
the step 4.3-5.9% / 9.8-10.5% / 14.3-15.0% longer than planned at their own scales (which played
exactly as planned; two seeds, by /tmp/r27/snapcost.py, a script outside the repository). So the
tolerance is 0.05 (~5%): about 2.5 sd of the learned scales' noise, and a real difference it hides
costs at most ~5%. An earlier 0.15 hid differences up to 16%, which cost as much.

Stable from step to step without stored state: the centre is the weighted median (one noisy worker
does not move it, as it would a mean), so a worker changes group only when its own scale crosses the
tolerance; one that sits on the boundary is planned either with its own scale or with one ~5% away.
Groups split at the gaps wider than the tolerance in the sorted logs (no centre) flip less only by
hiding more: the tolerance then counts from the nearest neighbour, the edge of the noise's spread, so
a worker 7% slow beside 15 noisy peers was grouped 74% of steps (26% here) and flipped as often
(``docs/experiments.md``, "Learned speeds"). The groups are drawn one at a time, each around the
weighted median of the workers not yet grouped, so two real speed classes in one profile (half the
fleet throttled) plan as two kinds, and the result depends on neither the order of the workers nor
of the request. A group whose logs are all equal keeps that value exactly: grouping then changes no
plan.
"""

from __future__ import annotations

from collections.abc import Mapping

# How far (natural log) a learned scale may lie from its group's centre and still be planned with the
# group's scale: ~2.5 sd of learned scales' noise; a real difference it hides costs up to as much
# (module docstring).
SNAP_TOLERANCE = 0.05


def snap(logs: Mapping[str, float], weights: Mapping[str, int]) -> dict[str, float]:
    """Worker -> its group's log scale, for each worker of ``logs`` (learned log scales of workers of
    one profile) in a group of two or more; a worker absent from the answer keeps its own. Groups are
    drawn around the weighted median of the workers left, one after another (module docstring)."""
    return {wid: log for members, log in _groups(logs, weights) if len(members) > 1 for wid in members}


def majority(logs: Mapping[str, float], weights: Mapping[str, int]) -> float:
    """The log scale a worker not measured yet is planned with, beside measured ones (``logs``, with
    their report counts ``weights``): that of the group with the most workers, the scale most of them
    run at, rather than their mean, which one straggler pulls towards itself.

    A new worker is most likely like most of its peers: their mean, pulled 1.3-2% towards one GPU
    of 16 throttled to 1.3x and 22% towards one believed 20x slow, planned it that much slow; at 20x
    the step ran 1.2% longer (``docs/experiments.md``, "Learned speeds"). Ties go to the group with
    more reports, then to the one drawn first: the first is drawn around the weighted median of all,
    the next ones around those of the workers left, so the answer depends on neither the order nor
    the names of the workers. Of lone workers only (no two within noise), it is the weighted median."""
    ranked = [
        (len(members), sum(max(1, weights[wid]) for wid in members), -drawn, log)
        for drawn, (members, log) in enumerate(_groups(logs, weights))
    ]
    return max(ranked)[3]


def _groups(logs: Mapping[str, float], weights: Mapping[str, int]) -> list[tuple[list[str], float]]:
    """The groups of ``logs`` in the order they are drawn, each with its log scale: its members'
    mean weighted by reports (exactly their log when all are equal), a lone worker's own."""
    left = sorted(logs, key=lambda wid: (logs[wid], wid))
    groups: list[tuple[list[str], float]] = []
    while left:
        centre = _weighted_median([logs[wid] for wid in left], [max(1, weights[wid]) for wid in left])
        members = [wid for wid in left if abs(logs[wid] - centre) <= SNAP_TOLERANCE]
        left = [wid for wid in left if abs(logs[wid] - centre) > SNAP_TOLERANCE]
        total = sum(max(1, weights[wid]) for wid in members)
        # offsets from the centre: equal logs give back exactly their value, not a rounding of it
        mean = centre + sum(max(1, weights[wid]) * (logs[wid] - centre) for wid in members) / total
        groups.append((members, mean))
    return groups


def _weighted_median(values: list[float], weights: list[int]) -> float:
    """The first of ``values`` (sorted ascending) at which the running weight reaches half the total."""
    half, running = sum(weights) / 2.0, 0
    for value, weight in zip(values, weights, strict=True):
        running += weight
        if running >= half:
            return value
    return values[-1]
