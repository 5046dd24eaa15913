"""Every Redis key and time-to-live the product uses, in one place: the delivery protocol's and the
service's own fleet-wide keys (actuals, learned speeds, retrain coordination).

All keys of one schedule share the hash tag ``{schedule_id}``, so they live in ONE hash slot and every
Lua script below runs unchanged on Redis Cluster (a script may only touch keys of one slot). The Lua
scripts build the per-worker queue names themselves from the same pattern (``prefix:{sid}:q:<worker>``);
because they carry the same tag they are in the same slot, which cluster mode allows.

Per-schedule keys (``P`` = ``<prefix>:{<schedule_id>}``):

==========================  =======  ==============================================================
key                         type     contents
==========================  =======  ==============================================================
``P:meta``                  hash     fingerprint, total, lease_ttl_ms, max_attempts, kv_admission,
                                     published_ms, expire_at_ms, workers (JSON list of the
                                     announced workers: not the drained ones), fence (the
                                     fencing-token counter), affinity (``1``: prefix affinity),
                                     nonce (of the publishing call: its re-send is not a replay),
                                     request (digest of the step's work as the trainer asked for
                                     it: a reused ``schedule_id`` with other work is refused;
                                     written by the publish with ``P:answer``),
                                     cancelled_ms, cancelled_queued, cancelled_running (once the
                                     trainer cancelled it: when, and how many items it ended),
                                     makespan_s (the plan's predicted makespan, seconds after
                                     published_ms), planned_finish (JSON: worker -> the plan's
                                     predicted finish, seconds after published_ms); both absent on
                                     schedules published before they were stored, or unknown;
                                     profiles (JSON: worker -> fingerprint of the profile it was
                                     planned with, ``service/speeds.py``; written by the service
                                     after the publish, only while the schedule exists: a late
                                     actual is compared with its own step's profile);
                                     drained (JSON list: the request's drained workers, absent
                                     when none; ``lua/common.lua`` ``drained``: no claim, steal or
                                     retry hands them anything, and they are not announced);
                                     pulse (server ms when a claim, steal, heartbeat, completion,
                                     release, reap or reset last ran on it, rewritten at most every
                                     sixteenth of the lease TTL; a silence past half a TTL was an
                                     outage: ``lua/common.lua`` ``pulse``), graced (how many lease
                                     deadlines outages moved, docs/delivery.md "Redis outages";
                                     present once one did: heartbeats then clear ``P:graced``)
``P:items``                 hash     item key -> ``<ref>\t<static item JSON without its payload>``
                                     (prompt, lengths); ``ref`` names its payload in ``P:prompts``
                                     ('' for none); the claim scripts return the whole JSON
``P:prompts``               hash     ref -> payload JSON, stored once for all the items that share
                                     it (a prompt's samples; absent: no payloads)
``P:st``                    hash     item key -> ``state|token|attempts|deadline_ms|predicted|worker|
                                     reserve``; state ``q`` queued, ``r`` running, ``d`` done (token =
                                     the accepted one), ``x`` dead, ``c`` cancelled (was queued or
                                     running when the trainer cancelled); worker = queue holding it or
                                     holder; reserve = KV tokens at predicted length (steal gate)
``P:deadlines``             zset     running item key -> lease deadline (ms); the reaper's index
``P:work``                  zset     worker -> predicted seconds still queued: its queued predicted
                                     tokens x its ``P:pace`` (steal victim choice, as the simulator)
``P:pace``                  hash     worker -> predicted seconds per predicted token, from the plan;
                                     field ``*`` = default for workers the plan did not describe
``P:pin``                   hash     pinned item key -> ``1``: never stolen (absent: no pins)
``P:grp``                   hash     item key -> its group, only under prefix affinity (a steal
                                     moves a whole, wholly queued, never started group, or all
                                     that a dead worker left queued of one)
``P:gsize``                 hash     group -> its number of items, only under prefix affinity
``P:cap``                   hash     worker -> its KV cache in tokens, when the publisher knows it
                                     (``PublishedSchedule.kv_capacity_tokens``, from the inventory);
                                     a worker not named takes anything (absent: no limit)
``P:need``                  hash     item key -> prompt + max_new_tokens, only for items that some
                                     cache in ``P:cap`` cannot hold: a claim or steal never hands
                                     such an item to a worker whose ``P:cap`` is below it (the
                                     simulator's ``can_hold``); absent: every cache holds it
``P:due``                   hash     item key -> ``start|end``: when the plan predicts its planned
                                     worker starts and finishes it (lease clock, ms; publish time +
                                     ``DeliveryItem.planned_start_ms`` / ``deadline_ms``). A steal
                                     takes it only if the thief would finish it by ``end`` (moved
                                     back by the owner's lateness); absent: no deadline guard
``P:seen``                  zset     worker -> when it last claimed, stole or heartbeated in this
                                     schedule (lease clock, ms; rewritten at most every quarter
                                     lease TTL): a failed item's next attempt goes only to a worker
                                     seen within a lease TTL
``P:tried``                 hash     item key -> the workers whose attempt at it was reported failed
                                     (space-separated, in order; written only by a ``fail``): its
                                     next attempt goes to a worker not among them when one may
                                     take it
``P:graced``                hash     item key -> token of its lease an outage graced (deadline moved
                                     to the end of the silence + lease TTL, ``lua/common.lua``
                                     ``pulse``), until its holder heartbeats it (``heartbeat.lua``
                                     deletes the field): a lease is graced once per silence of its
                                     holder, so a dead holder's lease still lapses
``P:handback``              hash     item key -> how many times a current lease of it was handed
                                     back because its process died: a restarted sidecar's reset
                                     (``lua/reset.lua``), a restarted pull worker's ``/reset`` or an
                                     engine that crashed under it (``lua/release.lua`` mode
                                     ``died``). The first
                                     ``RESET_REFUNDS`` refund the attempt, each later one spends it,
                                     so an item whose run kills its process is dead-lettered after
                                     ``max_attempts`` (``lua/common.lua`` ``hand_back``; absent: never
                                     handed back so)
``P:counts``                hash     ``q|r|d|f|c`` totals and ``q:<w>|r:<w>|d:<w>|f:<w>|c:<w>`` per
                                     worker (``c``: cancelled, only after a cancel)
``P:q:<worker>``            list     the worker's ordered queue; head = next to start
``P:q:*``                   list     shared FIFO for shared-queue policies (``Plan.dispatch_order``);
                                     under prefix affinity laid out group by group (groups in order
                                     of their first item): a claim takes a group's first item with
                                     the rest of the group behind it, as the simulator binds it
``P:calls``                 hash     ``claim <worker>`` / ``steal <worker>`` -> that worker's last
                                     claim / steal that leased anything:
                                     ``<call id>\n<victim>\n<token> <key>\n...``; the same call
                                     re-sent after a lost reply answers those leases again
``P:answer``                string   the ``POST /schedule`` answer that published it, without its
                                     timings (``z1:`` + base64 of zlib'd JSON,
                                     ``service/republish.py``), written by the publish in the same
                                     atomic step as the schedule (absent: published by an older
                                     release, or not by the service): a retry under the id is
                                     answered it. ~10 B a trajectory (bench redis-memory)
``P:dead``                  list     dead letters as JSON (key, worker, attempts, reason, at_ms)
``P:results``               stream   accepted results, one entry per item, read by the trainer
==========================  =======  ==============================================================

Index keys (outside any schedule's slot, touched by single-key commands, but for the one script
that reads the active and lapse indexes together, which share a slot):

* ``<prefix>:active`` (zset): schedule id -> publish time (ms); schedules the reaper walks. No TTL:
  a schedule leaves it when it settles or is cancelled, and at the first reaper pass after its keys
  expired (and entries older than the retention on each announce), so it holds unsettled schedules only.
* ``<prefix>:lapse:{<prefix>:active}`` (zset): schedule id -> a time (ms, the lease clock) until which
  none of its leases has lapsed, so reapers pass it over until then (``reaper.reap_all``): the
  earliest lease deadline its last reap left, or that reap's now + lease ttl if sooner (a lease
  written later gets its writer's now + ttl), and no later than now + a third of the ttl while a
  lease runs (those visits tell an outage from holders that all died: ``lua/common.lua``
  ``pulse``). Only reapers add to it; a schedule absent is reaped at the next pass. An announce or
  retire removes the schedule's entry, and each pass the entries of schedules no longer in
  ``<prefix>:active``. No TTL: it holds active schedules only. Tagged with the active index's name,
  so both share a slot and one script reads them (``due_for_reaping``).
* ``<prefix>:inbox:{<worker>}`` (zset): schedule id -> publish time (ms); what a sidecar pulls.
  Expires ``retention + INBOX_MARGIN_S`` after its latest announce (server clock; only ever
  extended), so the inbox of a worker that never returns goes with its last schedule.
* ``<prefix>:sidecar:{<worker>}`` (string): the instance id (random, per process) of the sidecar (push
  or pull mode) running as that worker, rewritten every third of ``PRESENCE_TTL_MS`` and expiring
  after it; deleted by that process when it exits gracefully. A sidecar starting under the worker id
  reads it to tell a predecessor that died (the key lapses within ``PRESENCE_TTL_MS``: its leases are
  handed back at once, ``service/sidecar/takeover.py``) from a second live sidecar misconfigured with
  the same id (the key is rewritten: nothing is handed back, and both log an error). Its own slot, as
  the inbox's.

Time-to-live: every per-schedule key expires at ``meta.expire_at_ms`` = publish time + retention
(``DEFAULT_RETENTION_S``); scripts that (re)create a key re-apply that absolute deadline, so a late
write never makes a key immortal. Index entries older than the retention are pruned on each announce.

Fleet-wide keys of the service (``service/actuals.py``, ``speeds.py``, ``retrain.py``), each touched
by single-key commands or single-key scripts only (the actuals append script touches the stream and
its ``seen`` zset, which share a hash slot), so they work on Redis Cluster too:

============================================  =======  =======================================================
key                                           type     contents; time-to-live
============================================  =======  =======================================================
``<prefix>:actuals``                          stream   one entry per reported trajectory (field ``a`` = report
                                                       JSON); no TTL (the predictor's history), capped near
                                                       ``Settings.actuals_maxlen`` entries (``XADD MAXLEN ~``)
``<prefix>:actuals:seen:{<prefix>:actuals}``  zset     digest of each report the stream holds -> its entry's
                                                       ordinal (entries-added): a report sent again is not
                                                       stored again. No TTL: trimmed with the stream on each
                                                       append (the digests of entries it no longer holds go),
                                                       so it holds no more entries than the stream. Its hash
                                                       tag ``{<prefix>:actuals}`` is the stream's name, so
                                                       both share a slot and one script writes them (on Redis
                                                       Cluster too)
``<prefix>:workers``                          hash     worker id -> profile and model preset it was last
                                                       planned with (written at publish); no TTL, one entry
                                                       per worker
``<prefix>:speed``                            hash     worker id -> ``{"log_scale", "samples", "profile"}``,
                                                       the learned time scale and the fingerprint of the
                                                       profile it is a ratio to; no TTL, one entry per worker
``<prefix>:retrain:step``                     string   last step an automatic retrain was started for; no TTL
``<prefix>:retrain:lock``                     string   random owner token while one replica retrains; renewed
                                                       while it runs, released on shutdown, else expires after
                                                       ``RETRAIN_LOCK_TTL_S`` so a crashed replica frees it
============================================  =======  =======================================================
"""

from __future__ import annotations

import re
from dataclasses import dataclass

DEFAULT_PREFIX = "rs"
_PREFIX = re.compile(r"[A-Za-z0-9_.:-]{1,64}")  # no braces (hash tags), globs or spaces
DEFAULT_LEASE_TTL_MS = 30_000  # a lease lives this long after its last heartbeat
DEFAULT_MAX_ATTEMPTS = 3  # leases of one item (claims or steals; a release refunds its) before dead-lettering
RESET_REFUNDS = 1  # hand-backs of one item after its process died (a restarted sidecar's reset, a pull
# worker's /reset, a crashed engine) that refund its attempt; each later one spends it: an item whose
# run kills its process is dead-lettered after max_attempts, not handed back refunded for ever
DEFAULT_RETENTION_S = 24 * 3600  # how long a schedule's keys (results included) are kept
INBOX_MARGIN_S = 60  # an inbox outlives its newest announce by the retention plus this (clock skew)
MAX_BATCH = 1000  # most items one claim/steal leases (Lua unpack limits the batch)
SHARED_QUEUE = "*"  # worker-name of the shared FIFO; not a valid worker id
PRESENCE_TTL_MS = 5_000  # a sidecar's presence key lapses this long after its process died: the
# longest a restarted sidecar waits before handing back its predecessor's leases (not the lease TTL)
RETRAIN_LOCK_TTL_S = 60  # the retrain lock's life, renewed every third of it while the fit runs:
# a replica that dies mid-retrain holds it back at most this long (1M rows fit in ~30 s on 2 cores)

# Field names of the per-worker counters in ``P:counts`` (``<state>:<worker>``) and the totals.
QUEUED, RUNNING, DONE, FAILED, CANCELLED = "q", "r", "d", "f", "c"
# Fields of ``P:meta`` that ``lua/cancel.lua`` writes: when the schedule was cancelled (lease clock,
# ms), and how many queued and running items that ended; absent while it is not cancelled.
CANCELLED_AT, CANCELLED_QUEUED, CANCELLED_RUNNING = "cancelled_ms", "cancelled_queued", "cancelled_running"
REQUEST_DIGEST = "request"  # field of ``P:meta``: the publishing request's work digest (service/republish.py)
# Fields of ``P:meta`` that ``lua/publish.lua`` writes: when it was published (lease clock, ms), and
# what the plan predicts (absent on schedules an older release published): read by progress.
PUBLISHED_AT, PREDICTED_MAKESPAN, PLANNED_FINISH = "published_ms", "makespan_s", "planned_finish"
# Field of ``P:meta`` that ``service/speeds.py`` writes after the publish: worker -> the fingerprint
# of the profile the schedule planned it with (absent on schedules published before it was stored).
PLANNED_PROFILES = "profiles"
# Field of ``P:meta`` that ``lua/publish.lua`` writes when the request drained workers: their ids, a
# JSON list (absent: none drained). Claims, steals and a failed item's retry hand them nothing.
DRAINED = "drained"


def count_field(state: str, worker_id: str) -> str:
    """The ``P:counts`` field of one worker's counter in ``state`` (``QUEUED`` ... ``FAILED``).

    Built here so Python readers spell it as the Lua writers do: ``count`` in ``lua/common.lua``,
    the initial counts in ``lua/publish.lua`` and the stall check in ``lua/steal.lua`` all write
    ``state .. ':' .. worker``; change one, change all.
    """
    return f"{state}:{worker_id}"


@dataclass(frozen=True, slots=True)
class ScheduleKeys:
    """The names of one schedule's keys; ``base`` carries the ``{schedule_id}`` hash tag."""

    prefix: str  # namespace shared by every key of this deployment
    schedule_id: str  # the schedule these keys belong to

    @property
    def base(self) -> str:
        """``<prefix>:{<schedule_id>}``: every key below starts with it, so all share one slot."""
        return f"{self.prefix}:{{{self.schedule_id}}}"

    @property
    def meta(self) -> str:
        """Schedule settings, fingerprint and the fencing-token counter."""
        return f"{self.base}:meta"

    @property
    def items(self) -> str:
        """Item key -> ``<ref>\t<static item JSON without its payload>`` (payload: ``prompts``)."""
        return f"{self.base}:items"

    @property
    def prompts(self) -> str:
        """Payload JSON by ref, once per distinct payload (the samples of a prompt share one)."""
        return f"{self.base}:prompts"

    @property
    def counts(self) -> str:
        """Progress counters, totals and per worker."""
        return f"{self.base}:counts"

    @property
    def answer(self) -> str:
        """The service's answer to the request that published the schedule (a retry is answered it)."""
        return f"{self.base}:answer"

    @property
    def dead(self) -> str:
        """Dead-letter list."""
        return f"{self.base}:dead"

    @property
    def results(self) -> str:
        """Stream of accepted results."""
        return f"{self.base}:results"

    @property
    def st(self) -> str:
        """Item key -> packed record ``state|token|attempts|deadline_ms|predicted|worker|reserve``."""
        return f"{self.base}:st"

    @property
    def deadlines(self) -> str:
        """Running item key -> lease deadline, ms."""
        return f"{self.base}:deadlines"

    @property
    def work(self) -> str:
        """Worker -> predicted seconds of work still queued (tokens x the worker's pace)."""
        return f"{self.base}:work"

    @property
    def pace(self) -> str:
        """Worker -> predicted seconds per predicted token (``*``: the default)."""
        return f"{self.base}:pace"

    @property
    def due(self) -> str:
        """Item key -> ``start|end`` ms: its planned run on its owner (the steal deadline guard)."""
        return f"{self.base}:due"

    @property
    def cap(self) -> str:
        """Worker -> KV capacity in tokens: claims and steals give it nothing it cannot hold."""
        return f"{self.base}:cap"

    @property
    def calls(self) -> str:
        """Worker -> its last claim or steal that leased: a re-sent call answers those leases."""
        return f"{self.base}:calls"

    @property
    def need(self) -> str:
        """Item key -> prompt + max_new_tokens, for items some published cache cannot hold."""
        return f"{self.base}:need"

    @property
    def seen(self) -> str:
        """Worker -> when it last showed life in this schedule (ms): where a failed item may go."""
        return f"{self.base}:seen"

    @property
    def graced(self) -> str:
        """Item key -> token of its lease an outage graced, until its holder heartbeats again."""
        return f"{self.base}:graced"

    @property
    def handback(self) -> str:
        """Item key -> hand-backs by a restarted sidecar: past ``RESET_REFUNDS`` they spend attempts."""
        return f"{self.base}:handback"

    @property
    def tried(self) -> str:
        """Item key -> the workers whose attempt at it failed: its next attempt goes elsewhere."""
        return f"{self.base}:tried"

    def queue(self, worker_id: str) -> str:
        """A worker's ordered queue (``SHARED_QUEUE`` names the shared FIFO)."""
        return f"{self.base}:q:{worker_id}"

    @property
    def pattern(self) -> str:
        """``SCAN MATCH`` glob for every key of this schedule (the table above, queues included).

        For tools that size or delete a whole schedule: a key added to the table is matched
        without their knowing its name. A hash tag's braces are not glob characters, so the
        pattern matches this schedule's keys only (as long as its id holds no ``* ? [ ] \\``).
        """
        return f"{self.base}:*"


class PrefixError(ValueError):
    """A refused key prefix. Its message names the value (the sidecars' ``--prefix`` line needs it);
    ``reason`` is the rule alone, for a line that shows the value already (``serve``'s settings)."""

    def __init__(self, prefix: str, reason: str) -> None:
        super().__init__(f"key prefix {prefix!r} {reason}")
        self.reason = reason


def check_prefix(prefix: str) -> str:
    """``prefix`` if every key built on it keeps its meaning; ``PrefixError`` naming the rule otherwise.

    A brace would move the ``{schedule_id}`` hash tag (a schedule's keys then span Cluster slots), and
    a glob character would make the ``<prefix>:*`` scans match other deployments' keys.
    """
    if not _PREFIX.fullmatch(prefix):
        raise PrefixError(prefix, "must be 1-64 of A-Z a-z 0-9 _ . : -")
    return prefix


def schedule_keys(schedule_id: str, prefix: str = DEFAULT_PREFIX) -> ScheduleKeys:
    """Return the key names of one schedule."""
    return ScheduleKeys(prefix=prefix, schedule_id=schedule_id)


def all_keys_pattern(prefix: str = DEFAULT_PREFIX) -> str:
    """``SCAN MATCH`` glob for every key under ``prefix``: all schedules, indexes and fleet keys.

    Only for wiping a namespace of its own (a benchmark's throw-away prefix), built here so such
    a sweep covers whatever keys this module adds. ``check_prefix`` keeps glob characters out of
    a prefix; a prefix that another deployment's extends (``rs`` and ``rs:x``) matches its keys too.
    """
    return f"{prefix}:*"


def active_index(prefix: str = DEFAULT_PREFIX) -> str:
    """Zset of live schedule ids (score: publish ms); the reaper walks it."""
    return f"{prefix}:active"


def lapse_index(prefix: str = DEFAULT_PREFIX) -> str:
    """Zset: active schedule id -> lease-clock ms until which none of its leases lapse (reapers').

    Tagged ``{<prefix>:active}``: the active index's name has no braces, so it hashes on its whole
    name, and this key lands in its slot: the due-for-reaping script may read both on Redis Cluster.
    """
    return f"{prefix}:lapse:{{{active_index(prefix)}}}"


def inbox(worker_id: str, prefix: str = DEFAULT_PREFIX) -> str:
    """Zset of schedule ids announced to one worker (score: publish ms); its own hash slot."""
    return f"{prefix}:inbox:{{{worker_id}}}"


def sidecar_presence(worker_id: str, prefix: str = DEFAULT_PREFIX) -> str:
    """String: the instance id of the live sidecar of ``worker_id`` (``PRESENCE_TTL_MS``)."""
    return f"{prefix}:sidecar:{{{worker_id}}}"


# -- fleet-wide keys of the service (not per schedule; see the table above) ----------------------------


def actuals_stream(prefix: str = DEFAULT_PREFIX) -> str:
    """Stream of reported actuals, the predictor's training history (no TTL; length-capped)."""
    return f"{prefix}:actuals"


def actuals_seen(prefix: str = DEFAULT_PREFIX) -> str:
    """Zset: digest of each report the actuals stream holds -> its entry's ordinal (trimmed with it).

    Tagged ``{<prefix>:actuals}``: the stream's name has no braces, so it hashes on its whole name,
    and this key lands in its slot: the append script may touch both on Redis Cluster.
    """
    return f"{prefix}:actuals:seen:{{{actuals_stream(prefix)}}}"


def worker_profiles(prefix: str = DEFAULT_PREFIX) -> str:
    """Hash: worker id -> the profile it was last planned with, to compare its actuals against."""
    return f"{prefix}:workers"


def learned_speeds(prefix: str = DEFAULT_PREFIX) -> str:
    """Hash: worker id -> learned time scale (EWMA of log ratios), shared by every replica."""
    return f"{prefix}:speed"


def retrain_step(prefix: str = DEFAULT_PREFIX) -> str:
    """String: the last step an automatic retrain covered (replicas compare-and-set it)."""
    return f"{prefix}:retrain:step"


def retrain_lock(prefix: str = DEFAULT_PREFIX) -> str:
    """String: held with ``RETRAIN_LOCK_TTL_S`` while one replica retrains."""
    return f"{prefix}:retrain:lock"
