"""Exact CP-SAT repair over a few workers at a time: large-neighbourhood search for ``cpsat``.

The slowest worker decides the makespan. This module frees every unit on it and on the ``k`` fastest
workers, and lets CP-SAT re-partition exactly those units with one boolean per (unit, worker): a few
hundred to a few thousand booleans, which CP-SAT solves or improves in tens of milliseconds where a
model of the whole batch would not even load. Each worker's time is the placement model of
``scheduler.policies.load`` (``T >= c*N + m*K``, ``N >= longest``, ``N >= K/cap``), scaled by that
worker's measured ratio of simulated finish to model estimate, so that the drain the model does not
see still counts. A move is kept only when the worker model (``scheduler.finish``), replaying the
re-ordered queues, says the neighbourhood finishes sooner; otherwise the next neighbourhood is tried.
"""

from __future__ import annotations

from collections.abc import Sequence

from ortools.sat.python import cp_model

from scheduler import clock
from scheduler.policies.load import load_of, time_with
from scheduler.policies.ordering import best_order
from scheduler.policies.problem import Problem
from scheduler.policies.sat import new_solver, solve

US = 1e6  # time unit of the model: microseconds
KV_UNIT = 1e5  # KV-token-steps per integer unit
PARTNERS = (1, 3)  # neighbourhood sizes tried, beside the slowest worker
STEP_LIMIT_S = 0.02  # deterministic limit of one neighbourhood solve
MIN_GAIN = 0.005  # repair only while the slowest worker trails the runner-up by more than this
SAFE_INT = 2**62  # CP-SAT's integers are 64-bit; a model past this is not built
MAX_MOVES = 24  # neighbourhood solves per plan at most (the budget usually ends the search first)
SOLVE_STOP_S = 0.02  # what a solve takes past its wall limit (CP-SAT's own start and stop, counted
# in its wall_time but not against its limit), kept off the limit it is given: beside 2 CPU burners
# (load ~21) a repair solve stopped by a 5-20 ms limit returned a median 20-32 ms past it (max 70),
# by a 40 ms limit 4 ms past; loading the model into the call took 0.1-0.3 ms (deadline48)
PRICE_EVERY = 64  # units whose booleans are made between two pricings of the move's model
AFTER_BOOLEANS = 3.5  # a move's model past its booleans (the exactly-ones, each worker's constraints,
# the hints), as a multiple of the time its booleans took: 2.7-3.4x in thread CPU at 1,024 x 16 and
# 4,096 x 32, 1+1 and 1+3 moves (docs/experiments.md, deadline48)


def improve(
    problem: Problem,
    assignment: Sequence[Sequence[int]],
    queues: Sequence[tuple[int, ...]],
    finishes: Sequence[float],
    reserve: bool,
    deadline: float,
    seed: int,
) -> tuple[tuple[tuple[int, ...], ...], tuple[float, ...]] | None:
    """Repair ``assignment`` (ordered as ``queues``) by ``deadline``: better (queues, finishes), or None."""
    placed = [list(units) for units in assignment]
    finish = list(finishes)
    ordered = list(queues)
    improved, failures = False, 0
    last, last_size = 0.0, 1  # the previous move's duration and worker count: the next one starts
    # only if it would fit, its cost scaled by (workers / last workers)^2 (booleans grow as units x
    # workers; a 1+3 move at 1,024 x 16 took 4-5x a 1+1 move and, started anyway, ran to the deadline)
    for _ in range(MAX_MOVES):
        started = clock.now()
        if failures >= len(PARTNERS):
            break
        active = list(problem.active)
        worst = max(active, key=lambda w: (finish[w], -w))
        others = sorted((w for w in active if w != worst), key=lambda w: (finish[w], w))
        if not others or finish[worst] <= (1 + MIN_GAIN) * finish[others[-1]]:
            break  # the runner-up finishes (nearly) as late: moving work off the slowest cannot pay
        group = [worst, *others[: PARTNERS[failures % len(PARTNERS)]]]
        if started + last * (len(group) / last_size) ** 2 >= deadline:
            break
        moved = _resolve(problem, placed, finish, group, deadline, seed)
        if moved is None:
            failures += 1
            last, last_size = clock.now() - started, len(group)
            continue
        trial = _ordered(problem, moved, group, reserve, deadline)
        if trial is None:
            break  # solved up to the deadline: its queues cannot be ordered before it
        if max(f for _, f in trial.values()) < max(finish[w] for w in group) - 1e-9:
            for w in group:
                placed[w] = moved[w]
                ordered[w], finish[w] = tuple(trial[w][0]), trial[w][1]
            improved, failures = True, 0
        else:
            failures += 1
        last, last_size = clock.now() - started, len(group)
    return (tuple(ordered), tuple(finish)) if improved else None


def _ordered(
    problem: Problem, moved: dict[int, list[int]], group: Sequence[int], reserve: bool, deadline: float
) -> dict[int, tuple[list[int], float]] | None:
    """Each of ``group``'s workers' new queue in its best order (``best_order``), with its finish; None
    once ``deadline`` has passed before a worker's is ordered: the move's solve runs up to the deadline
    (its wall limit), and its queues, ordered after it unchecked, ended 1,024 x 16 cpsat plans of 250 ms
    at 256-386 ms on a starved host (docs/experiments.md, review47a)."""
    trial = {}
    for w in group:
        if clock.now() >= deadline:
            return None
        trial[w] = best_order(problem, _items(problem, moved[w]), problem.costs[w], reserve)
    return trial


def _items(problem: Problem, units: Sequence[int]) -> list[int]:
    return [i for u in units for i in problem.units[u].members]


def _resolve(
    problem: Problem,
    placed: Sequence[Sequence[int]],
    finish: Sequence[float],
    group: Sequence[int],
    deadline: float,
    seed: int,
) -> dict[int, list[int]] | None:
    """Re-partition the units of ``group`` with CP-SAT; the new split, or None when it found nothing."""
    started = clock.now()
    if deadline - started <= 0.005:
        return None
    built = _split_model(problem, placed, finish, group, deadline)
    if built is None:
        return None  # past the deadline, or years-long steps or billion-token lengths (``_split_model``)
    model, x = built
    # Solve, stopping at the plan's deadline whatever the host's load: not started where less is left
    # than the model took to build, the solver's copy of it being as large. CP-SAT's limits count from
    # its search: on a starved host a solve begun with 1-10 ms left, after a 72-110 ms build, took
    # 27-167 ms to load and return (docs/experiments.md, review47a).
    # Nor with less left than the solver's own start and stop (``SOLVE_STOP_S``), which its wall
    # limit does not count: that limit is the deadline less them, so the solve returns by the deadline
    # (on a frozen clock there is no wall limit, and nothing is kept off: the replay's plans stand).
    now = clock.now()
    left = deadline - now
    stop_s = SOLVE_STOP_S if clock.solves_on_wall_clock() else 0.0
    if left <= now - started or left <= stop_s:
        return None
    solver = new_solver(min(STEP_LIMIT_S, left), seed, left - stop_s)
    # No presolve: its probing alone spent the whole limit on the 1+3 neighbourhoods of the bench
    # batches' lpt plans (460-2,100 booleans: "Stopped after presolve", UNKNOWN), so the complete,
    # feasible hint never reached the search and those moves could not return even it. Unpresolved,
    # the search starts from the hint: OPTIMAL in 14-43 ms where the presolved solve gave up in 18-35.
    solver.parameters.cp_model_presolve = False
    status = solve(solver, model, "repair")
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return None
    moved: dict[int, list[int]] = {w: [] for w in group}
    for (u, w), var in x.items():
        if solver.value(var):
            moved[w].append(u)
    return moved


def _split_model(
    problem: Problem,
    placed: Sequence[Sequence[int]],
    finish: Sequence[float],
    group: Sequence[int],
    deadline: float,
) -> tuple[cp_model.CpModel, dict[tuple[int, int], cp_model.IntVar]] | None:
    """The CP-SAT model of splitting ``group``'s units among its workers, hinted with the current
    split, and its ``x[u, w]`` booleans; None when the integers would overflow, or where the model
    would not be built by ``deadline``: priced every ``PRICE_EVERY`` units while its booleans are
    made (the booleans at the pace so far, the rest at ``AFTER_BOOLEANS`` times them), and checked
    before each worker's constraints.

    Why priced here. ``improve`` prices a move by the last one's time, and the first by nothing
    (none has been timed yet): on a starved host a first build started with 50-100 ms left took
    65-306 ms, ending a 250 ms plan at up to 580 ms (docs/experiments.md, budget47). A check before
    each worker alone lets one worker's constraints, half a 1+1 move's build, run past the deadline.
    The booleans are a quarter of the build, made the same way (a Python call each), so what the
    first of them took on this host just now prices the rest; the lpt phase, 2 ms at 1,024 x 16,
    says nothing of a host that gives the plan a few percent of a core, and a price taken once every
    boolean is made comes late: those alone ran 35-115 ms at load ~18 (deadline48)."""
    members = set(group)
    units = [u for w in group for u in placed[w]]
    home = {u: w for w in group for u in placed[w]}
    model = cp_model.CpModel()
    x: dict[tuple[int, int], cp_model.IntVar] = {}
    if not _booleans_in_time(model, problem, units, members, x, deadline):
        return None
    kv = {u: round(problem.units[u].kv_steps / KV_UNIT) for u in units}
    horizon = round(max(finish[w] for w in group) * US * 2) + 1
    scales = {w: _calibration(problem, w, placed[w], finish[w]) for w in group}
    if not _fits_int64(problem, units, kv, horizon, scales):
        return None
    makespan = model.new_int_var(0, horizon, "T")
    # Constraints.
    for u in units:
        model.add_exactly_one(x[u, w] for w in group if (u, w) in x)
    current = 0
    for w in group:
        if clock.now() >= deadline:
            return None
        current = max(
            current, _worker_constraints(model, problem, w, units, x, kv, makespan, scales[w], home)
        )
    model.minimize(makespan)
    _hint(model, x, home, makespan, min(current, horizon))
    return model, x


def _booleans_in_time(
    model: cp_model.CpModel,
    problem: Problem,
    units: Sequence[int],
    members: set[int],
    x: dict[tuple[int, int], cp_model.IntVar],
    deadline: float,
) -> bool:
    """``units``' booleans (``_booleans``), ``PRICE_EVERY`` at a time, each batch pricing the whole
    build (the booleans at the pace so far, the rest at ``AFTER_BOOLEANS`` times them): False, and
    the build given up, once it would not end by ``deadline`` (``_split_model``'s why)."""
    started = clock.now()
    for first in range(0, len(units), PRICE_EVERY):
        _booleans(model, problem, units[first : first + PRICE_EVERY], members, x)
        made = min(len(units), first + PRICE_EVERY)
        booleans_s = (clock.now() - started) * len(units) / made
        if started + (1.0 + AFTER_BOOLEANS) * booleans_s >= deadline:
            return False
    return True


def _hint(
    model: cp_model.CpModel,
    x: dict[tuple[int, int], cp_model.IntVar],
    home: dict[int, int],
    makespan: cp_model.IntVar,
    current: int,
) -> None:
    """Hint ``model`` with the current split (each unit at its ``home``), complete, its ``makespan``
    ``current`` too: CP-SAT starts from a solution instead of searching for a first one (1,000
    booleans found none in 55 ms)."""
    for (u, w), var in x.items():
        # 0/1, not a bool: ortools 9.10 copies a hint into its proto as is, and protobuf 7 refuses a
        # bool in an int field (TypeError), which pip pairs with it (ortools 9.10 caps no protobuf).
        model.add_hint(var, int(home[u] == w))
    model.add_hint(makespan, current)


def _booleans(
    model: cp_model.CpModel,
    problem: Problem,
    units: Sequence[int],
    members: set[int],
    x: dict[tuple[int, int], cp_model.IntVar],
) -> None:
    """Make ``x[u, w]``, whether unit ``u`` goes to worker ``w``, for each of ``units`` and each of
    ``members`` it is allowed on."""
    for u in units:
        for w in problem.units[u].allowed:
            if w in members:
                x[u, w] = model.new_bool_var(f"x[{u},{w}]")


def _worker_constraints(
    model: cp_model.CpModel,
    problem: Problem,
    w: int,
    units: Sequence[int],
    x: dict[tuple[int, int], cp_model.IntVar],
    kv: dict[int, int],
    makespan: cp_model.IntVar,
    scale: float,
    home: dict[int, int],
) -> int:
    """``makespan >= scale * (c*N + m*K)``, ``N >= steps`` of each unit it takes, ``N*cap >= K``.

    Hints ``N`` at the current split (``home``) and returns the worker's time there.
    """
    cost = problem.costs[w]
    mine = [u for u in units if (u, w) in x]
    longest = max((problem.units[u].steps for u in mine), default=0)
    steps = model.new_int_var(0, max(longest, 1) * 4 + sum(kv.values()), f"N[{w}]")
    load = sum(kv[u] * x[u, w] for u in mine)
    for u in mine:
        model.add(steps >= problem.units[u].steps * x[u, w])
    # At least 1: a cache under 50 tokens rounds to 0 and would forbid every load (and divide by 0
    # below); 1 only loosens the model, and the move is kept only if the worker model agrees.
    per_cache = max(1, round(cost.kv_capacity_tokens / KV_UNIT * 1000))
    model.add(steps * per_cache >= load * 1000)
    per_step = round(scale * cost.time_scale * (cost.mem_base_s + cost.overhead_s) * US)
    per_unit = round(scale * cost.time_scale * cost.mem_per_token_s * KV_UNIT * US)
    model.add(makespan >= per_step * steps + per_unit * load)
    here = [u for u in mine if home[u] == w]
    kv_here = sum(kv[u] for u in here)
    steps_here = max(max((problem.units[u].steps for u in here), default=0), -(-kv_here * 1000 // per_cache))
    model.add_hint(steps, steps_here)
    return per_step * steps_here + per_unit * kv_here


def _fits_int64(
    problem: Problem, units: Sequence[int], kv: dict[int, int], horizon: int, scales: dict[int, float]
) -> bool:
    """Whether every domain and coefficient of the model, and every sum it forms, stays within
    CP-SAT's 64-bit integers (past them it raises TypeError where a plan should fall back)."""
    load = sum(kv.values())
    steps = max((problem.units[u].steps for u in units), default=1) * 4 + load
    worst = float(max(horizon, load * 1000))
    for w, scale in scales.items():
        cost = problem.costs[w]
        per_step = scale * cost.time_scale * (cost.mem_base_s + cost.overhead_s) * US
        per_unit = scale * cost.time_scale * cost.mem_per_token_s * KV_UNIT * US
        per_cache = cost.kv_capacity_tokens / KV_UNIT * 1000
        worst = max(worst, steps * per_cache, per_step * steps + per_unit * load)
    return worst < SAFE_INT


def _calibration(problem: Problem, w: int, units: Sequence[int], finish: float) -> float:
    """Simulated finish over model estimate for a worker's current units (1.0 when empty)."""
    if not units:
        return 1.0
    estimate = time_with(problem.costs[w], load_of(problem, units))
    return max(1.0, finish / estimate) if estimate > 0 else 1.0
