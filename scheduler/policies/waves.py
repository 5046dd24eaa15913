"""A second start for ``lpt`` and ``cpsat`` where queues run in waves: the units dealt onto lanes.

LPT's load estimate (``scheduler.policies.load``) counts a worker's decode steps as the most of its
longest unit, its KV-token-steps over a full cache and its tokens over its slots. Past its slots a
queue runs in waves, and that estimate counts a second wave of equal items as a fraction of one
(17 items of one length on 16 slots: 1.06 waves, truly 2). With equal predictions (every job's first
step, where the fallback predictor gives every sample one length) LPT then over-fills the fast
workers or splits them badly, and planned slower than the length-blind shared queue.

The candidate here models each worker as its lanes (``least_loaded``'s model: its slot limit, or
fewer when the KV cache holds fewer sequences of the batch's mean context) and deals the units
longest first, each to the lane that frees first: a wave is counted whole. ``lpt.lpt_start`` orders
it like the LPT assignment and keeps whichever the worker model (``scheduler.finish``) finishes sooner.
"""

from __future__ import annotations

from collections.abc import Sequence

from scheduler.policies.least_loaded import deal_items, worker_lanes
from scheduler.policies.load import rates
from scheduler.policies.problem import Problem, longest_first


def lane_assignment(problem: Problem, assignment: Sequence[Sequence[int]]) -> list[list[int]] | None:
    """The units dealt longest first onto every worker's lanes, when ``assignment`` puts more units
    on some worker than it has slots; None where no queue runs past its slots (nothing to correct:
    the solver benchmark's batches never do), or under prefix affinity (a group holds several lanes,
    which the dealing does not model). Pins and KV fit hold: a unit only takes its allowed workers'
    lanes, and only active workers have lanes.

    Queues whose estimate the KV cache sets are left alone, within their slots or past them: the
    cache then sets the waves, LPT's KV term counts them, and the long chain-of-thought replay's every
    plan built the candidate and lost it (0.4 s a plan on the frozen clock)."""
    if len(problem.units) != len(problem.steps):
        return None  # groups: units of several trajectories
    if not any(_slots_bind(problem, w, assignment[w]) for w in problem.active):
        return None
    lanes = worker_lanes(problem)
    return deal_items(problem, lanes, problem.ranked or longest_first(problem.units))


def _slots_bind(problem: Problem, w: int, queue: Sequence[int]) -> bool:
    """Whether ``queue`` runs past ``w``'s slots with the estimate's slot term (decode tokens over
    slots, the one that counts waves as fractions) above its KV term: where a whole wave is missed."""
    if len(queue) <= problem.costs[w].max_num_seqs:
        return False
    r = rates(problem.costs[w])
    units = problem.units
    tokens = sum(units[u].tokens for u in queue)
    kv_steps = sum(units[u].kv_steps for u in queue)
    return tokens * r.per_slot >= kv_steps * r.per_full_cache
