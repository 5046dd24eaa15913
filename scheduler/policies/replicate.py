"""Symmetric decomposition: plan one K-th of a large batch on one K-th of the pool, then copy it K times.

At 32,768 x 256 a band round of ``cpsat`` (aggregate model, tier-aware placement of every unit,
ordering) takes 0.5-0.8 s of its 1 s budget after ~0.3 s of preparation and lpt phase, so on a
loaded host it is cut short and the lpt plan (1.21x the bound) stands. Yet such a batch is K near
copies of a smaller one: deal the units by length rank into K sub-batches (ranks ``s, s+K, s+2K,
...``) and every sub-batch has the same length profile; split each device kind's workers into K
equal sub-pools and every sub-pool has the same mix. So the search runs once, on sub-batch 0 and
sub-pool 0 (a sixteenth of the work at 32,768 x 256, with time for its own rounds), and its placement is
copied: the unit of rank ``i*K + s`` goes to the worker of sub-pool ``s`` at the position where
sub-batch 0's unit of rank ``i*K`` went.

Three details make the copies as good as the original, measured on the bench batches:

- the K units of one rank tuple carry different prompts, and a queue planned with its whole batch
  at once sits at its KV limit, so a copy with a few more prompt tokens no longer runs at once and
  finishes ~10% later. Each tuple's units therefore go largest prompt first to the mate whose
  prompt total is lowest so far (tuples in rank order, which is the order the at-once peak sums
  them in), and the sub-batch is planned on ``HEADROOM`` of each cache, so that a copy has room
  for the difference;
- each copy runs its units in the order its twin in sub-pool 0 runs their tuples (a near twin's
  searched order serves it too), and is played on its own lengths (``Problem.finishes``), so the
  plan's finishes are its own, never assumed from the sub-plan. Searching the copies' orders
  again measured 21-187 ms at 32,768 x 256, which the budget could not spare;
- with learned speeds (a time scale per worker) a position's mates differ in speed, so sub-pool 0
  is planned with each worker at its slowest mate's scale (``_slowest_mates``): a copy then ends no
  later than its twin was planned to.

Only where every unit may go to every active worker (no pins, no prefix affinity, every cache fits
with the headroom) and each kind divides into K sub-pools of at least ``SUB_WORKERS`` workers.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

from scheduler.costmodel import WorkerCost
from scheduler.policies.problem import Problem, longest_first, problem_and_bound_columns, worker_kinds
from scheduler.types import Inventory, PlanRequest, Worker

SUB_WORKERS = 16  # the least workers a sub-pool keeps (8 per kind in the bench's even mix). Smaller
# sub-plans fit a slow host's budget: 32,768 x 256, 5 bench batches twice, one busy 2-core host, 2026-12-01:
# sub-pools of 64 (K = 4) 1.0549x the bound (median), 3 of 10 plans cut short to the lpt plan (1.21x);
# of 32 (K = 8) 1.0499x, none; of 16 (K = 16) 1.0472x, none, wall p50 589 ms against 742 ms. Where a
# K = 4 sub-plan fits with both rounds, it is ~0.2% better (1.0449x on a quicker host): not worth a
# plan that the host's load can send back to lpt
MIN_UNITS = 8_192  # below this a full round fits its budget; copying would only lose its last percent
HEADROOM = 0.98  # share of each KV cache the sub-batch is planned on, so that its copies fit too.
# 32,768 x 256 bench batches, 10 plans each: 1.0 gave 1.071x the bound (median; up to 1.19x), any of
# 0.93-0.98 1.047-1.051x (noise between them)


@dataclass(frozen=True, slots=True)
class Split:
    """How a problem divides into ``copies`` sub-problems, and sub-problem 0 itself."""

    copies: int  # K
    pools: tuple[tuple[int, ...], ...]  # K sub-pools of worker indices, aligned by position
    ranked: tuple[int, ...]  # the problem's units (= trajectories), longest first: rank order
    request: PlanRequest  # sub-batch 0 (ranks 0, K, 2K, ...) on sub-pool 0, budget to be set
    problem: Problem  # its problem, every cache at ``HEADROOM``


def split(
    problem: Problem, request: PlanRequest, least_units: int | None = None, fewer: int = 1
) -> Split | None:
    """The decomposition of ``problem`` (built from ``request``), or None where it does not apply
    (fewer than ``least_units`` units, ``MIN_UNITS`` unless given, among others: ``_copies``);
    with ``fewer``, into that many times fewer copies (larger sub-plans)."""
    copies = _copies(problem, request, MIN_UNITS if least_units is None else least_units) // fewer
    if copies < 2:
        return None
    kinds = worker_kinds(problem.costs, problem.active)
    pools = tuple(
        tuple(w for members in kinds for w in _share(problem.costs, members, s, copies))
        for s in range(copies)
    )
    ranked = tuple(problem.ranked or longest_first(problem.units))
    sub = dataclasses.replace(
        request,
        trajectories=tuple(request.trajectories[u] for u in ranked[::copies]),
        inventory=Inventory(_slowest_mates(request, pools), request.inventory.model),
        excluded_workers=frozenset(),
    )
    built = problem_and_bound_columns(sub)[0]  # a part of a checked batch: its keys need no check
    tight = tuple(
        dataclasses.replace(c, kv_capacity_tokens=int(HEADROOM * c.kv_capacity_tokens)) for c in built.costs
    )
    return Split(copies, pools, ranked, sub, dataclasses.replace(built, costs=tight))


def _copies(problem: Problem, request: PlanRequest, least_units: int) -> int:
    """K: the most copies (a power of two) with sub-pools of ``SUB_WORKERS`` or more, every kind
    dividing evenly; 1 where the problem is small, restricted or grouped."""
    if len(problem.units) < least_units or request.prefix_affinity or not problem.unrestricted:
        return 1  # (without prefix affinity every unit is one trajectory, as copying assumes)
    room = min(HEADROOM * problem.costs[w].kv_capacity_tokens for w in problem.active)
    if max(t.prompt_tokens + t.max_new_tokens for t in request.trajectories) > room:
        return 1
    sizes = [len(members) for members in worker_kinds(problem.costs, problem.active)]
    copies = 1
    while sum(sizes) // (2 * copies) >= SUB_WORKERS and all(n % (2 * copies) == 0 for n in sizes):
        copies *= 2
    return copies


def _share(costs: Sequence[WorkerCost], members: Sequence[int], s: int, copies: int) -> Sequence[int]:
    """Sub-pool ``s``'s workers of one kind: its K-th of them, in inventory order (every K-th
    where the kind's members differ in speed, so that every copy plays on the same mix)."""
    size = len(members) // copies
    if len({costs[w].time_scale for w in members}) > 1:  # a kind of near-identical speeds, fastest
        return members[s::copies]  # first: each sub-pool takes every K-th, the same mix of speeds
    return members[s * size : (s + 1) * size]


def _slowest_mates(request: PlanRequest, pools: Sequence[Sequence[int]]) -> tuple[Worker, ...]:
    """Sub-pool 0's workers, each at the time scale of the slowest of its mates (the workers at its
    position in every sub-pool), which is what the sub-plan is planned on.

    Why. Every copy runs its twin's queue (near enough: the same length ranks), so a copy's worker
    ends as late as its twin's plan times its own speed over the twin's. With learned speeds no two
    mates share a scale, and sub-pool 0 holds the fastest of each position's mates (kinds are
    fastest first, ``_share``): copies planned on it ran 5-9% past the sub-plan (1,024 x 32, K = 4,
    against 0.1-0.3% with equal scales), and the copied plan, at 16,384 x 128 with scales in
    [0.9, 1.1], was 1.071-1.085x the bound (after: 1.063-1.076x; the whole batch's rounds:
    1.042-1.044x). At the slowest mate's scale no copy's worker is slower than its twin was
    planned. Equal scales: the workers themselves.
    """
    workers = request.inventory.workers
    out = []
    for position, w in enumerate(pools[0]):
        slowest = max(workers[pool[position]].time_scale for pool in pools)
        out.append(
            workers[w]
            if slowest == workers[w].time_scale
            else dataclasses.replace(workers[w], time_scale=slowest)
        )
    return tuple(out)


def spread_out(
    part: Split, queues: Sequence[Sequence[int]], prompts: Sequence[int], workers: int
) -> tuple[tuple[int, ...], ...]:
    """The full problem's queues from sub-problem 0's ordered ``queues`` (its trajectory indices).

    Sub-index ``i`` is rank ``i*K``; its tuple is ranks ``i*K .. i*K+K-1``. Each tuple's units go,
    largest prompt first, to the mates (the workers at that position in every sub-pool) with the
    least prompt tokens so far, tuples in rank order; each mate then runs its units in the order
    sub-problem 0's worker runs their tuples (a copy's queue is that queue's near twin, so the
    order searched for it serves the copy too, and playing it is all that is left).
    """
    k = part.copies
    tuples = _tuples(part.ranked, prompts, k)
    out: list[tuple[int, ...]] = [() for _ in range(workers)]
    for position, queue in enumerate(queues):
        held = [0] * k  # per mate (its index in ``part.pools``): prompt tokens so far
        taken: list[dict[int, int]] = [{} for _ in range(k)]  # per mate: sub-index -> unit
        for i in sorted(queue):
            for u, m in zip(tuples[i], sorted(range(k), key=held.__getitem__), strict=False):
                taken[m][i] = u
                held[m] += prompts[u]
        for m, pool in enumerate(part.pools):
            got = taken[m]
            out[pool[position]] = tuple(got[i] for i in queue if i in got)
    return tuple(out)


def _tuples(ranked: Sequence[int], prompts: Sequence[int], k: int) -> list[list[int]]:
    """Each sub-index's rank tuple (ranks ``i*K .. i*K+K-1``), largest prompt first (ties in rank
    order): computed once for every position, not per mate."""
    key = prompts.__getitem__
    return [sorted(ranked[r : r + k], key=key, reverse=True) for r in range(0, len(ranked), k)]
