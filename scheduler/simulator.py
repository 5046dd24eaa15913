"""Play a plan on simulated continuous-batching workers: what the rollout would really have taken.

Two callers: the planner asks how long each worker's ordered queue takes at PREDICTED lengths
(``simulate_worker``, workers independent), and the replay CLI plays a whole plan against the TRUE
lengths (``simulate``), optionally with work stealing or a shared queue, and reports the makespan,
the bubble ratio and a per-item timeline for a Gantt chart. Pure functions of frozen inputs: no I/O,
no randomness, so identical inputs give identical results. Inputs checked and loaded:
``scheduler.sim_load``; engine rules: ``scheduler.sim_engine``; multi-worker coordination:
``scheduler.sim_pool``; formulas and definitions: docs/simulator.md.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import NamedTuple

from scheduler.costmodel import worker_cost
from scheduler.deadlines import planned_times
from scheduler.devices import ModelPreset
from scheduler.errors import InvalidInputError, SchedulerError
from scheduler.sim_alone import play_queue, run_alone
from scheduler.sim_engine import WorkerEngine
from scheduler.sim_ledger import Ledger
from scheduler.sim_load import load_ledger, pin_whole_groups, place, true_length
from scheduler.sim_pool import Pool
from scheduler.sim_rules import DEFAULT_ENGINE, ENGINES, engine_rules
from scheduler.stepsum import planned_steps
from scheduler.types import Inventory, Plan, Trajectory, Worker

TAIL_PERCENT = 10  # tail time: what the last 10% of trajectories to finish add to the makespan
_DEFAULT = ENGINES[DEFAULT_ENGINE]  # the engine rules a plain ``SimOptions`` plays by


@dataclass(frozen=True, slots=True)
class SimOptions:
    """How the workers behave beyond the plan itself."""

    steal: bool = False  # a worker with an empty queue, a free slot and KV room at predicted final
    # lengths steals from the most-loaded tail (the delivery layer's rule, docs/simulator.md)
    kv_admission: bool = False  # admit only while the projected KV peak at predicted lengths fits
    watermark: float = _DEFAULT.watermark  # share of KV kept free when admitting normally (vLLM V0's
    # 1%; V1's is 0, docs/simulator.md, "Fidelity to vLLM V1 and SGLang"); ``with_engine`` sets both
    resume_preempted: bool = _DEFAULT.resume_preempted  # an evicted sequence keeps its output (vLLM
    # V1) instead of restarting; the planner's finish model restarts, so under vLLM admission plan
    # and replay agree only when False (projected-peak admission never evicts on exact lengths)
    excluded_workers: frozenset[str] = frozenset()  # the request's draining workers: they never take
    # from a shared queue nor steal (ids not in the inventory are simply absent)
    prefix_affinity: bool = False  # the request's flag: a shared queue and stealing keep each group's
    # samples on one worker (docs/simulator.md, "What the request constrains")


def with_engine(options: SimOptions, engine: str) -> SimOptions:
    """``options`` playing by the rules of the engine named ``engine`` (``scheduler.sim_rules``:
    ``vllm-v0``, the default, or ``vllm-v1``); an unknown name is an ``InvalidInputError``."""
    rules = engine_rules(engine)
    return replace(options, watermark=rules.watermark, resume_preempted=rules.resume_preempted)


class ItemRecord(NamedTuple):
    """What happened to one trajectory: enough to draw it on its worker's Gantt row.

    An immutable named tuple rather than a frozen dataclass: a result holds one per trajectory (tens
    of thousands), and a frozen dataclass costs ~7 us each to build against ~0.3 us for a tuple.
    """

    key: str  # trajectory key
    worker_id: str  # the worker that ran it to completion
    start_s: float  # first admission (a preempted item restarted later keeps its first start)
    end_s: float  # completion
    output_tokens: int  # true output length
    preemptions: int  # evictions it suffered (each lost its progress, unless the engine resumes)
    stolen: bool  # taken from another worker's queue by work stealing


@dataclass(frozen=True, slots=True)
class SimResult:
    """Outcome of one simulated rollout step."""

    makespan_s: float  # when the last trajectory ended
    worker_finish_s: Mapping[str, float]  # when each worker's last trajectory ended (0.0: it ran none)
    worker_busy_s: Mapping[str, float]  # seconds each worker spent prefilling or decoding
    worker_kv_token_s: Mapping[str, float]  # KV tokens each worker's running sequences held, integrated
    # over time (token-seconds): over capacity x time, the share of its cache really in use
    items: tuple[ItemRecord, ...]  # one per trajectory, in the order of the input trajectories
    preemptions: int  # evictions over all workers
    steals: int  # items moved by work stealing
    bubble_ratio: float  # idle share of GPU-seconds up to the makespan (see docs/simulator.md)
    tokens_per_s: float  # true output tokens over the makespan
    tail_time_s: float  # makespan minus the time by which 90% of trajectories had ended


@dataclass(frozen=True, slots=True)
class WorkerRun:
    """One worker playing its queue alone (the planner's view)."""

    finish_s: float  # when its last item ended (0.0 for an empty queue)
    busy_s: float  # seconds prefilling or decoding
    kv_token_s: float  # KV tokens held, integrated over time (``SimResult.worker_kv_token_s``)
    preemptions: int  # evictions
    starts_s: tuple[float, ...]  # first admission of each item, in queue order
    ends_s: tuple[float, ...]  # completion of each item, in queue order


def simulate(
    plan: Plan,
    trajectories: Sequence[Trajectory],
    actual_tokens: Mapping[str, int],
    inventory: Inventory,
    options: SimOptions = SimOptions(),
) -> SimResult:
    """Play ``plan`` with ``actual_tokens`` deciding when each trajectory ends.

    Predicted lengths (``Trajectory.predicted_tokens``) drive only what a real system would know in
    advance: projected-peak admission under ``kv_admission``, the KV steal gate and the victim choice
    of work stealing. A plan with a ``dispatch_order`` is a shared queue that every worker pulls from
    when a slot frees.

    Every trajectory needs a true length in ``actual_tokens`` (an integer >= 0) and a finite
    prediction >= 0; anything else is an ``InvalidInputError`` naming the trajectory, before any
    play (a NaN prediction failed inside ``math.ceil``, with no field, and a negative one planned
    one step).
    """
    _check_options(options)
    ledger, index_of = load_ledger(trajectories, actual_tokens, inventory)
    if options.prefix_affinity:
        pin_whole_groups(ledger)
    engines = [
        WorkerEngine(
            i,
            worker_cost(w, inventory.model),
            ledger,
            watermark=options.watermark,
            kv_admission=options.kv_admission,
            resume=options.resume_preempted,
            held=True,
        )
        for i, w in enumerate(inventory.workers)
    ]
    shared = place(plan, inventory, index_of, engines, ledger.pin)
    steals = 0
    if shared or options.steal:
        steals = _play_pool(plan, trajectories, inventory, options, ledger, engines, shared)
    else:
        for engine in engines:
            run_alone(engine)
    return _summarize(ledger, inventory, engines, steals)


def _play_pool(
    plan: Plan,
    trajectories: Sequence[Trajectory],
    inventory: Inventory,
    options: SimOptions,
    ledger: Ledger,
    engines: list[WorkerEngine],
    shared: deque[int],
) -> int:
    """Play the workers together, as a pool that shares a queue or steals; the number of steals.

    Only then do workers interact: a thief's speed (at the batch's mean context) and, with stealing
    on a per-worker plan, each item's planned deadline decide what it may take (``scheduler.sim_pool``).
    """
    context = sum(p + s / 2.0 for p, s in zip(ledger.prompts, ledger.planned, strict=True))
    context /= max(1, len(ledger.keys))
    excluded = frozenset(
        i for i, w in enumerate(inventory.workers) if w.worker_id in options.excluded_workers
    )
    speeds = [engine.cost.saturated_tps(context) for engine in engines]
    planned = (
        _steal_deadlines(plan, trajectories, inventory, options)
        if options.steal and not plan.dispatch_order  # a shared queue plans no owner per item
        else None
    )
    pool = Pool(
        engines,
        shared,
        speeds,
        options.steal,
        excluded=excluded,
        affinity=options.prefix_affinity,
        planned=planned,
    )
    pool.run()
    return pool.steals


def simulate_worker(
    worker: Worker,
    model: ModelPreset,
    items: Sequence[Trajectory],
    *,
    kv_admission: bool = False,
    actual_tokens: Sequence[int] | None = None,
    watermark: float = _DEFAULT.watermark,
    resume_preempted: bool = False,
) -> WorkerRun:
    """Play one worker's ordered queue alone; lengths are the predictions unless ``actual_tokens``.

    The planner's per-worker path: no stealing, so workers are independent and each is one call.
    """
    _check_options(SimOptions(kv_admission=kv_admission, watermark=watermark))
    planned = [planned_steps(t.predicted_tokens) for t in items]
    if actual_tokens is None:
        steps = planned
    else:
        if len(actual_tokens) != len(items):
            raise InvalidInputError(
                "actual_tokens", len(actual_tokens), f"expected one length per item ({len(items)})"
            )
        steps = [true_length(t.key, n) for t, n in zip(items, actual_tokens, strict=True)]
    ledger = Ledger([t.key for t in items], [t.prompt_tokens for t in items], steps, planned)
    engine = play_queue(
        worker_cost(worker, model),
        ledger,
        watermark=watermark,
        kv_admission=kv_admission,
        resume=resume_preempted,
        held=True,
    )
    ends, held = tuple(ledger.end), engine.held_s or 0.0
    return WorkerRun(max(ends, default=0.0), engine.busy_s, held, engine.preempted, tuple(ledger.start), ends)


def _steal_deadlines(
    plan: Plan, trajectories: Sequence[Trajectory], inventory: Inventory, options: SimOptions
) -> tuple[list[float], list[float]]:
    """Each item's predicted start and end on its planned worker, in trajectory order: the steal guard.

    The plan played at PREDICTED lengths, static (``scheduler.deadlines``): a thief takes an item
    only if it would finish it by then (later if its owner runs late; ``scheduler.sim_pool``).
    """
    times = planned_times(
        plan,
        trajectories,
        inventory,
        kv_admission=options.kv_admission,
        watermark=options.watermark,
        resume_preempted=options.resume_preempted,
    )
    starts = [times[t.key].start_s for t in trajectories]
    return starts, [times[t.key].end_s for t in trajectories]


def _check_options(options: SimOptions) -> None:
    """What ``SimOptions`` (a plain dataclass, unchecked when built) must hold; errors name the field."""
    if not (math.isfinite(options.watermark) and 0.0 <= options.watermark < 1.0):
        raise InvalidInputError("options.watermark", options.watermark, "must lie in [0, 1)")
    if not isinstance(options.excluded_workers, frozenset | set):
        raise InvalidInputError(
            "options.excluded_workers", options.excluded_workers, "must be a set of worker ids"
        )


def _summarize(ledger: Ledger, inventory: Inventory, engines: list[WorkerEngine], steals: int) -> SimResult:
    """Turn the ledger into records and the aggregate figures callers report."""
    workers = inventory.workers
    if any(e < 0.0 for e in ledger.end):
        raise SchedulerError("simulation ended with unfinished trajectories (simulator invariant broken)")
    finish = [0.0] * len(workers)
    for w, end in zip(ledger.worker, ledger.end, strict=True):
        finish[w] = max(finish[w], end)
    makespan = max(finish, default=0.0)
    ids = [w.worker_id for w in workers]
    items = tuple(
        map(
            ItemRecord._make,
            zip(ledger.keys, [ids[w] for w in ledger.worker], ledger.start, ledger.end, ledger.steps,
                ledger.preemptions, ledger.stolen, strict=True),
        )
    )  # fmt: skip
    gpus = [w.num_gpus for w in workers]
    idle = sum(g * (makespan - e.busy_s) for g, e in zip(gpus, engines, strict=True))
    return SimResult(
        makespan_s=makespan,
        worker_finish_s={w.worker_id: f for w, f in zip(workers, finish, strict=True)},
        worker_busy_s={w.worker_id: e.busy_s for w, e in zip(workers, engines, strict=True)},
        worker_kv_token_s={w.worker_id: e.held_s or 0.0 for w, e in zip(workers, engines, strict=True)},
        items=items,
        preemptions=sum(ledger.preemptions),
        steals=steals,
        bubble_ratio=idle / (sum(gpus) * makespan) if makespan > 0 else 0.0,
        tokens_per_s=sum(ledger.steps) / makespan if makespan > 0 else 0.0,
        tail_time_s=makespan - _quantile_end(ledger.end, 100 - TAIL_PERCENT),
    )


def _quantile_end(ends: list[float], percent: int) -> float:
    """The time by which ``percent``% of the trajectories had ended: the ceil(n*percent/100)-th end."""
    if not ends:
        return 0.0
    ordered = sorted(ends)
    rank = -(-len(ordered) * percent // 100)  # integer ceil, free of float rounding
    return ordered[max(0, rank - 1)]
