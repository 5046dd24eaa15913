"""The LPT assignment: units longest first, each onto the allowed worker whose load estimate ends
earliest once it is added (``scheduler.policies.load``): the placement rule ``lpt``'s start,
``cpsat``'s band rounds (with tiers) and the balance step share.

Why apart from ``lpt``. ``scheduler.policies.lpt`` is the policy's flow around this rule (the lane-dealt
candidate, ordering, the hedge, placing again by kind); the rule is the one place every list-scheduled
placement goes through, with its specialised plain loop (``_plain_lpt``) beside the general one
(``scheduler.policies.listrun``).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence

from scheduler import giveup
from scheduler.policies.listrun import CHECK_EVERY, place_units
from scheduler.policies.listsched import ListState
from scheduler.policies.load import Rates, rates
from scheduler.policies.problem import Problem, Unit, longest_first, worker_kinds


def lpt_assignment(
    problem: Problem,
    tiers: Sequence[int] | None = None,
    band: Callable[[Unit], int] | Sequence[int] | None = None,
    scale: Sequence[float] | None = None,
    deadline: float | None = None,
    cap_s: float | None = None,
    waves: Sequence[float] | None = None,
) -> list[list[int]]:
    """Unit indices per worker, chosen longest-first onto the earliest-finishing allowed worker.

    With ``tiers`` (one per worker) and ``band`` (of each unit: a function, or a list by unit
    index, ``levels.bands_of``), a unit goes only to workers whose
    tier is at least its band, when any allowed worker qualifies: how ``cpsat`` confines the long
    tail to the workers its aggregate model chose. ``scale`` multiplies each worker's estimate (a
    measured simulated/estimated ratio). With tiers, a candidate whose whole queue would no longer
    run at once without preemption (``KvPeaks.peak_after``) yields to one that still would, looking
    a few entries deep into each heap; a queue that filled its slots within its cache never yields.
    Without tiers and scale this is plain LPT. With ``deadline`` (``scheduler.clock.now()``) the
    general path raises ``BudgetSpent`` once past it (checked every ``listrun.CHECK_EVERY`` units).
    The loop itself is ``scheduler.policies.listrun``'s.

    With ``cap_s`` (and tiers), a unit shorter than half the longest whose best worker would pass
    ``cap_s`` is set aside and placed once every other unit is (``cpsat``'s second round): by then
    the workers of the lowest bands have passed their slots and take it in their waves, where
    placed in turn it went to a worker that then finished last. With ``waves`` (and tiers), a
    worker's estimates take its entry there (at least its ``scale`` entry) in place of ``scale``'s
    from the unit that takes it past its slots on (``calibrate.in_waves``).
    """
    if tiers is None and band is None and scale is None:
        fast = _plain_lpt(problem)
        if fast is not None:
            return fast
    costs, units = problem.costs, problem.units
    state = ListState(
        problem, tiers or [0] * len(costs), scale or [1.0] * len(costs), tiers is not None, waves
    )
    if band is None:
        bands: Sequence[int] = [0] * len(units)
    else:
        bands = band if isinstance(band, Sequence) else [band(unit) for unit in units]
    short = max(problem.steps, default=0) // 2 if cap_s is not None else 0
    later = place_units(state, problem.ranked or longest_first(units), bands, cap_s, short, deadline)
    place_units(state, later, bands, None, 0, deadline)  # set aside: they would have passed ``cap_s``
    return state.placed


def _plain_lpt(problem: Problem) -> list[list[int]] | None:
    """Plain LPT when every unit may go to every active worker (no pins, every cache fits): the
    common case, specialised. The least-loaded worker of each kind is the top of that kind's heap,
    and the chosen worker is always such a top, so a heap entry is replaced, never left stale; the
    estimate is ``load.estimate`` inlined, on each unit's totals unpacked at once (attribute reads
    and ``max()`` calls cost a fifth to a third of the loop). Same placements as the general
    ``ListState`` path where a kind's members share one scale (with learned speeds, ties of equal
    estimates go to the faster member here, to the lower index there); None when its
    preconditions do not hold (or 8 workers or fewer, which that path scans)."""
    active, units = problem.active, problem.units
    if len(active) <= 8 or not (problem.unrestricted or all(len(u.allowed) == len(active) for u in units)):
        return None
    kinds = worker_kinds(problem.costs, active)
    # (estimate, rank in its kind): members are fastest first, so among equal estimates (the empty
    # start) the fastest takes the longest unit; with one scale a kind, rank order is index order
    heaps: list[list[tuple[float, int]]] = [[(0.0, r) for r in range(len(members))] for members in kinds]
    coefficients = [_coefficients(rates(c)) for c in problem.costs]  # each worker's own speed
    triples = list(zip(heaps, kinds, range(len(kinds)), strict=True))
    workers = len(problem.costs)
    steps, tokens, kv, prompt = [0] * workers, [0] * workers, [0.0] * workers, [0] * workers
    placed: list[list[int]] = [[] for _ in range(workers)]
    for k, u in enumerate(problem.ranked or longest_first(units)):
        if k % CHECK_EVERY == 0:
            giveup.check()  # the lpt start's longest loop: 30-250 ms at 4,096 x 32 on a starved host
        _, u_steps, u_tokens, u_kv, u_prompt, _ = units[u]  # a Unit, unpacked: no attribute reads
        best_after, best, best_kind = 0.0, -1, 0
        for heap, members, kind in triples:
            w = members[heap[0][1]]
            per_cache, per_slot, step_s, kv_s, overhead_s, seq_s, token_s, prefill_s = coefficients[w]
            n_tokens, n_kv = tokens[w] + u_tokens, kv[w] + u_kv
            n: float = steps[w] if steps[w] > u_steps else u_steps  # max() of three, no call
            if n_kv * per_cache > n:
                n = n_kv * per_cache
            if n_tokens * per_slot > n:
                n = n_tokens * per_slot
            mem = n * step_s + kv_s * n_kv
            cmp = n * overhead_s + seq_s * n_tokens + token_s * n_kv
            after = (mem if mem > cmp else cmp) + prefill_s * (prompt[w] + u_prompt)
            if best < 0 or after < best_after or (after == best_after and w < best):
                best_after, best, best_kind = after, w, kind
        if u_steps > steps[best]:
            steps[best] = u_steps
        tokens[best] += u_tokens
        kv[best] += u_kv
        prompt[best] += u_prompt
        placed[best].append(u)
        best_heap = heaps[best_kind]
        heapq.heapreplace(best_heap, (best_after, best_heap[0][1]))
    return placed


def _coefficients(r: Rates) -> tuple[float, float, float, float, float, float, float, float]:
    """``r``'s fields in the order ``_plain_lpt`` unpacks them."""
    return (r.per_full_cache, r.per_slot, r.step_s, r.kv_s, r.overhead_s, r.seq_s, r.token_s, r.prefill_s)
