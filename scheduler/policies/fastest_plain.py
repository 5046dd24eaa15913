"""The at-once hedge's candidate (``robust_fast.fastest_first``) where every unit is one trajectory and
may go to every active worker: the same loop, its per-unit bookkeeping written out in it.

Why. On the service's batches (no pins, no groups) the general loop's calls per unit (the fitting
worker's search, the KV peak, the load's totals, the estimate) take 7.7 ms at 4,096 x 32 on a quiet
host, inside the 80 ms default, enough to leave the judgment it feeds unjudged (docs/experiments.md,
budget50). Written out, as ``lpt_assign._plain_lpt`` is for plain LPT, it places the same units on the same
workers: each test and sum is the one ``KvPeaks``, ``Load`` and ``load.estimate`` make, in the same
order, so every float is the same.
"""

from __future__ import annotations

import heapq

from scheduler import clock
from scheduler.policies.kvpeak import PEAK_MARGIN
from scheduler.policies.load import estimate, rates
from scheduler.policies.problem import Problem, longest_first

PACE_EVERY = 32  # units placed between checks of the candidate's projected end (a clock read is
# far cheaper than placing 32 units: a heap pass and a KV peak each); the general loop's too


def plain_fastest(
    problem: Problem, kinds: list[list[int]], deadline: float
) -> tuple[list[list[int]] | None, bool]:
    """Units per worker, the longest on the fastest kind (``kinds``, fastest first) while its queues
    still run at once, as ``robust_fast._fastest`` places them; (None, False) where some unit fits
    no worker at once, (None, True) where it would end past ``deadline`` at its own pace (``past``,
    every ``PACE_EVERY`` units, the pace counted from the loop's start as the general loop counts it).
    For problems whose units are single trajectories allowed on every active worker."""
    costs, units = problem.costs, problem.units
    heaps = [[(0.0, w) for w in members] for members in kinds]
    kind_of = {w: k for k, members in enumerate(kinds) for w in members}
    coefficients = {w: rates(costs[w]) for w in kind_of}
    slots = [c.max_num_seqs for c in costs]
    limit = [(1.0 - PEAK_MARGIN) * c.kv_capacity_tokens for c in costs]
    count, held, peak = [0] * len(costs), [0] * len(costs), [0] * len(costs)  # ``KvPeaks``' lists
    longest, tokens, kv, prompt = [0] * len(costs), [0] * len(costs), [0.0] * len(costs), [0] * len(costs)
    placed: list[list[int]] = [[] for _ in costs]
    started = clock.now()
    for k, u in enumerate(problem.ranked or longest_first(units)):
        if k % PACE_EVERY == 0 and past(started, k, len(units), deadline):
            return None, True
        _, u_steps, u_tokens, u_kv, u_prompt, _ = units[u]
        w = _take(heaps, count, held, peak, slots, limit, u_steps, u_prompt)
        if w < 0:
            return None, False
        count[w] += 1
        held[w] += u_prompt
        term = held[w] + count[w] * u_steps  # ``KvPeaks.add``'s single-member case
        if term > peak[w]:
            peak[w] = term
        longest[w] = max(longest[w], u_steps)  # ``Load.add``
        tokens[w] += u_tokens
        kv[w] += u_kv
        prompt[w] += u_prompt
        placed[w].append(u)
        if count[w] < slots[w]:  # a worker out of slots takes nothing more
            after = estimate(coefficients[w], longest[w], tokens[w], kv[w], prompt[w])
            heapq.heappush(heaps[kind_of[w]], (after, w))
    return placed, False


def _take(
    heaps: list[list[tuple[float, int]]],
    count: list[int],
    held: list[int],
    peak: list[int],
    slots: list[int],
    limit: list[float],
    steps: int,
    prompt: int,
) -> int:
    """``robust_fast._take_fitting`` for a single unrestricted trajectory; -1 where none fits."""
    for heap in heaps:
        passed: list[tuple[float, int]] = []
        found = -1
        while heap:
            entry = heapq.heappop(heap)
            w = entry[1]
            if (
                count[w] + 1 <= slots[w]
                and max(peak[w], held[w] + prompt + (count[w] + 1) * steps) <= limit[w]
            ):
                found = w
                break
            passed.append(entry)
        for entry in passed:
            heapq.heappush(heap, entry)
        if found >= 0:
            return found
    return -1


def past(started: float, placed: int, units: int, deadline: float) -> bool:
    """Whether placing ``units`` units, ``placed`` of them placed since ``started``, ends past
    ``deadline`` at the pace so far (or the deadline has passed already)."""
    now = clock.now()
    return now > deadline or (placed > 0 and started + (now - started) * units / placed > deadline)
