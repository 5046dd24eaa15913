"""The arithmetic of learned speeds, apart from the Redis store that keeps them
(``service/speeds/learner.py``).

What a speed sample is (a report's measured seconds over the cost model's, ``modelled_seconds``,
stretched by what the worker's own KV cache cost the batch, ``service/speeds/kv.py``, weighted and
clamped per batch, ``batch_log_ratio``), what a learned scale is relative to
(``profile_fingerprint``), how a worker with none borrows its peers' or the fleet's
(``peer_scales``), which workers a plan leaves idle by its belief (``idle_learned``), and how
profiles, fingerprints and learned states read from and write to their stored JSON. No I/O:
``SpeedLearner`` fetches and stores, these decide; ``service/speeds/learner.py`` says why each rule
is as it is.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import math
from collections import defaultdict
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from scheduler.costmodel import worker_cost
from scheduler.devices import DeviceProfile, ModelPreset, model_preset
from scheduler.sim_rules import engine_rules
from scheduler.types import Plan, Worker
from service.api.learning_schemas import ActualReport
from service.engines import SERVICE_ENGINE
from service.speeds.groups import majority, snap
from service.speeds.kv import kv_slowdown

# the learner's logger: an operator filtering on it sees every speed warning, wherever decided
_log = logging.getLogger("service.speeds")
MIN_RATIO, MAX_RATIO = 0.02, 50.0  # a sample outside this is a unit error or a stall, not a speed
# Reports a learned speed needs before plans use it, and a batch needs to move it by the full alpha:
# one absurd report (a clock error, a stall) alone set a new worker's scale to a ratio bound, and the
# next plan gave that worker everything (0.02x) or nothing (50x, and so never a report to undo it).
MIN_SPEED_SAMPLES = 4
# A report whose ratio is more than this many times its batch's centre counts as this many (a stall,
# a paused sidecar, not a speed): the prefill attribution of ``modelled_seconds`` spreads honest
# reports 0.17-1.5x about the centre (the planner's simulator and a live engine-sim walk alike; one
# live report 3.6x; recomputed after preemptions on a starved KV cache, up to 10x) (``batch_log_ratio``).
STALL_SPREAD = 4.0
# Device figures that set only the derived KV capacity (costmodel.derived_kv_capacity), not step time:
# left out of the profile fingerprint, as slots and kv_capacity_tokens are.
_KV_ONLY_FIGURES = ("memory_gib", "memory_utilization")
# The log scales an EWMA of clamped samples can hold (with slack for rounding); a stored state
# outside them was not written by the learner and is not read.
LOG_SCALE_BOUNDS = (math.log(MIN_RATIO) - 1e-6, math.log(MAX_RATIO) + 1e-6)
# Each published plan that gives a worker planned by its learned scale no work multiplies that log
# scale's distance from its anchor (``idle_anchors``: its busy peers', else its profile's) by this: a
# worker believed too slow to get work sends no actual that could correct the belief, so it is pulled
# towards its peers until a plan gives it some (from 50x their scale: 7x, 2.7x, 1.6x, 1.3x).
IDLE_DECAY = 0.5


def planned_on(report: ActualReport, planned: Mapping[str, Mapping[str, str]], fingerprint: str) -> bool:
    """Whether ``report``'s step planned its worker with the profile ``fingerprint`` (assumed so when
    the report names no schedule, or one that recorded no profiles)."""
    return planned.get(report.schedule_id or "", {}).get(report.worker_id, fingerprint) == fingerprint


# Sources that are a belief about the worker itself, from its own actuals: one idle under them is
# never measured again unless pulled back (a group of workers all believed slow, as much as one).
_BELIEVED = ("learned", "learned_group")


def idle_learned(plan: Plan, sources: Mapping[str, str], drained: Collection[str]) -> list[str]:
    """Workers ``plan`` gives no work although they are not drained and are planned by their learned
    time scale, their own or their group's (``sources``): believed too slow to be worth any, they
    would never be measured again.
    None under a shared queue: every worker pulls from the one FIFO, so none is left unmeasured."""
    if plan.dispatch_order:
        return []
    return [
        w.worker_id
        for w in plan.workers
        if not w.items and sources.get(w.worker_id) in _BELIEVED and w.worker_id not in drained
    ]


def idle_anchors(
    worker_ids: Sequence[str],
    fingerprints: Sequence[str],
    own: Mapping[str, tuple[float, int]],
    idle: Collection[str],
) -> dict[str, float]:
    """The log scale each ``idle`` worker is pulled towards (``IDLE_DECAY``): the one it would be
    planned with unmeasured, lent by the workers of the request that are not idle (``peer_scales``:
    its profile's peers, else the fleet), or its profile's 0 when none of them is measured.

    Not the profile's 0 alone: in a fleet that runs faster than its datasheets (engine-sim at
    ``--time-scale 0.01`` ran ~0.05), a worker learned at 2x its profile is 40x slower than its
    peers, and a pull towards 1.0 left it 20x slower for good: never given work, never measured
    (a walk-through's H100 went from 0.09 to 0.93 in four plans, idle at each). Idle workers lend
    nothing, or a group of workers all believed slow would anchor each other where they are."""
    measured = {wid: scale for wid, scale in own.items() if wid not in idle}
    lent = peer_scales(worker_ids, fingerprints, measured)
    return {wid: math.log(lent[wid][0]) if wid in lent else 0.0 for wid in idle}


def peer_scales(
    worker_ids: Sequence[str], fingerprints: Sequence[str], own: Mapping[str, tuple[float, int]]
) -> dict[str, tuple[float, str]]:
    """Each worker's own learned scale (``learned``; ``own`` holds it with its report count), or its
    group's when it lies within noise of other workers' of its profile (``learned_group``,
    ``service/speeds/groups.py``), else its peers' (``learned_peers``), else, for a profile none of
    whose workers is measured, the whole request's (``learned_fleet``). Peers lend the scale of
    their largest group (``speed_groups.majority``), not their mean: a new worker is most likely like
    most of them, and a mean is pulled towards a straggler.

    Why peers. A profile is a datasheet estimate, and a whole fleet often runs faster or slower than
    it (kernels, clocks, the serving stack). Measured one by one, the first worker measured then
    looked faster (or slower) than its identical peers still at the profile's 1.0: a fleet measured
    at 0.03 gave the one worker that had reported the whole next batch, and the others, given
    nothing, never reported to correct it. A worker not measured yet is taken to run like the
    measured workers of its profile (device, overrides, GPUs, model), until it is measured itself.

    Why the fleet, for a profile with none measured. The same trap, one level up: H100s measured at
    0.05 (engine-sim at ``--time-scale 0.01``, found by a walk-through) made the Ascends, at their
    profile's 1.0, look 20x slower than they were; they were given no item, so never measured, so
    never given one. Taking the fleet's scale (its largest group's, across profiles) keeps the cost
    model's relative speeds of the kinds until a kind is measured; where its own error differs, its
    first actuals correct it within a step, whereas the profile's 1.0 could starve it for good."""
    logs_of: dict[str, dict[str, float]] = defaultdict(dict)
    for wid, fingerprint in zip(worker_ids, fingerprints, strict=True):
        if wid in own:
            logs_of[fingerprint][wid] = math.log(own[wid][0])
    samples = {wid: count for wid, (_, count) in own.items()}
    grouped = {wid: log for logs in logs_of.values() for wid, log in snap(logs, samples).items()}
    every = {wid: log for logs in logs_of.values() for wid, log in logs.items()}
    # what a worker not measured yet borrows: once a profile, not once a worker (``majority`` sorts)
    borrowed = {
        fingerprint: _scale(majority(logs, samples), logs, own) for fingerprint, logs in logs_of.items()
    }
    fleet = _scale(majority(every, samples), every, own) if every else None
    scales: dict[str, tuple[float, str]] = {}
    for wid, fingerprint in zip(worker_ids, fingerprints, strict=True):
        if wid in grouped:  # a group of equal scales keeps exactly that scale (no log/exp rounding)
            same = grouped[wid] == logs_of[fingerprint][wid]
            scales[wid] = (own[wid][0] if same else math.exp(grouped[wid]), "learned_group")
        elif wid in own:
            scales[wid] = (own[wid][0], "learned")
        elif fingerprint in borrowed:
            scales[wid] = (borrowed[fingerprint], "learned_peers")
        elif fleet is not None:
            scales[wid] = (fleet, "learned_fleet")
    return scales


def _scale(log: float, logs: Mapping[str, float], own: Mapping[str, tuple[float, int]]) -> float:
    """The time scale of ``log`` (one of ``logs``' groups'): exactly a worker's own when it is that
    worker's log (a lone worker, a group of equal scales), so a borrowed scale equal to a peer's own
    plans as the same speed, not a rounding of it."""
    return next((own[wid][0] for wid, mine in sorted(logs.items()) if mine == log), math.exp(log))


def modelled_seconds(worker: Worker, model: ModelPreset, report: ActualReport) -> float:
    """Seconds the cost model expects for ``report`` at ``time_scale = 1``.

    ``output_tokens`` decode steps at the reported concurrency, each sequence holding on average
    ``prompt + output / 2`` tokens of KV cache (the mean over its own decode), and the prefill of its
    prompt once per sequence of that batch. A prompt admitted into a running batch is prefilled
    before the next decode step, stalling every sequence running then (the planner's simulator and
    engine-sim both do), so a report's wall time holds the prefills of the prompts admitted while it
    ran, not its own alone. Which prompts those were, one report cannot say; but in a busy engine
    each admission stalls ``batch`` sequences once, so over a worker's batch of reports the stalls
    sum to each one's own prefill times its batch, and the weighted mean
    (``batch_log_ratio``) reads the worker's speed. Counted once per report, a step with one
    prompt in eight of 6,000 tokens read 7-10% slow (a live walk, 2026-12-04), and plans, which add
    the stalls again, counted them twice.
    """
    cost = worker_cost(dataclasses.replace(worker, time_scale=1.0), model)
    batch = max(1, min(round(report.concurrency or 1.0), cost.max_num_seqs))
    context = batch * (report.prompt_tokens + report.output_tokens / 2.0)
    step = cost.step_time(batch, context)
    return batch * cost.prefill_time(report.prompt_tokens) + report.output_tokens * step


def batch_log_ratio(
    worker: Worker,
    model: ModelPreset,
    batch: Sequence[ActualReport],
    admitted: Collection[str] = (),
    engines: Mapping[str, str] | None = None,
    default_engine: str = SERVICE_ENGINE,
) -> float:
    """log(measured / modelled seconds) of ``batch``: the mean of its reports' ratios weighted by
    their modelled seconds, i.e. its measured seconds over its modelled ones. Each ratio is first
    clamped to the bounds and to ``STALL_SPREAD`` times the batch's centre (the weighted mean of its
    log ratios), so one stalled report cannot decide the batch.

    A ratio of sums, not a weighted mean of log ratios: ``modelled_seconds`` gives each report the
    stalls its own prefill causes, not those it sat through, which is exact only summed over the
    batch; report by report the ratios spread (a long prompt's below 1, the short ones' above), and
    a mean of their logs, always below the log of their mean, read a worker at its true speed 2.7%
    fast (``tests/service/speeds/test_speed_prefill.py``). A mean of ratios is swayed by one far above
    the rest, as a mean of logs was not: a report 50x late among 25 made a batch read 2.8x, hence the
    cap (slow side only: one far below can take off no more than its own weight). The EWMA across
    batches stays in logs (``service/speeds/learner.py``).

    Each modelled time is stretched by ``kv_slowdown``: what the planner's simulator says the
    worker's own KV cache cost the batch (waiting inside the engine, recompute after preemption),
    which plans charge again; 1.0 on a cache the batch cannot fill, and for the reports of schedules
    in ``admitted``, whose sidecars admitted by projected KV peak: nothing waited in the engine, and
    their concurrency is the batch that ran (stretched, a step played at scale 0.5 read 0.20).
    ``kv_slowdown`` plays the reports by the rules of the engine their schedule was planned for
    (``engines``: schedule id -> engine, ``SpeedLearner.planned``; ``default_engine`` for a report
    naming none): the reports of each engine as one queue of their own."""
    slowdowns = kv_slowdowns(worker, model, batch, admitted, engines or {}, default_engine)
    modelled = [modelled_seconds(worker, model, r) * slowdowns.get(id(r), 1.0) for r in batch]
    ratios = [
        min(max(_wall(report) / seconds, MIN_RATIO), MAX_RATIO)
        for report, seconds in zip(batch, modelled, strict=True)
    ]
    total = sum(modelled)
    centre = sum(m * math.log(r) for m, r in zip(modelled, ratios, strict=True)) / total
    cap = STALL_SPREAD * math.exp(centre)
    return math.log(sum(m * min(r, cap) for m, r in zip(modelled, ratios, strict=True)) / total)


def kv_slowdowns(
    worker: Worker,
    model: ModelPreset,
    batch: Sequence[ActualReport],
    admitted: Collection[str],
    engines: Mapping[str, str],
    default_engine: str,
) -> dict[int, float]:
    """``id(report)`` -> ``kv_slowdown`` of the reports of ``batch`` that ran on the same engine's
    rules, for each report whose schedule did not admit by projected KV peak (``admitted``). A batch
    is mostly one step's reports, so one engine; two steps planned for different engines are each
    played by their own rules rather than one engine's mistaken for the other's."""
    by_engine: dict[str, list[ActualReport]] = defaultdict(list)
    for report in batch:
        if report.schedule_id not in admitted:
            by_engine[engines.get(report.schedule_id or "", default_engine)].append(report)
    out: dict[int, float] = {}
    for engine, reports in by_engine.items():
        slowdown = kv_slowdown(worker, model, reports, engine_rules(engine))
        out.update(dict.fromkeys(map(id, reports), slowdown))
    return out


def _wall(report: ActualReport) -> float:
    assert report.wall_time_s is not None  # SpeedLearner.observe keeps only reports that measured it
    return report.wall_time_s


def profile_fingerprint(worker: Worker, model: ModelPreset) -> str:
    """What a learned scale is relative to: the device profile as planned (overrides included), the
    GPU count and the model; not the time scale (that is what is learned) nor slots or KV size. The
    device's memory figures are KV size too: they set only the derived KV capacity, never a step's
    time (``scheduler.costmodel``), so a ``memory_gib`` override keeps the learned scale, as a
    ``kv_capacity_tokens`` one does."""
    device = dataclasses.asdict(worker.device)
    for kv_only in _KV_ONLY_FIGURES:
        device.pop(kv_only)
    figures = {"device": device, "num_gpus": worker.num_gpus, "model": model.name}
    return hashlib.sha256(json.dumps(figures, sort_keys=True).encode()).hexdigest()[:16]


def worker_json(worker: Worker, model: ModelPreset) -> str:
    """The stored form of ``worker``'s profile and model (``worker_from_json`` reads it back): what a
    later actual is compared with, so the cost model can price it without the request that planned it."""
    return json.dumps(
        {
            "device": dataclasses.asdict(worker.device),
            "num_gpus": worker.num_gpus,
            "max_num_seqs": worker.max_num_seqs,
            "kv_capacity_tokens": worker.kv_capacity_tokens,
            "model": model.name,
        }
    )


def worker_from_json(worker_id: str, raw: object) -> tuple[Worker, ModelPreset] | None:
    """The stored profile and model of ``worker_id``; None when absent or when it does not read.

    Unreadable (another release's format, a hand edit) is skipped with a warning, never fatal: the
    reports are stored before their speed is learned, so failing here answered an error for a batch
    that was stored. The next publish to the worker writes a profile this release reads."""
    if raw is None:
        return None
    try:
        data: Mapping[str, Any] = json.loads(str(raw))
        worker = Worker(
            worker_id="measured",
            device=DeviceProfile(**data["device"]),
            num_gpus=int(data["num_gpus"]),
            max_num_seqs=int(data["max_num_seqs"]),
            kv_capacity_tokens=data["kv_capacity_tokens"],
        )
        model = model_preset(str(data["model"]))
        worker_cost(worker, model)  # refuses a profile the cost model cannot price
    except (ValueError, KeyError, TypeError, ArithmeticError) as error:  # InvalidInputError: ValueError
        _log.warning("worker %s: stored profile unreadable, speed not learned (%s)", worker_id, error)
        return None
    return worker, model


def schedule_fingerprints(schedule_id: str, raw: object) -> dict[str, str]:
    """The worker -> fingerprint map a schedule recorded; empty when absent or when it does not read."""
    if raw is None:
        return {}
    try:
        prints = json.loads(str(raw))
    except ValueError:
        prints = None
    if not isinstance(prints, dict) or not all(isinstance(v, str) for v in prints.values()):
        _log.warning("schedule %s: planned profiles unreadable, its reports use current ones", schedule_id)
        return {}
    return prints


def learned_scale(worker_id: str, raw: object, fingerprint: str) -> tuple[float, int] | None:
    """The time scale a stored learned state holds, and the reports behind it; None when absent, when
    it does not read (or holds a scale the learner cannot reach: its samples are clamped to the
    ratio bounds), or when it was measured against another profile than ``fingerprint``, or an
    unknown one (a state from before fingerprints has none: the worker may have moved since, and a
    scale applied to the wrong profile is off by the ratio of the two, so it waits for
    ``MIN_SPEED_SAMPLES`` new reports instead)."""
    if raw is None:
        return None
    try:
        state = json.loads(str(raw))
        log_scale, profile = float(state["log_scale"]), state.get("profile")
        samples = int(state["samples"])
    except (ValueError, KeyError, TypeError, AttributeError) as error:
        _log.warning("worker %s: learned speed unreadable, ignored (%s)", worker_id, error)
        return None
    if profile != fingerprint:
        return None  # the worker now runs on another device, overrides or model: learn it afresh
    if samples < MIN_SPEED_SAMPLES:
        return None  # too few reports yet: one bad one must not steer a plan
    low, high = LOG_SCALE_BOUNDS
    if not low <= log_scale <= high:
        _log.warning("worker %s: learned log scale %r out of range, ignored", worker_id, log_scale)
        return None
    return math.exp(log_scale), samples
