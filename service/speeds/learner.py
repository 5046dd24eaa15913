"""Per-worker decode speed learned from actuals, fed back as ``Worker.time_scale`` in later plans.

Device profiles are datasheet numbers; a real engine runs slower or faster (kernels, interconnect,
thermal limits, a noisy neighbour). Each actual says how long a trajectory of known length took on a
worker running ``concurrency`` sequences; the cost model says how long it should have taken at
``time_scale = 1``. Their ratio is a sample of that worker's time scale. We keep an exponentially
weighted mean of log ratios per worker (log: a worker twice as slow and one twice as fast are
symmetric errors), one update per report batch at the batch's ratio (a step's reports end with its
slow tail; folded one by one, the last few would decide), in Redis so every replica plans with the
same speeds. The batch's ratio is its measured seconds over its modelled ones, i.e. its reports'
ratios weighted by their modelled seconds: fixed costs the model leaves out (HTTP) inflate short
items most, and a heavy-tailed batch is mostly short items (one vote each made a 0.25x engine read
0.44x); the long ones measure decoding. A ratio of sums, since the prefill stalls a report sat
through are modelled as those its own prompt caused, which holds only summed over a batch
(``speed_model.modelled_seconds``, ``speed_model.batch_log_ratio``). On a KV cache too small for
the sequences a sidecar keeps in flight, most wait inside the engine and some are preempted and
recomputed: plans charge that themselves (the planner's simulator plays the worker's cache), so the
modelled seconds are stretched by what that simulator says the cache cost the batch
(``service/speeds/kv.py``); read as slowness, a starved engine-sim learned 2-3x its true scale.
A later request that states no ``time_scale`` or ``decode_tokens_per_s`` for a worker gets the
learned one, once ``MIN_SPEED_SAMPLES`` reports stand behind it: until then the mean is the plain
mean of every report (no early report alone decides), and after it a batch of fewer reports moves it
by a proportionally smaller weight, so one absurd report can neither starve nor flood a worker.
A worker with no learned scale of its own (not measured yet, or since its profile changed) is
planned with the scale of the largest group of its measured peers in the same request, those planned
with the same profile (``peer_scales``; most of them, not their mean, which a straggler pulls), and
one whose profile has no measured worker with that of every measured worker's largest group: the
cost model's relative speeds of the kinds stand until a kind is measured (a kind at its profile's
1.0 beside one measured 20x faster was given nothing, so never measured). Reports without
``concurrency`` teach nothing about speed: a trajectory decoded in a batch of 100 is slower than one
decoded alone, and mistaking that for a slow worker would mislead every later plan.

Only workers that run something are measured, and a plan gives nothing to a worker it believes far
too slow: a wrong belief (a bad day, a neighbour since gone) would last forever. So each published
plan that leaves a worker idle while planning it by its learned scale multiplies that log scale's
distance from its anchor by ``IDLE_DECAY`` (20x the anchor: 4.5x, 2.1x, 1.45x), until a plan finds the
worker worth some work and its actuals re-measure it; a still-slow worker is learned slow again by
them. The anchor is the scale the workers given work would lend it unmeasured (its profile's peers',
else the fleet's), its profile's 0 only when none is measured: a fleet 20x faster than its datasheets
pulled towards 1.0 left its idle worker 20x slower than its peers for good (``idle_anchors``). A plan
that gives the worker any work leaves its scale alone (its actuals will speak), as do dry runs,
drained workers and shared-queue plans (every worker pulls from the one FIFO).

A report is a ratio to the profile its own step planned the worker with, which need not be the
latest one: a trainer may publish step N+1 on new hardware before it reports step N. Each publish
records the fingerprints it planned with in the schedule's meta, and a report that names its
``schedule_id`` measured against a profile other than the worker's current one teaches nothing (a
ratio to the old device says nothing of the new). A report without one, or of a schedule that
recorded none (an older release's, or expired), is compared with the current profile.

This module is the store (``SpeedLearner`` and its Lua); the rules above, as pure functions (samples,
fingerprints, peers, the stored JSON), are ``service/speeds/model.py``.

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
* ``keys.worker_seen`` (``<prefix>:workers:seen``) zset: worker id -> when a publish last named it
  (ms, this replica's clock). Each publish drops, from both hashes and from it, the workers no publish
  has named for the retention (``Settings.retention_s``; ``FORGET_BATCH`` a publish at most). A
  worker either hash holds and the zset lacks (written by a release before the zset, or rewritten
  by a publish while another replica forgot it) is marked seen at the next publish, so it ages out
  too: nothing else reads the hashes for what to forget.
None of the three expires: they describe the fleet, not a schedule. They hold one small entry per
worker a step named within the retention, not per worker ever seen: a worker id is often its pod's
name, and a run that reschedules pods left one entry behind for every name it ever used (a soak with
a pod rescheduled a step grew both hashes by one entry a step, docs/experiments.md, "Long-run
memory"). A worker back after longer than the retention is planned as a new one (its peers' scale,
``peer_scales``) until its actuals measure it again. A replica forgetting a worker while another
publishes it anew can drop the profile just written; its next publish writes it again.

* field ``keys.PLANNED_PROFILES`` of each published schedule's ``P:meta``: JSON worker id ->
  fingerprint it was planned with; written after the publish, only while the schedule exists, and
  expiring with it (the schedule's retention).
* fields ``keys.KV_ADMISSION`` and ``keys.ENGINE`` of the same ``P:meta``, written by the publish:
  read only. The engine's rules price a KV-starved batch (``service/speeds/kv.py``); a schedule that
  stored none (an older release's) ran on the fleet's engines, the service's ``default_engine``.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections import defaultdict
from collections.abc import Callable, Collection, Iterable, Sequence
from typing import Any, NamedTuple

from scheduler.devices import ModelPreset
from scheduler.sim_rules import ENGINES
from scheduler.types import Inventory, Worker
from service.api.learning_schemas import ActualReport
from service.delivery import keys
from service.delivery.views import text
from service.engines import SERVICE_ENGINE
from service.redis_conn import RedisClient
from service.speeds.model import (
    IDLE_DECAY,
    LOG_SCALE_BOUNDS,
    MIN_SPEED_SAMPLES,
    batch_log_ratio,
    idle_anchors,
    learned_scale,
    peer_scales,
    planned_on,
    profile_fingerprint,
    schedule_fingerprints,
    worker_from_json,
    worker_json,
)

# Folds one report batch's log ratio into a worker's EWMA atomically (replicas may race).
# ARGV: worker, alpha, the batch's log ratio (``batch_log_ratio``), its sample count, the log
# scale's bounds, and the fingerprint of the profile the ratio was measured against, MIN_SPEED_SAMPLES.
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

# Pulls an idle worker's learned log scale towards its anchor (``idle_anchors``), atomically (replicas
# may race). ARGV: worker, the fingerprint it was planned with, IDLE_DECAY, the anchor's log scale. A
# state measured against another profile, or one that does not read, is left alone: plans do not use it.
_DECAY = """
local raw = redis.call('HGET', KEYS[1], ARGV[1])
if not raw then return 0 end
local ok, state = pcall(cjson.decode, raw)
if not (ok and type(state) == 'table' and type(state.log_scale) == 'number'
    and state.profile == ARGV[2]) then
  return 0
end
local anchor = tonumber(ARGV[4])
state.log_scale = anchor + (state.log_scale - anchor) * tonumber(ARGV[3])
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


FORGET_BATCH = 1_000  # workers one publish forgets at most: a fleet renamed at once goes over a few

_log = logging.getLogger("service.speeds")


class Planned(NamedTuple):
    """What the schedules that reports name recorded of how they were planned (``SpeedLearner.planned``)."""

    # schedule id -> worker -> fingerprint of its profile, for the schedules that recorded them
    profiles: dict[str, dict[str, str]]
    admitted: set[str]  # the schedules whose sidecars admitted by projected KV peak (``kv_admission``)
    # schedule id -> the engine whose rules its plan was made for (``keys.ENGINE``), every schedule
    # asked for: one that stored none (an older release's, or expired) has the learner's default engine
    engines: dict[str, str]


class SpeedLearner:
    """Reads and updates learned per-worker time scales in Redis."""

    def __init__(
        self,
        client: RedisClient,
        alpha: float,
        prefix: str = keys.DEFAULT_PREFIX,
        retention_s: int = keys.DEFAULT_RETENTION_S,
        default_engine: str = SERVICE_ENGINE,
    ) -> None:
        self._redis = client
        self._alpha = alpha
        self._prefix = prefix
        self._default_engine = default_engine  # the service's: a schedule that stored no engine ran on it
        self._retention_ms = retention_s * 1000
        self.clock: Callable[[], float] = time.time  # seconds; when each worker was last named
        self.workers_key = keys.worker_profiles(prefix)
        self.speed_key = keys.learned_speeds(prefix)
        self.seen_key = keys.worker_seen(prefix)
        self._update = client.register_script(_UPDATE)
        self._decay = client.register_script(_DECAY)
        self._record = client.register_script(_RECORD)

    def remember(self, schedule_id: str, inventory: Inventory, idle: Iterable[str] = ()) -> None:
        """At publish: record each worker's profile (as planned, time scale excluded), as the one its
        next actuals are measured against and, fingerprinted, as the one ``schedule_id``'s are (a
        trainer may publish the next step on new hardware before it reports this one's). Then pull
        the learned scale of each ``idle`` worker (``idle_learned``) towards its anchor: the scale
        its busy peers would lend it, else its profile's (``idle_anchors``)."""
        model = inventory.model
        now_ms = int(self.clock() * 1000)
        pairs = [(w.worker_id, worker_json(w, model)) for w in inventory.workers]
        pipe = self._redis.pipeline(transaction=False)  # one round trip; each command on its own key
        # named first: a worker named now is never among those read as gone below
        pipe.zadd(self.seen_key, {w.worker_id: now_ms for w in inventory.workers})
        pipe.hset(self.workers_key, items=[part for pair in pairs for part in pair])
        before_ms = now_ms - self._retention_ms
        pipe.zrangebyscore(self.seen_key, "-inf", f"({before_ms}", start=0, num=FORGET_BATCH)
        pipe.hkeys(self.workers_key)
        pipe.hkeys(self.speed_key)
        *_, gone, profiled, measured = pipe.execute()
        self._adopt_unseen([*profiled, *measured], now_ms)
        self._forget(gone)
        planned = {w.worker_id: profile_fingerprint(w, model) for w in inventory.workers}
        meta = keys.schedule_keys(schedule_id, self._prefix).meta
        self._record(keys=[meta], args=[keys.PLANNED_PROFILES, json.dumps(planned, sort_keys=True)])
        idlers = list(idle)
        if not idlers:
            return
        ids = [w.worker_id for w in inventory.workers]
        raw = self._redis.hmget(self.speed_key, ids)
        own = {
            wid: scale
            for wid, value in zip(ids, raw, strict=True)
            if (scale := learned_scale(wid, value, planned[wid])) is not None
        }
        anchors = idle_anchors(ids, [planned[wid] for wid in ids], own, idlers)
        for wid in idlers:
            self._decay(keys=[self.speed_key], args=[wid, planned[wid], IDLE_DECAY, anchors[wid]])

    def _adopt_unseen(self, held: list[str], now_ms: int) -> None:
        """Mark seen now each worker of either hash that ``seen`` lacks, so it ages out with the
        retention: only ``seen`` is read for what to forget, and an id written before it existed (or
        rewritten by one replica while another forgot it) stayed in the hashes for good. ``NX``: a
        worker ``seen`` holds keeps its time."""
        if held:
            self._redis.zadd(self.seen_key, dict.fromkeys(held, now_ms), nx=True)

    def _forget(self, gone: list[str]) -> None:
        """Drop the profile and learned speed of ``gone``, workers no publish named for the retention
        (at most ``FORGET_BATCH`` a publish): without it both hashes held every worker id a run used."""
        if gone:
            self._redis.hdel(self.workers_key, *gone)
            self._redis.hdel(self.speed_key, *gone)
            self._redis.zrem(self.seen_key, *gone)  # last: a failure before it is retried next publish

    def learned(self, workers: Sequence[Worker], model: ModelPreset) -> dict[str, tuple[float, str]]:
        """Worker id -> (time scale, source) for ``workers``, against the profiles they are planned
        with now: ``learned``, its own; ``learned_group``, its group's, when its own lies within
        noise of other workers' of its profile (``service/speeds/groups.py``); ``learned_peers``, for
        a worker with none (never measured, or measured against another profile), that of the
        largest group of its peers in ``workers`` (same profile fingerprint) that have one;
        ``learned_fleet``, for a worker whose profile has none measured, that of the largest group
        of every measured worker in ``workers`` (``peer_scales``). Absent: no worker in ``workers``
        has one."""
        if not workers:
            return {}
        raw = self._redis.hmget(self.speed_key, [w.worker_id for w in workers])
        prints = [profile_fingerprint(w, model) for w in workers]
        own = {
            w.worker_id: scale
            for w, value, fingerprint in zip(workers, raw, prints, strict=True)
            if (scale := learned_scale(w.worker_id, value, fingerprint)) is not None  # (scale, samples)
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
        planned, admitted, engines = self.planned(
            {r.schedule_id for b in by_worker.values() for r in b if r.schedule_id}
        )
        updated: dict[str, float] = {}
        for wid, reports_of_worker in by_worker.items():
            profile = worker_from_json(wid, profiles[wid])
            if profile is None:
                continue  # never published to, or by a format this release cannot read: no model
            worker, model = profile
            now = profile_fingerprint(worker, model)
            # a report planned on a profile the worker has left is a ratio to that one, not to this
            batch = [r for r in reports_of_worker if planned_on(r, planned, now)]
            if not batch:
                continue
            # one update per batch, at its ratio: folding the samples one by one left the estimate to
            # the last few reported (a step's slow tail: 1.15 where the step's mean was 1.0)
            ratio = batch_log_ratio(worker, model, batch, admitted, engines, self._default_engine)
            args: list[Any] = [wid, self._alpha, ratio, len(batch)]
            args += [*LOG_SCALE_BOUNDS, now, MIN_SPEED_SAMPLES]
            updated[wid] = math.exp(float(self._update(keys=[self.speed_key], args=args)))
        return updated

    def planned(self, schedule_ids: Collection[str]) -> Planned:
        """What ``schedule_ids`` recorded of their planning, in one round trip, from any replica.

        Profiles: a schedule that recorded none (published by an older release, or expired with its
        schedule) is absent, and its reports are compared with each worker's current profile.
        Admitted: nothing of theirs waited inside an engine for its cache
        (``speed_model.batch_log_ratio``). Engines: the rules its engine played it by, which price
        a KV-starved batch; one the schedule did not store (an older release's, or expired) is the
        learner's default, the service's ``default_engine``: the engine the fleet runs."""
        ids = sorted(schedule_ids)
        if not ids:
            return Planned({}, set(), {})
        fields = [keys.PLANNED_PROFILES, keys.KV_ADMISSION, keys.ENGINE]
        pipe = self._redis.pipeline(transaction=False)
        for sid in ids:
            pipe.hmget(keys.schedule_keys(sid, self._prefix).meta, fields)
        metas = pipe.execute()
        found = {sid: schedule_fingerprints(sid, raw) for sid, (raw, _, _) in zip(ids, metas, strict=True)}
        admitted = {sid for sid, (_, flag, _) in zip(ids, metas, strict=True) if flag in ("1", b"1")}
        engines = {
            sid: self._known(sid, None if engine is None else text(engine))
            for sid, (*_, engine) in zip(ids, metas, strict=True)
        }
        return Planned({sid: prints for sid, prints in found.items() if prints}, admitted, engines)

    def _known(self, schedule_id: str, engine: str | None) -> str:
        """``engine`` when this release knows its rules, else the default: none stored (an older
        release's schedule), or one a newer release named, which must not fail the reports' request
        (they are stored already); that one is logged."""
        if engine is None or engine in ENGINES:
            return engine or self._default_engine
        _log.warning(
            "schedule %s: engine %r unknown here; its reports are priced as %s",
            schedule_id,
            engine,
            self._default_engine,
        )
        return self._default_engine
