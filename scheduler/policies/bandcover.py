"""One feasibility probe of the band model (``scheduler.policies.levels``): for a fixed makespan, worker
counts per band under which every band's tail fits, or proof that none exist.

Apart from ``levels`` because it is a question of its own, asked in integers: ``levels`` chooses the
makespan (the fluid cover's programme, or a bisection over these probes where that programme would
merge kinds), this module answers one probe at a time, a greedy cover first and CP-SAT where the greedy
one misses or infeasibility must be proven, and keeps CP-SAT's 64-bit sums from overflowing. The
tail bound (``scheduler.tailbands``) asks the same question with whole trajectories (``ItemCounts``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ortools.sat.python import cp_model

from scheduler import clock
from scheduler.policies.sat import new_solver, solve

SAFE_INT = 2**62  # CP-SAT's integers are 64-bit: coefficients times counts must stay below this
PROBE_LIMIT_S = 0.05  # deterministic limit of one feasibility probe (most take a few ms)


@dataclass(frozen=True, slots=True)
class ItemCounts:
    """Integrality of the tail: trajectories are whole, so a worker holds a whole number of them.

    Each of the ``needed[j]`` units of bands ``>= j`` must sit on a worker at a band ``>= j``, and
    a worker of kind ``c`` at band ``k`` holds at most ``room[c][k][j]`` of them (its capacity over
    the smallest such unit). Without this the cover may split the few longest trajectories across
    workers like a fluid, which no schedule can.
    """

    needed: tuple[int, ...]  # needed[j]: units in bands >= j
    room: tuple[tuple[tuple[int, ...], ...], ...]  # room[c][k][j]: of those, how many fit one worker


def cover(
    capacity: Sequence[Sequence[int]],
    demand: Sequence[int],
    sizes: Sequence[int],
    deadline: float | None,
    seed: int,
    items: ItemCounts | None = None,
) -> tuple[tuple[tuple[int, ...], ...] | None, cp_model.CpSolverStatus]:
    """Band counts under which every band's tail fits (None if none), and the solver status.

    ``deadline`` (``scheduler.clock.now()``) can only shorten the probe's deterministic limit; None:
    no deadline.
    A greedy cover is tried first: when it succeeds (and holds ``items``) the probe is settled
    without a solve (CP-SAT is needed to prove infeasibility, or to find covers the greedy misses).
    """
    greedy = _greedy_cover(capacity, demand, sizes)
    if greedy is not None and (items is None or _holds(greedy, items)):
        return greedy, cp_model.FEASIBLE
    capacity, items = _clamped(capacity, demand, sizes, items)
    kinds, bands = range(len(sizes)), range(len(demand))
    model = cp_model.CpModel()
    # Phase 1: variables: workers of each kind at each band.
    counts = [[model.new_int_var(0, sizes[c], f"n[{c},{j}]") for j in bands] for c in kinds]
    # Phase 2: constraints: every worker somewhere; bands >= j covered by workers at bands >= j.
    for c in kinds:
        model.add(sum(counts[c]) == sizes[c])
    for j in bands:
        supply = sum(capacity[c][k] * counts[c][k] for c in kinds for k in range(j, len(demand)))
        model.add(supply >= sum(demand[j:]))
        if items is not None:
            room = items.room
            model.add(
                sum(room[c][k][j] * counts[c][k] for c in kinds for k in range(j, len(demand)))
                >= items.needed[j]
            )
    # Phase 3: no objective: any cover will do (the bisection minimises T).
    # Phase 4: solve.
    left = None if deadline is None else deadline - clock.now()
    solver = new_solver(PROBE_LIMIT_S if left is None else min(PROBE_LIMIT_S, left), seed, left)
    status = solve(solver, model, "band cover")
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return None, status
    # Phase 5: extract.
    return tuple(tuple(int(solver.value(v)) for v in row) for row in counts), status


def _clamped(
    capacity: Sequence[Sequence[int]], demand: Sequence[int], sizes: Sequence[int], items: ItemCounts | None
) -> tuple[Sequence[Sequence[int]], ItemCounts | None]:
    """The same cover question with no coefficient above what it must cover, where CP-SAT's 64-bit
    sums would overflow otherwise (years-long makespans, billion-token lengths: it raises TypeError,
    or, once a sum passes 2**62, answers MODEL_INVALID). Band 0's sum spans every band, so the
    test is the largest coefficient times the workers times the bands: without the bands, a cover
    whose coefficients times the workers stayed under 2**62 went to CP-SAT unclamped and came back
    invalid, a probe neither feasible nor infeasible.

    Exact: a worker whose capacity alone covers the whole demand covers every band's suffix before
    and after. Left as it is below the limit, so that the counts CP-SAT returns do not change.
    """
    workers = max(1, sum(sizes))
    largest = max((v for row in capacity for v in row), default=0)
    if items is not None:
        largest = max(largest, *(v for plane in items.room for row in plane for v in row))
    if largest * workers * max(1, len(demand)) < SAFE_INT:
        return capacity, items
    total = sum(demand)
    capacity = [[min(v, total) for v in row] for row in capacity]
    if items is not None:
        most = max(items.needed, default=0)
        room = tuple(tuple(tuple(min(v, most) for v in row) for row in plane) for plane in items.room)
        items = ItemCounts(items.needed, room)
    return capacity, items


def _holds(counts: Sequence[Sequence[int]], items: ItemCounts) -> bool:
    """Whether ``counts`` leave room for every unit of every band, counted whole (``ItemCounts``)."""
    bands = range(len(items.needed))
    return all(
        sum(items.room[c][k][j] * row[k] for c, row in enumerate(counts) for k in range(j, len(row)))
        >= items.needed[j]
        for j in bands
    )


def _greedy_cover(
    capacity: Sequence[Sequence[int]], demand: Sequence[int], sizes: Sequence[int]
) -> tuple[tuple[int, ...], ...] | None:
    """Counts from the top band down: each band's shortfall is covered by the fewest workers, taken
    from the kind that loses least capacity by leaving the lowest band; the rest stay lowest. None
    when that does not cover every band (the cover may still exist: the caller then asks CP-SAT)."""
    kinds, bands = len(sizes), len(demand)
    counts = [[0] * bands for _ in range(kinds)]
    free = list(sizes)
    supplied = 0
    for j in reversed(range(1, bands)):
        short = sum(demand[j:]) - supplied
        for c in sorted(range(kinds), key=lambda c: (-capacity[c][j] / max(capacity[c][0], 1), c)):
            if short <= 0:
                break
            if capacity[c][j] <= 0 or free[c] == 0:
                continue
            take = min(free[c], -(-short // capacity[c][j]))
            counts[c][j], free[c] = take, free[c] - take
            supplied += take * capacity[c][j]
            short -= take * capacity[c][j]
        if short > 0:
            return None
    for c in range(kinds):
        counts[c][0] = free[c]
    total = supplied + sum(free[c] * capacity[c][0] for c in range(kinds))
    return tuple(tuple(row) for row in counts) if total >= sum(demand) else None
