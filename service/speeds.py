"""Per-worker decode speed learned from actuals, fed back as ``Worker.time_scale`` in later plans.

Device profiles are datasheet numbers; a real engine runs slower or faster (kernels, interconnect,
thermal limits, a noisy neighbour). Each actual says how long a trajectory of known length took on a
worker running ``concurrency`` sequences; the cost model says how long it should have taken at
``time_scale = 1``. Their ratio is a sample of that worker's time scale. We keep an exponentially
weighted mean of log ratios per worker (log: a worker twice as slow and one twice as fast are
symmetric errors), one update per report batch at the batch's mean (a step's reports end with its
slow tail; folded one by one, the last few would decide), in Redis so every replica plans with the
same speeds. The mean is weighted by each report's modelled seconds: fixed costs the model leaves
out (HTTP, waiting behind a wave of prefills) inflate short items most, and a heavy-tailed batch is
mostly short items (one vote each made a 0.25x engine read 0.44x); the long ones measure decoding.
A later request that states no ``time_scale`` or ``decode_tokens_per_s`` for a worker gets the
learned one, once ``MIN_SPEED_SAMPLES`` reports stand behind it: until then the mean is the plain
mean of every report (no early report alone decides), and after it a batch of fewer reports moves it
by a proportionally smaller weight, so one absurd report can neither starve nor flood a worker.
A worker with no learned scale of its own (not measured yet, or since its profile changed) is
planned with the geometric mean of its measured peers' in the same request, those planned with the
same profile (``peer_scales``). Reports without ``concurrency`` teach nothing about speed: a
trajectory decoded in a batch of 100 is slower than one decoded alone, and mistaking that for a slow
worker would mislead every later plan.

Only workers that run something are measured, and a plan gives nothing to a worker it believes far
too slow: a wrong belief (a bad day, a neighbour since gone) would last forever. So each published
plan that leaves a worker idle while planning it by its learned scale multiplies that log scale by
``IDLE_DECAY`` (towards its profile's 0: 20x, 4.5x, 2.1x, 1.45x), until a plan finds the worker worth
some work and its actuals re-measure it; a still-slow worker is learned slow again by them. A plan
that gives the worker any work leaves its scale alone (its actuals will speak), as do dry runs,
drained workers and shared-queue plans (every worker pulls from the one FIFO).

A report is a ratio to the profile its own step planned the worker with, which need not be the
latest one: a trainer may publish step N+1 on new hardware before it reports step N. Each publish
records the fingerprints it planned with in the schedule's meta, and a report that names its
``schedule_id`` measured against a profile other than the worker's current one teaches nothing (a
ratio to the old device says nothing of the new). A report without one, or of a schedule that
recorded none (an older release's, or expired), is compared with the current profile.

Keys (named in ``service/delivery/keys.py``, with every other key and TTL):

* ``keys.worker_profiles`` (``<prefix>:workers``) hash: worker id -> JSON of its last published
  profile and model preset, written at publish time, so an actual can be compared with the model of
  the worker that ran it.
* ``keys.learned_speeds`` (``<prefix>:speed``) hash: worker id -> JSON ``{"log_scale": float,
  "samples": int, "profile": str}``, ``profile`` the fingerprint of the device profile (overrides
  included), GPU count and model the scale was measured against. A scale is a ratio to that profile:
  applied to another (the worker restarted on an H200, a bandwidth override was added, a new model)
  it would be wrong by the ratio of the two profiles, so plans use it only while the fingerprint
  matches, and the first batch measured against a new profile starts the mean afresh. A state
  without ``profile`` (stored before fingerprints) was measured against an unknown profile: plans
  ignore it and the next batch starts afresh.
Neither expires: they describe the fleet, not a schedule, and hold one small entry per worker.

* field ``keys.PLANNED_PROFILES`` of each published schedule's ``P:meta``: JSON worker id ->
  fingerprint it was planned with; written after the publish, only while the schedule exists, and
  expiring with it (the schedule's retention).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import math
from collections import defaultdict
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any

from scheduler.costmodel import worker_cost
from scheduler.devices import DeviceProfile, ModelPreset, model_preset
from scheduler.types import Inventory, Plan, Worker
from service.api.schemas import ActualReport
from service.delivery import keys
from service.redis_conn import RedisClient

_log = logging.getLogger("service.speeds")
MIN_RATIO, MAX_RATIO = 0.02, 50.0  # a sample outside this is a unit error or a stall, not a speed
# Reports a learned speed needs before plans use it, and a batch needs to move it by the full alpha:
# one absurd report (a clock error, a stall) alone set a new worker's scale to a ratio bound, and the
# next plan gave that worker everything (0.02x) or nothing (50x, and so never a report to undo it).
MIN_SPEED_SAMPLES = 4
# Device figures that set only the derived KV capacity (costmodel.derived_kv_capacity), not step time:
# left out of the profile fingerprint, as slots and kv_capacity_tokens are.
_KV_ONLY_FIGURES = ("memory_gib", "memory_utilization")
# The log scales an EWMA of clamped samples can hold (with slack for rounding); a stored state
# outside them was not written by the learner and is not read.
LOG_SCALE_BOUNDS = (math.log(MIN_RATIO) - 1e-6, math.log(MAX_RATIO) + 1e-6)
# Each published plan that gives a worker planned by its learned scale no work multiplies that log
# scale by this: a worker believed too slow to get work sends no actual that could correct the belief,
# so it is pulled towards its profile until a plan gives it some (from 50x: 7x, 2.7x, 1.6x, 1.3x).
IDLE_DECAY = 0.5

# Folds one report batch's mean log ratio into a worker's EWMA atomically (replicas may race).
# ARGV: worker, alpha, the batch's mean log ratio, its sample count, the log scale's bounds, and the
# fingerprint of the profile the ratio was measured against, MIN_SPEED_SAMPLES.
_UPDATE = """
local raw = redis.call('HGET', KEYS[1], ARGV[1])
local state = nil
if raw then
  local ok, decoded = pcall(cjson.decode, raw)
  -- a state that does not read (another release's, a hand edit) starts afresh, never fails the batch;
  -- so does one measured against another profile (a ratio to the old device says nothing of the new),
  -- or against an unknown one (stored before fingerprints)
  if ok and type(decoded) == 'table' and type(decoded.samples) == 'number'
      and type(decoded.log_scale) == 'number' and tonumber(ARGV[5]) <= decoded.log_scale
      and decoded.log_scale <= tonumber(ARGV[6])
      and decoded.profile == ARGV[7] then
    state = decoded
  end
end
local alpha, x, n = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local enough = tonumber(ARGV[8])
if state and state.samples < enough then
  -- warming up: the mean of every report so far, so no early report alone decides
  state.log_scale = (state.samples * state.log_scale + n * x) / (state.samples + n)
  state.samples = state.samples + n
elseif state then
  -- a batch of few reports is little evidence, and moves the mean by that much less
  local weight = alpha * math.min(1, n / enough)
  state.log_scale = (1 - weight) * state.log_scale + weight * x
  state.samples = state.samples + n
else
  state = {log_scale = x, samples = n}
end
state.profile = ARGV[7]
redis.call('HSET', KEYS[1], ARGV[1], cjson.encode(state))
return tostring(state.log_scale)
"""

# Pulls an idle worker's learned log scale towards its profile's (0), atomically (replicas may race).
# ARGV: worker, the fingerprint it was planned with, IDLE_DECAY. A state measured against another
# profile, or one that does not read, is left alone: plans do not use it.
_DECAY = """
local raw = redis.call('HGET', KEYS[1], ARGV[1])
if not raw then return 0 end
local ok, state = pcall(cjson.decode, raw)
if not (ok and type(state) == 'table' and type(state.log_scale) == 'number'
    and state.profile == ARGV[2]) then
  return 0
end
state.log_scale = state.log_scale * tonumber(ARGV[3])
redis.call('HSET', KEYS[1], ARGV[1], cjson.encode(state))
return 1
"""

# Stores the fingerprints a schedule was planned with in its P:meta, only while it exists (an HSET on
# a meta expired meanwhile would recreate it without expiry). ARGV: the field, the fingerprints' JSON.
_RECORD = """
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
return 1
"""


class SpeedLearner:
    """Reads and updates learned per-worker time scales in Redis."""

    def __init__(self, client: RedisClient, alpha: float, prefix: str = keys.DEFAULT_PREFIX) -> None:
        self._redis = client
        self._alpha = alpha
        self._prefix = prefix
        self.workers_key = keys.worker_profiles(prefix)
        self.speed_key = keys.learned_speeds(prefix)
        self._update = client.register_script(_UPDATE)
        self._decay = client.register_script(_DECAY)
        self._record = client.register_script(_RECORD)

    def remember(self, schedule_id: str, inventory: Inventory, idle: Iterable[str] = ()) -> None:
        """At publish: record each worker's profile (as planned, time scale excluded), as the one its
        next actuals are measured against and, fingerprinted, as the one ``schedule_id``'s are (a
        trainer may publish the next step on new hardware before it reports this one's). Then pull
        the learned scale of each ``idle`` worker (``idle_learned``) towards its profile."""
        model = inventory.model
        pairs = [(w.worker_id, _worker_json(w, model)) for w in inventory.workers]
        self._redis.hset(self.workers_key, items=[part for pair in pairs for part in pair])
        planned = {w.worker_id: profile_fingerprint(w, model) for w in inventory.workers}
        meta = keys.schedule_keys(schedule_id, self._prefix).meta
        self._record(keys=[meta], args=[keys.PLANNED_PROFILES, json.dumps(planned, sort_keys=True)])
        for wid in idle:
            self._decay(keys=[self.speed_key], args=[wid, planned[wid], IDLE_DECAY])

    def learned(self, workers: Sequence[Worker], model: ModelPreset) -> dict[str, tuple[float, str]]:
        """Worker id -> (time scale, source) for ``workers``, against the profiles they are planned
        with now: ``learned``, its own; ``learned_peers``, for a worker with none (never measured, or
        measured against another profile), the geometric mean of those of its peers in ``workers``
        (same profile fingerprint) that have one (``peer_scales``). Absent: neither."""
        if not workers:
            return {}
        raw = self._redis.hmget(self.speed_key, [w.worker_id for w in workers])
        prints = [profile_fingerprint(w, model) for w in workers]
        own = {
            w.worker_id: scale
            for w, value, fingerprint in zip(workers, raw, prints, strict=True)
            if (scale := _learned_scale(w.worker_id, value, fingerprint)) is not None
        }
        return peer_scales([w.worker_id for w in workers], prints, own)

    def observe(self, reports: Iterable[ActualReport]) -> dict[str, float]:
        """Fold the speed samples of ``reports`` in; returns the new time scale of each updated worker."""
        by_worker: dict[str, list[ActualReport]] = defaultdict(list)
        for report in reports:
            # without concurrency batching slowdown would pass for slowness; without wall time, no speed
            if report.concurrency is not None and report.wall_time_s is not None:
                by_worker[report.worker_id].append(report)
        ids = list(by_worker)
        if not ids:
            return {}
        profiles = dict(zip(ids, self._redis.hmget(self.workers_key, ids), strict=True))
        planned = self._planned({r.schedule_id for b in by_worker.values() for r in b if r.schedule_id})
        updated: dict[str, float] = {}
        for wid, reports_of_worker in by_worker.items():
            profile = _worker_from_json(wid, profiles[wid])
            if profile is None:
                continue  # never published to, or by a format this release cannot read: no model
            worker, model = profile
            now = profile_fingerprint(worker, model)
            # a report planned on a profile the worker has left is a ratio to that one, not to this
            batch = [r for r in reports_of_worker if _planned_on(r, planned, now)]
            if not batch:
                continue
            # one update per batch, at its mean: folding the samples one by one left the estimate to
            # the last few reported (a step's slow tail: 1.15 where the step's mean was 1.0)
            args: list[Any] = [wid, self._alpha, _weighted_log_ratio(worker, model, batch), len(batch)]
            args += [*LOG_SCALE_BOUNDS, now, MIN_SPEED_SAMPLES]
            updated[wid] = math.exp(float(self._update(keys=[self.speed_key], args=args)))
        return updated

    def _planned(self, schedule_ids: Collection[str]) -> dict[str, dict[str, str]]:
        """Schedule id -> worker -> fingerprint of the profile it was planned with, for the schedules
        that recorded them. One that did not (published by an older release, or expired with its
        schedule) is absent: its reports are compared with each worker's current profile."""
        ids = sorted(schedule_ids)
        if not ids:
            return {}
        pipe = self._redis.pipeline(transaction=False)
        for sid in ids:
            pipe.hget(keys.schedule_keys(sid, self._prefix).meta, keys.PLANNED_PROFILES)
        found = {sid: _fingerprints(sid, raw) for sid, raw in zip(ids, pipe.execute(), strict=True)}
        return {sid: prints for sid, prints in found.items() if prints}


def _planned_on(report: ActualReport, planned: Mapping[str, Mapping[str, str]], fingerprint: str) -> bool:
    """Whether ``report``'s step planned its worker with the profile ``fingerprint`` (assumed so when
    the report names no schedule, or one that recorded no profiles)."""
    return planned.get(report.schedule_id or "", {}).get(report.worker_id, fingerprint) == fingerprint


def idle_learned(plan: Plan, sources: Mapping[str, str], drained: Collection[str]) -> list[str]:
    """Workers ``plan`` gives no work although they are not drained and are planned by their learned
    time scale (``sources``): believed too slow to be worth any, they would never be measured again.
    None under a shared queue: every worker pulls from the one FIFO, so none is left unmeasured."""
    if plan.dispatch_order:
        return []
    return [
        w.worker_id
        for w in plan.workers
        if not w.items and sources.get(w.worker_id) == "learned" and w.worker_id not in drained
    ]


def peer_scales(
    worker_ids: Sequence[str], fingerprints: Sequence[str], own: Mapping[str, float]
) -> dict[str, tuple[float, str]]:
    """Each worker's own learned scale (``learned``), else its peers' geometric mean (``learned_peers``).

    Why. A profile is a datasheet estimate, and a whole fleet often runs faster or slower than it
    (kernels, clocks, the serving stack). Measured one by one, the first worker measured then looked
    faster (or slower) than its identical peers still at the profile's 1.0: a fleet measured at 0.03
    gave the one worker that had reported the whole next batch, and the others, given nothing, never
    reported to correct it. A worker not measured yet is taken to run like the measured workers of
    its profile (device, overrides, GPUs, model), until it is measured itself."""
    logs_of: dict[str, list[float]] = defaultdict(list)
    for wid, fingerprint in zip(worker_ids, fingerprints, strict=True):
        if wid in own:
            logs_of[fingerprint].append(math.log(own[wid]))
    scales: dict[str, tuple[float, str]] = {}
    for wid, fingerprint in zip(worker_ids, fingerprints, strict=True):
        if wid in own:
            scales[wid] = (own[wid], "learned")
        elif logs_of[fingerprint]:
            scales[wid] = (math.exp(sum(logs_of[fingerprint]) / len(logs_of[fingerprint])), "learned_peers")
    return scales


def modelled_seconds(worker: Worker, model: ModelPreset, report: ActualReport) -> float:
    """Seconds the cost model expects for ``report`` at ``time_scale = 1``.

    Prefill, then ``output_tokens`` decode steps at the reported concurrency, each sequence holding
    on average ``prompt + output / 2`` tokens of KV cache (the mean over its own decode).
    """
    cost = worker_cost(dataclasses.replace(worker, time_scale=1.0), model)
    batch = max(1, min(round(report.concurrency or 1.0), cost.max_num_seqs))
    context = batch * (report.prompt_tokens + report.output_tokens / 2.0)
    step = cost.step_time(batch, context)
    return cost.prefill_time(report.prompt_tokens) + report.output_tokens * step


def _weighted_log_ratio(worker: Worker, model: ModelPreset, batch: Sequence[ActualReport]) -> float:
    """Mean log(measured / modelled seconds) over ``batch``, each report weighted by its modelled
    seconds; each ratio is clamped first, so one stalled report cannot decide the batch."""
    total = weighted = 0.0
    for report in batch:
        assert report.wall_time_s is not None  # observe() keeps only reports that measured it
        modelled = modelled_seconds(worker, model, report)
        ratio = min(max(report.wall_time_s / modelled, MIN_RATIO), MAX_RATIO)
        total, weighted = total + modelled, weighted + modelled * math.log(ratio)
    return weighted / total


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


def _worker_json(worker: Worker, model: ModelPreset) -> str:
    return json.dumps(
        {
            "device": dataclasses.asdict(worker.device),
            "num_gpus": worker.num_gpus,
            "max_num_seqs": worker.max_num_seqs,
            "kv_capacity_tokens": worker.kv_capacity_tokens,
            "model": model.name,
        }
    )


def _worker_from_json(worker_id: str, raw: object) -> tuple[Worker, ModelPreset] | None:
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


def _fingerprints(schedule_id: str, raw: object) -> dict[str, str]:
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


def _learned_scale(worker_id: str, raw: object, fingerprint: str) -> float | None:
    """The time scale a stored learned state holds; None when absent, when it does not read (or
    holds a scale the learner cannot reach: its samples are clamped to the ratio bounds), or when it
    was measured against another profile than ``fingerprint``, or an unknown one (a state from before
    fingerprints has none: the worker may have moved since, and a scale applied to the wrong profile
    is off by the ratio of the two, so it waits for ``MIN_SPEED_SAMPLES`` new reports instead)."""
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
    return math.exp(log_scale)
