"""The physical lower bound of a batch on an inventory: no schedule, however clever, finishes sooner.

Four limits, each a relaxation of the real engine, and the bound is their maximum:

(a) ``longest_s``: some trajectory must run all its decode steps one after another; alone on the
    fastest worker allowed to hold it, that takes ``prefill(p) + sum_k step(1, p + k)``.
(b) ``throughput_s``: every decode token must be produced, and no worker makes more than
    ``peak_tps`` (all slots busy, nothing in the KV cache) tokens per second.
(c) ``kv_s``: at each decode step a sequence holds ``p + k`` tokens of KV cache, so it consumes
    ``p * L + L * (L - 1) / 2`` KV-token-steps; a worker supplies at most ``kv_token_steps_per_s``
    of them (its KV cache full, one step per step time at full KV).

(d) ``tail_s``: (c) assumes every worker keeps its cache full, but a worker that runs a trajectory of
    ``L`` steps runs at least ``L`` steps, each reading its weights, so it serves at most
    ``(T - L * step) / per_token`` KV-token-steps by time ``T`` (less while its cache fills, and
    less its prefill). Which workers host which lengths is then a covering question
    (``scheduler.tailbound``): a fluid cover with every trajectory its own length, solved exactly by
    a dynamic programme over worker counts, checked by a band cover that keeps trajectories whole.
    The largest ``T`` at which either proves no cover exists is a bound. On heavy-tailed batches
    where every worker must host a long trajectory this is the binding limit, 32-44% above (c) on the
    solver benchmark's 4,096 x 32 batches (docs/solver.md, "The lower bound").
    Under prefix affinity the cover's units are groups, each at its longest member's length.
    With a time scale per worker the fluid cover ranks each family's workers by speed, each credited
    near its own (``_families``, ``scheduler.tailcover``); (b) and (c) sum every worker's own rate.

Each limit is an upper bound on a rate or a lower bound on a chain, so the maximum never exceeds the
makespan of any feasible schedule (tests check it against the simulator). For long chain-of-thought
batches (c) usually binds: the KV cache, not the FLOPs, limits how many long sequences run at once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeVar

import numpy as np

from scheduler import batch_columns, giveup
from scheduler.batch_columns import BatchColumns
from scheduler.costmodel import WorkerCost, speed_clusters, worker_cost
from scheduler.stepsum import FloatArray, solo_decode_times
from scheduler.tailbound import PRECISION, tail_bound
from scheduler.tailcover import IntArray
from scheduler.types import Inventory, Trajectory

BOUND_TOLERANCE = 0.1  # time scales within 10% of a kind's fastest share its kind in the bound
RANK_TOLERANCE = 0.01  # (d)'s fluid cover: speed groups within a family, each at its fastest's scale
Values = TypeVar("Values", IntArray, FloatArray)


@dataclass(frozen=True, slots=True)
class LowerBound:
    """The four limits and the bound they give, in seconds."""

    longest_s: float  # (a) the longest trajectory (with affinity: heaviest group) alone on its best worker
    throughput_s: float  # (b) all decode tokens at the aggregate peak token rate
    kv_s: float  # (c) all KV-token-steps at the aggregate KV-token-step rate
    tail_s: float  # (d) (c) refined: workers that run long trajectories cannot keep their cache full
    value_s: float  # max of the four: the bound reported with every plan


def lower_bound(
    trajectories: Sequence[Trajectory],
    inventory: Inventory,
    excluded: frozenset[str] = frozenset(),
    prefix_affinity: bool = False,
    grid: int = 0,
    precision: float = PRECISION,
    deadline: float | None = None,
    fluid_deadline: float | None = None,
    columns: BatchColumns | None = None,
) -> LowerBound:
    """Compute the bound of ``trajectories`` on the non-excluded workers of ``inventory``.

    Plans report the defaults. ``grid`` > 0 adds length bands to (d)'s whole-trajectory check and a
    finer ``precision`` tightens its search (``scheduler.tailbound``): the benchmark's refined bound.
    Past ``deadline`` (``scheduler.clock.now()``) that check stops probing and (d) is what it proved
    by then: still a bound, maybe a looser one (how the planner keeps the bound to a share of a short
    budget); past ``fluid_deadline`` so does the fluid cover's search before it.

    With ``prefix_affinity`` a group's samples share one worker, so (a) also covers the heaviest group
    alone on its fastest allowed worker, and (d) covers whole groups. Expects a validated batch (see
    ``scheduler.validation``). ``columns``: the batch's (``scheduler.batch_columns``) where the caller
    holds them (the planner's, built beside its problem: ``problem_and_bound_columns``), else they
    are read from ``trajectories``.
    """
    workers = [w for w in inventory.workers if w.worker_id not in excluded]
    costs = [worker_cost(w, inventory.model) for w in workers]
    prompts, steps, need = batch_columns.from_trajectories(trajectories) if columns is None else columns
    giveup.check()  # each pass over the batch ~1.6 ms at 32,768, limit (a) 4.3 ms (deadline49)
    outputs = steps.astype(np.float64)
    longest = _longest(trajectories, costs, prompts, outputs, need)
    giveup.check()  # the caller's hard deadline between the limits' passes over the batch (deadline48)
    per_trajectory = prompts * outputs + outputs * (outputs - 1.0) / 2.0
    groups = _group_index(trajectories) if prefix_affinity else None
    if groups is not None:
        heaviest = _heaviest_group(trajectories, groups, costs, prompts, outputs, need, per_trajectory)
        longest = max(longest, heaviest)
    throughput = float(outputs.sum()) / sum(c.peak_tps() for c in costs)
    kv = float(per_trajectory.sum()) / sum(c.kv_token_steps_per_s() for c in costs)
    known = max(longest, throughput, kv)
    kinds = [(members[0], len(members)) for members in _kinds(costs)]
    units: tuple[IntArray, FloatArray, FloatArray] = (steps, per_trajectory, prompts)
    if groups is not None:  # (d) by whole groups: heads stay the single prompts
        units = (_group_max(groups, steps), _group_sum(groups, per_trajectory), _group_sum(groups, prompts))
    ranked = [[(g[0], len(g)) for g in groups] for groups in _families(costs, RANK_TOLERANCE)]
    giveup.check()
    tail = tail_bound(*units, kinds, known, grid, precision, deadline, fluid_deadline, prompts, ranked)
    return LowerBound(longest, throughput, kv, tail, max(known, tail))


def _group_index(trajectories: Sequence[Trajectory]) -> IntArray:
    """Each trajectory's prefix-sharing group, numbered in order of first member.

    Under prefix affinity a group's units for limit (d) are its longest member's steps and its
    members' KV-token-steps and prompts summed (``_group_max``, ``_group_sum``). A worker that hosts a
    group hosts all of it, so it runs at least the longest member's steps and serves every member's
    demand: the cover's argument holds with groups for trajectories, and it charges a hard group's
    whole area at its longest member's length, where the cover by trajectory let the shorter
    samples fill other workers' short tails (6.5-7.8% higher on the benchmark's batches).
    """
    numbers: dict[str, int] = {}
    return np.fromiter(
        (numbers.setdefault(t.group, len(numbers)) for t in trajectories),
        dtype=np.int64,
        count=len(trajectories),
    )


def _group_max(groups: IntArray, values: Values) -> Values:
    """Per group (``_group_index``), the largest of its members' ``values``."""
    most = np.zeros(int(groups.max()) + 1 if groups.size else 0, dtype=values.dtype)
    np.maximum.at(most, groups, values)
    return most


def _group_sum(groups: IntArray, values: FloatArray) -> FloatArray:
    """Per group (``_group_index``), its members' ``values`` summed."""
    summed = np.bincount(groups, values, int(groups.max()) + 1 if groups.size else 0)
    return summed.astype(np.float64, copy=False)


def _solo_times(cost: WorkerCost, prompts: FloatArray, outputs: FloatArray) -> FloatArray:
    """Prefill plus every decode step of each trajectory running alone on ``cost``'s worker."""
    prefill = cost.time_scale * (
        np.maximum(cost.prefill_per_token_s * prompts, cost.mem_base_s) + cost.overhead_s
    )
    return prefill + solo_decode_times(cost, prompts, outputs)


def _longest(
    trajectories: Sequence[Trajectory],
    costs: list[WorkerCost],
    prompts: FloatArray,
    outputs: FloatArray,
    need: FloatArray,
) -> float:
    """Limit (a): each kind's fastest worker is evaluated (a kind's others are no faster: they
    differ only in a larger time scale); pins restrict the choice."""
    best = np.full(len(trajectories), np.inf)
    for cost in (kind[0] for kind in _kinds(costs)):  # each kind's fastest: as fast as any member
        fits = need <= cost.kv_capacity_tokens
        best = np.where(fits, np.minimum(best, _solo_times(cost, prompts, outputs)), best)
    by_id = {c.worker_id: c for c in costs}
    pinned: dict[str, list[int]] = {}
    pins = [t.pinned_worker for t in trajectories]  # a validated pin is a string: only None is None
    if pins.count(None) < len(pins):  # an unpinned batch skips the loop (~0.4 ms at 4,096)
        for index, worker_id in enumerate(pins):
            if worker_id is not None and worker_id in by_id:
                pinned.setdefault(worker_id, []).append(index)
    for worker_id, members in pinned.items():  # one call a worker: one a pin took ~0.4 s for 4,096 pins
        at = np.asarray(members, dtype=np.int64)  # (the same elementwise arithmetic, so the same floats)
        best[at] = _solo_times(by_id[worker_id], prompts[at], outputs[at])
    finite = best[np.isfinite(best)]
    return float(finite.max()) if finite.size else 0.0


def _heaviest_group(
    trajectories: Sequence[Trajectory],
    groups: IntArray,
    costs: list[WorkerCost],
    prompts: FloatArray,
    outputs: FloatArray,
    need: FloatArray,
    kv_steps: FloatArray,
) -> float:
    """(a) under prefix affinity: the largest over groups of the group alone on its best worker.

    A worker hosting a group runs ``N >= max(longest, K / kv_capacity, D / max_num_seqs)`` steps,
    each reading its weights and, summed, ``K`` cached tokens, and prefills ``P`` prompt tokens: the
    per-worker limit of docs/solver.md with a full cache, a lower bound on that worker's finish.
    All groups at once per worker kind (a loop over groups was half the bound's time at 4,096 x
    32); a pinned group (validation: all its pins name one worker) only on its pins.
    """
    steps, tokens, kv = _group_max(groups, outputs), _group_sum(groups, outputs), _group_sum(groups, kv_steps)
    prompt, most = _group_sum(groups, prompts), _group_max(groups, need)
    best = np.full(most.size, np.inf)
    for cost in (members[0] for members in _kinds(costs)):
        fits = most <= cost.kv_capacity_tokens
        best = np.where(fits, np.minimum(best, _alone(cost, steps, tokens, kv, prompt)), best)
    by_id = {c.worker_id: c for c in costs}
    pins: dict[int, set[str]] = {}
    for i, t in enumerate(trajectories):
        if t.pinned_worker is not None:
            pins.setdefault(int(groups[i]), set()).add(t.pinned_worker)
    for g, named in pins.items():
        at = slice(g, g + 1)
        pool = [by_id[p] for p in named if p in by_id and by_id[p].kv_capacity_tokens >= most[g]]
        times = [float(_alone(c, steps[at], tokens[at], kv[at], prompt[at])[0]) for c in pool]
        best[g] = min(times, default=np.inf)
    finite = best[np.isfinite(best)]
    return float(finite.max()) if finite.size else 0.0


def _alone(
    cost: WorkerCost, steps: FloatArray, tokens: FloatArray, kv: FloatArray, prompt: FloatArray
) -> FloatArray:
    """Groups' least times alone on ``cost``'s worker: ``_heaviest_group``'s per-worker limit, their
    steps reading weights and cache as at a full cache, then their prefill."""
    n = np.maximum(np.maximum(steps, kv / cost.kv_capacity_tokens), tokens / cost.max_num_seqs)
    mem = n * (cost.mem_base_s + cost.overhead_s) + cost.mem_per_token_s * kv
    cmp = n * cost.overhead_s + cost.flops_per_seq_s * tokens + cost.flops_per_token_s * kv
    out: FloatArray = cost.time_scale * (np.maximum(mem, cmp) + cost.prefill_per_token_s * prompt)
    return out


def _kinds(costs: list[WorkerCost]) -> list[list[WorkerCost]]:
    """Workers with identical coefficients but for a time scale within ``BOUND_TOLERANCE`` of the
    fastest's, together, fastest first: the bound credits every member with the first one's speed
    (a relaxation, looser by at most the tolerance) in (a) and in (d)'s band cover. Learned speeds
    give every worker its own scale, and one kind a worker made the bound's cover cost 1-1.4 s at
    32-128 workers, where the planner gives it half its budget and reported whatever it proved by
    then (0.78x the bound)."""
    return [run for family in _families(costs, BOUND_TOLERANCE) for run in family]


def _families(costs: list[WorkerCost], tolerance: float) -> list[list[list[WorkerCost]]]:
    """Per family of identical coefficients but for the time scale (in order of first member), its
    workers in speed groups fastest first, each within ``tolerance`` of its fastest.

    (d)'s fluid cover takes a family as one dimension of its programme and its groups as ranks (a
    family's ``a``-th worker credited as its ``a``-th fastest, ``scheduler.tailcover``): with a
    scale per worker the cover credits each group at its own speed where kinds at ``BOUND_TOLERANCE``
    credited up to 10% too fast and, four kinds of 16-64 workers being past the programme's state
    limit, were merged speed-blind."""
    families: dict[tuple[float | int, ...], list[WorkerCost]] = {}
    for cost in costs:
        families.setdefault(_coefficients(cost)[:5] + _coefficients(cost)[6:], []).append(cost)
    return [
        speed_clusters([c.time_scale for c in members], members, tolerance) for members in families.values()
    ]


def _coefficients(cost: WorkerCost) -> tuple[float | int, ...]:
    """Everything that sets a worker's speed and capacity, without its id."""
    return (
        cost.mem_base_s,
        cost.mem_per_token_s,
        cost.flops_per_seq_s,
        cost.flops_per_token_s,
        cost.overhead_s,
        cost.time_scale,
        cost.prefill_per_token_s,
        cost.kv_capacity_tokens,
        cost.max_num_seqs,
    )
