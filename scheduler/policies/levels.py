"""The aggregate CP-SAT model behind ``cpsat``: how many workers of each kind run the long tail.

Why aggregate. A boolean per (trajectory, worker) does not load at rollout sizes (32k x 256 is eight
million booleans). But workers of one device kind are interchangeable, and what decides the makespan
of a continuous-batching worker is captured by two numbers (``scheduler.policies.load``): how many
decode steps it runs, ``N >= its longest trajectory``, and how many KV-token-steps ``K`` it serves:

    T >= c * N + m * K        (every step reads the weights once, and the cached context)
    T >= (c / kv_capacity + m) * K     (a step holds at most a full KV cache: N >= K / kv_capacity)

So a worker that hosts a 32k-token trajectory pays ``c * 32k`` however little else it runs, and every
extra long trajectory it hosts costs it only ``m * K``. List scheduling spreads the longest items one
per worker and makes *every* worker pay that price; the better plan often concentrates the tail on a
few workers and lets the rest run dense, KV-full batches of short items. That is a decision about
counts, not identities, and it is what this model makes:

- bands: units are cut by length into at most ``BANDS`` bands at quantiles of their length; a worker
  is "at band j" when its longest unit lies in band j, and then runs at least ``x_j`` steps (the
  band's upper edge);
- variables: ``n[c, j]``, the number of workers of kind ``c`` at band ``j``;
- for a fixed makespan ``T`` one such worker serves at most
  ``cap[c, j](T) = min((T - c_c x_j) / m_c, T / (c_c / kvcap_c + m_c))`` KV-token-steps (the two
  limits above), a constant; so the constraints are linear: each kind's workers are all somewhere,
  and the units of bands ``>= j`` fit on the workers at bands ``>= j`` (nested coverage, which is
  exactly when the KV of each band can be routed to workers allowed to take it: Hall's condition
  on nested sets);
- objective: the least ``T`` for which that model is feasible, by bisection (each probe a CP-SAT
  feasibility solve, hinted by nothing: a dozen integer variables).

``scheduler.policies.cpsat`` turns the counts into a placement by list scheduling inside the chosen
bands.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass

from ortools.sat.python import cp_model

from scheduler.costmodel import WorkerCost
from scheduler.policies.load import KV_FILL
from scheduler.policies.problem import Unit
from scheduler.policies.sat import new_solver

BANDS = 6  # length bands; more add little and cost realisation time
KV_UNIT = 1e7  # KV-token-steps per integer unit of K (coefficients keep ~3 significant digits)
PROBE_LIMIT_S = 0.05  # deterministic limit of one feasibility probe (they take ~1 ms)
PRECISION = 0.002  # bisection stops when the bracket on T is this tight (relative)


@dataclass(frozen=True, slots=True)
class LevelPlan:
    """How many workers of each kind sit at each band, and what the model expects of that."""

    edges: tuple[int, ...]  # band upper edges in decode steps, increasing; the last is the longest unit
    counts: tuple[tuple[int, ...], ...]  # counts[c][j]: workers of kind c at band j
    makespan_s: float  # the model's makespan (its estimate, not the simulator's)
    status: str  # CP-SAT status name


def band_edges(units: Sequence[Unit]) -> tuple[int, ...]:
    """Band upper edges at length quantiles 1/2, 3/4, 7/8, ... and the maximum, deduplicated."""
    lengths = sorted(u.steps for u in units)
    n = len(lengths)
    edges = {lengths[min(n - 1, math.ceil(n * (1.0 - 0.5**k)) - 1)] for k in range(1, BANDS)}
    edges.add(lengths[-1])
    return tuple(sorted(edges))


def band_of(steps: int, edges: Sequence[int]) -> int:
    """Index of the first band whose upper edge holds ``steps``."""
    for j, edge in enumerate(edges):
        if steps <= edge:
            return j
    return len(edges) - 1


def solve_levels(
    units: Sequence[Unit],
    kinds: Sequence[tuple[WorkerCost, int]],
    upper_s: float,
    time_limit_s: float,
    seed: int,
    slowdown: Sequence[Sequence[float]] | None = None,
) -> LevelPlan | None:
    """Least makespan (to ``PRECISION``) at which some band counts cover the tail; None: no answer.

    ``upper_s`` is an achievable makespan (the list-scheduling plan's estimate). Bisection on ``T``:
    for a fixed ``T`` every group's capacity is a constant, so feasibility is a small *linear*
    integer model, which CP-SAT settles in milliseconds, where ``T * n`` products would be slow.
    ``slowdown[c][j]``: measured simulated/estimated finish of that group, shrinking its capacity.
    """
    edges = band_edges(units)
    demand = _demand(units, edges)
    deadline = time.perf_counter() + time_limit_s
    low, high = 0.0, upper_s * 1.05
    best: tuple[tuple[int, ...], ...] | None = None
    status = "FEASIBLE"
    while high - low > PRECISION * high:
        remaining = deadline - time.perf_counter()
        if remaining <= 0:
            break
        middle = (low + high) / 2.0
        counts, verdict = _feasible(middle, edges, demand, kinds, remaining, seed, slowdown)
        if counts is not None:
            high, best = middle, counts
        elif verdict == cp_model.INFEASIBLE:
            low = middle
        else:
            break  # out of time inside a check: keep what is proven
    else:
        status = "OPTIMAL"  # optimal to PRECISION for the aggregate model
    if best is None:
        return None
    return LevelPlan(edges, best, high, status)


def _feasible(
    makespan_s: float,
    edges: Sequence[int],
    demand: Sequence[int],
    kinds: Sequence[tuple[WorkerCost, int]],
    time_limit_s: float,
    seed: int,
    slowdown: Sequence[Sequence[float]] | None = None,
) -> tuple[tuple[tuple[int, ...], ...] | None, cp_model.CpSolverStatus]:
    """Band counts under which every band's tail fits by ``makespan_s`` (None if none), and the status."""
    model = cp_model.CpModel()
    # Phase 1: variables: workers of each kind at each band.
    counts = [
        [model.new_int_var(0, size, f"n[{c},{j}]") for j in range(len(edges))]
        for c, (_, size) in enumerate(kinds)
    ]
    # Phase 2: constraints: every worker somewhere; bands >= j covered by workers at bands >= j.
    for c, (_, size) in enumerate(kinds):
        model.add(sum(counts[c]) == size)
    ratio = slowdown or [[1.0] * len(edges) for _ in kinds]
    capacity = [
        [_capacity(cost, edge, makespan_s / ratio[c][j]) for j, edge in enumerate(edges)]
        for c, (cost, _) in enumerate(kinds)
    ]
    for j in range(len(edges)):
        supply = sum(capacity[c][k] * counts[c][k] for c in range(len(kinds)) for k in range(j, len(edges)))
        model.add(supply >= sum(demand[j:]))
    # Phase 3: no objective: any cover will do (the bisection minimises T).
    # Phase 4: solve.
    solver = new_solver(min(PROBE_LIMIT_S, time_limit_s), seed)
    status = solver.solve(model)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return None, status
    # Phase 5: extract.
    return tuple(tuple(int(solver.value(v)) for v in row) for row in counts), status


def _capacity(cost: WorkerCost, steps: int, makespan_s: float, fill: float = KV_FILL) -> int:
    """KV units one worker at a band of ``steps`` serves by ``makespan_s``: min of the two limits."""
    step_s = cost.time_scale * (cost.mem_base_s + cost.overhead_s)
    per_token = cost.time_scale * cost.mem_per_token_s
    chain = (makespan_s - step_s * steps) / per_token
    full = makespan_s / (per_token + step_s / (fill * cost.kv_capacity_tokens))
    return max(0, math.floor(min(chain, full) / KV_UNIT))


def _demand(units: Sequence[Unit], edges: Sequence[int]) -> list[int]:
    """KV-token-steps per band, in model units, rounded up."""
    per_band = [0.0] * len(edges)
    for unit in units:
        per_band[band_of(unit.steps, edges)] += unit.kv_steps
    return [math.ceil(k / KV_UNIT) for k in per_band]


def _coef(value: float) -> int:
    return max(1, round(value))
