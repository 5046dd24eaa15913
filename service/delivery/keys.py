r"""Every Redis key and time-to-live the product uses, in one place: the delivery protocol's and the
service's own fleet-wide keys (actuals, learned speeds, retrain coordination).

All keys of one schedule share the hash tag ``{schedule_id}``, so they live in ONE hash slot and every
Lua script runs unchanged on Redis Cluster (a script may only touch keys of one slot). The scripts build
the per-worker queue names themselves from the same pattern (``prefix:{sid}:q:<worker>``); no prefix
may hold a brace that would move the tag (``service/delivery/key_prefix.py``).

The tables below name every key, its type, what it holds in a line and its time-to-live. What each key
holds field by field, and why: docs/delivery.md, "Key layout" (and the sections it points to); the
fleet-wide keys' writers: docs/api.md. A key added here goes in those tables too
(``tests/service/delivery/test_key_docs.py`` holds all three to the keys the code builds).

Per-schedule keys (``P`` = ``<prefix>:{<schedule_id>}``):

==========================  =======  ==============================================================
key                         type     contents
==========================  =======  ==============================================================
``P:meta``                  hash     settings (fingerprint, total, lease_ttl_ms, max_attempts,
                                     kv_admission, affinity, expire_at_ms), fence (token counter),
                                     nonce, request (work digest), workers and drained (JSON lists),
                                     published_ms, makespan_s, planned_finish, profiles,
                                     cancelled_ms|_queued|_running, pulse, graced, pinq, holds,
                                     engine, announcing (an announce not seen to reach every inbox)
``P:items``                 hash     item key -> ``<ref>\t<static item JSON without its payload>``
``P:prompts``               hash     ref -> payload JSON, once for the items that share it
``P:st``                    hash     item key -> ``state|token|attempts|deadline_ms|predicted|worker|
                                     reserve``; state ``q`` ``r`` ``d`` ``x`` (dead) ``c`` (cancelled)
``P:deadlines``             zset     running item key -> lease deadline (ms); the reaper's index
``P:work``                  zset     worker -> predicted seconds still queued (steal victim choice)
``P:pace``                  hash     worker -> predicted seconds per predicted token (``*``: default)
``P:pin``                   hash     pinned item key -> ``1``: never stolen
``P:grp``                   hash     item key -> its group (prefix affinity only)
``P:gsize``                 hash     group -> its number of items (prefix affinity only)
``P:cap``                   hash     worker -> its KV cache in tokens (absent: no limit)
``P:need``                  hash     item key -> prompt + max_new_tokens, where some ``P:cap`` is smaller
``P:gneed``                 hash     item key -> the largest ``P:need`` of its group (affinity only)
``P:due``                   hash     item key -> ``start|end`` ms of its planned run (steal guard)
``P:seen``                  zset     worker -> when it last claimed, stole or heartbeated (ms)
``P:tried``                 hash     item key -> the workers whose attempt at it failed
``P:failed``                hash     item key -> ``<token>:<worker>`` of each lease whose failure was
                                     taken (space-separated): a repeat of one is answered duplicate
``P:graced``                hash     item key -> token of its lease an outage graced
``P:handback``              hash     item key -> hand-backs after its process died (``RESET_REFUNDS``)
``P:released``              hash     item key -> ``<token>:<worker>:<code>`` of its last hand-back
                                     taken: a repeat of it is answered duplicate (or dead-lettered)
``P:counts``                hash     ``q|r|d|f|c`` totals and ``<state>:<worker>`` (``count_field``)
``P:q:<worker>``            list     the worker's ordered queue; head = next to start
``P:q:*``                   list     shared FIFO for shared-queue policies (``SHARED_QUEUE``)
``P:u:<worker>``            list     the unpinned items of a queue that holds pins, in its order (steals)
``P:h:<cap>:<worker>``      list     a queue's unpinned items a ``<cap>`` cache holds, in its order (steals)
``P:calls``                 hash     ``claim|steal <worker>`` -> ``<call id>\n<victim>\n<token> <key>...``
                                     ``reset <worker>`` -> ``<call id>\n<released> <lapsed> <dead> <charged>``
``P:answer``                string   the ``POST /schedule`` answer, ``z1:`` + base64 of zlib'd JSON
``P:planning``              hash     request nonce -> ``accepted:deadline`` (ms): ``POST /schedule`` in flight
``P:withdrawn``             string   when a DELETE withdrew the id in flight (ms): publish refused
``P:dead``                  list     dead letters as JSON (key, worker, attempts, reason, at_ms)
``P:results``               stream   accepted results, one entry per item, read by the trainer
==========================  =======  ==============================================================

Index keys (outside any schedule's slot; single-key commands, but for the one script that reads the
active and lapse indexes together, which share a slot):

* ``<prefix>:active`` (zset): schedule id -> publish time (ms); the schedules reapers walk. No TTL: it
  holds unsettled schedules only (one leaves when it settles, is cancelled or its keys expired).
* ``<prefix>:lapse:{<prefix>:active}`` (zset): schedule id -> lease-clock ms until which none of its
  leases has lapsed (``reaper.reap_all`` skips it until then). No TTL: active schedules only. Tagged
  with the active index's name, so one script reads both (``walk_for_reaping``).
* ``<prefix>:announcing:{<prefix>:active}`` (zset): schedule id -> server ms its latest announce began;
  written first in the active index's pipeline, in its slot, and read with it by one script
  (``walk_for_reaping``). No TTL: reapers drop an entry once its schedule's ``P:meta`` ``announcing``
  is cleared (every inbox answered) or it settled, and a retire drops it
  (``service/delivery/announcing.py``).
* ``<prefix>:inbox:{<worker>}`` (zset): schedule id -> publish time (ms); what a sidecar pulls. Expires
  ``retention + INBOX_MARGIN_S`` after its latest announce (only ever extended).
* ``<prefix>:sidecar:{<worker>}`` (string): the instance id of the live sidecar of that worker,
  rewritten every third of ``PRESENCE_TTL_MS`` and expiring after it (``service/sidecar/takeover.py``).

Time-to-live: every per-schedule key expires at ``meta.expire_at_ms`` = publish time + retention
(``DEFAULT_RETENTION_S``); scripts that (re)create a key re-apply that absolute deadline, so a late
write never makes a key immortal. Index entries older than the retention are pruned on each announce.
Two keys come before a publish: ``P:withdrawn`` lives the retention, or what the ``P:planning`` it
replaces had left if longer (``lua/cancel.lua``), ``P:planning`` the plan queue's timeout + the
request's budget (what a caller's deadline leaves of it: ``Deadline.capped_s``) + ``PLANNING_MARGIN_S``:
the latest deadline of its entries (``lua/planning.lua``: a mark extends it, a take-back sets it
from the entries left; the publish deletes it). A mark is written for the command timeout, extended to
that TTL once answered (a lost answer's lapses soon), and kept while its request lives (``step_keeper``).

Fleet-wide keys of the service (its actuals log ``service/learning/actuals.py``, its speed
store in ``service/speeds/learner.py`` and its retrainer ``service/learning/retrain.py``), each
touched by single-key commands or single-key scripts only (the actuals append script touches the
stream and its ``seen`` zset, which share a hash slot), so they work on Redis Cluster too. Their names
are built in ``service/delivery/fleet_keys.py`` (a family apart, kept there to keep this module short)
and re-exported here: import them from here, as every other key:

============================================  =======  =====================================================
key                                           type     contents; time-to-live
============================================  =======  =====================================================
``<prefix>:actuals``                          stream   one entry per reported trajectory; no TTL, capped
                                                       near ``Settings.actuals_maxlen`` (``MAXLEN ~``)
``<prefix>:actuals:seen:{<prefix>:actuals}``  zset     report digest -> its entry's ordinal; no TTL,
                                                       trimmed with the stream (its slot: its hash tag)
``<prefix>:workers``                          hash     worker id -> profile and model it was last planned
                                                       with; no TTL, one entry per worker a publish named
                                                       within the retention (``<prefix>:workers:seen``)
``<prefix>:speed``                            hash     worker id -> learned time scale and its profile's
                                                       fingerprint; no TTL, as ``<prefix>:workers``
``<prefix>:workers:seen``                     zset     worker id -> when a publish last named it (ms);
                                                       no TTL: each publish drops the workers (here and
                                                       in the two hashes above) unnamed for the retention
``<prefix>:retrain:step``                     string   last step a retrain was started for; no TTL
``<prefix>:retrain:lock``                     string   owner token while one replica retrains; renewed,
                                                       else expires after ``RETRAIN_LOCK_TTL_S``
``<prefix>:retrain:fence``                    string   the last fencing token a retrain took with the
                                                       lock (a counter); no TTL
``<prefix>:step:<step>``                      set      ids of the schedules of that step, each added once
                                                       published; TTL the retention, renewed by each publish
``<prefix>:step:<step>:planning``             zset     ``<schedule_id> <request id>`` -> deadline (Redis
                                                       ms) of a publishing request of that step, from its
                                                       arrival until it ends; TTL the latest deadline
============================================  =======  =====================================================
"""

from __future__ import annotations

from dataclasses import dataclass

# The service's fleet-wide keys are built in fleet_keys.py (a family of their own, the table above) and
# the default prefix beside the prefix rule in key_prefix.py; both are named here, with every other key.
from service.delivery.fleet_keys import RETRAIN_LOCK_TTL_S as RETRAIN_LOCK_TTL_S
from service.delivery.fleet_keys import actuals_seen as actuals_seen
from service.delivery.fleet_keys import actuals_stream as actuals_stream
from service.delivery.fleet_keys import learned_speeds as learned_speeds
from service.delivery.fleet_keys import retrain_fence as retrain_fence
from service.delivery.fleet_keys import retrain_lock as retrain_lock
from service.delivery.fleet_keys import retrain_step as retrain_step
from service.delivery.fleet_keys import step_planning as step_planning
from service.delivery.fleet_keys import step_schedules as step_schedules
from service.delivery.fleet_keys import worker_profiles as worker_profiles
from service.delivery.fleet_keys import worker_seen as worker_seen
from service.delivery.key_prefix import DEFAULT_PREFIX as DEFAULT_PREFIX

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
PLANNING_MARGIN_S = 60  # ``P:planning`` outlives a request's wait in line and budget by this
# A reaper announces a schedule again once its entry in the announcing index is this old (server ms)
# and its mark still holds: its announce is over by then (a few ms where every node answers).
REANNOUNCE_AFTER_MS = 2_000
REANNOUNCE_BATCH = 64  # most schedules of the announcing index one reaper pass looks at

# Field names of the per-worker counters in ``P:counts`` (``<state>:<worker>``) and the totals.
QUEUED, RUNNING, DONE, FAILED, CANCELLED = "q", "r", "d", "f", "c"
# Fields of ``P:meta`` that ``lua/cancel.lua`` writes (when, lease clock ms; queued and running ended).
CANCELLED_AT, CANCELLED_QUEUED, CANCELLED_RUNNING = "cancelled_ms", "cancelled_queued", "cancelled_running"
REQUEST_DIGEST = "request"  # ``P:meta``: the publishing request's work digest (pipeline/republish.py)
# Fields of ``P:meta`` that ``lua/publish.lua`` writes: when (lease clock, ms), what the plan predicts.
PUBLISHED_AT, PREDICTED_MAKESPAN, PLANNED_FINISH = "published_ms", "makespan_s", "planned_finish"
PLANNED_PROFILES = "profiles"  # ``P:meta``, speeds/learner.py's after a publish: worker -> profile planned
# Fields of ``P:meta`` that ``lua/publish.lua`` writes. KV_ADMISSION: "1" when sidecars admit by projected
# KV peak (the plan's ``kv_admission``), read by progress and the speed learner (nothing waited in the
# engine). DRAINED: the drained workers' ids, a JSON list (absent: none); claims, steals and a failed
# item's retry hand them nothing. ENGINE: the engine whose rules the plan was made for
# (``scheduler.sim_rules``), read by the speed learner (a KV-starved batch is priced by them) and by
# progress; absent on schedules an older release published: its default engine, progress None.
KV_ADMISSION, DRAINED, ENGINE = "kv_admission", "drained", "engine"
# ``P:meta``: the retention (s) of an announce begun and not yet seen to reach every inbox; written before
# its writes (and by the publish's script as it stores the schedule: ops67), cleared once every node
# answered (``service/delivery/announcing.py``).
ANNOUNCING = "announcing"


def count_field(state: str, worker_id: str) -> str:
    """The ``P:counts`` field of one worker's counter in ``state`` (``QUEUED`` ... ``FAILED``), spelled
    as the Lua writers do (``count`` in ``lua/common.lua``, ``lua/publish.lua``'s initial counts,
    ``lua/steal.lua``'s stall check: ``state .. ':' .. worker``); change one, change all."""
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
        r"""Item key -> ``<ref>\t<static item JSON without its payload>`` (payload: ``prompts``)."""
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
    def planning(self) -> str:
        """The ``POST /schedule`` requests in flight under the id (``service/pipeline/in_flight.py``):
        a DELETE that finds one withdraws the id (``lua/cancel.lua``), one that finds none writes nothing."""
        return f"{self.base}:planning"

    @property
    def withdrawn(self) -> str:
        """Set by a DELETE of an id in flight (``lua/cancel.lua``, TTL above): its publish refused, 409."""
        return f"{self.base}:withdrawn"

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
    def gneed(self) -> str:
        """Under prefix affinity, item key -> the largest ``P:need`` of its group: a steal moves whole
        groups, so its indexes for small caches hold or leave out whole groups."""
        return f"{self.base}:gneed"

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
    def failed(self) -> str:
        """Item key -> ``<token>:<worker>`` of each lease whose failure ``release.lua`` took: a failure
        report sent again after a lost answer is told ``duplicate``, not ``stale`` (as a completion)."""
        return f"{self.base}:failed"

    @property
    def released(self) -> str:
        """Item key -> ``<token>:<worker>:<code>`` of its last hand-back ``release.lua`` took: a release
        sent again after a lost answer (a failover at a drain) is told ``duplicate``, not ``stale``."""
        return f"{self.base}:released"

    @property
    def tried(self) -> str:
        """Item key -> the workers whose attempt at it failed: its next attempt goes elsewhere."""
        return f"{self.base}:tried"

    def queue(self, worker_id: str) -> str:
        """A worker's ordered queue (``SHARED_QUEUE`` names the shared FIFO)."""
        return f"{self.base}:q:{worker_id}"

    def unpinned(self, worker_id: str) -> str:
        """The unpinned items of a worker's queue that holds pins, in queue order: what a steal reads."""
        return f"{self.base}:u:{worker_id}"

    def holdable(self, cap: int | str, worker_id: str) -> str:
        """A worker's unpinned queued items a ``cap``-token cache holds, in queue order, what a thief with
        that cache reads (only caps below some item's need; under affinity, whole groups: ``gneed``)."""
        return f"{self.base}:h:{cap}:{worker_id}"

    @property
    def pattern(self) -> str:
        """``SCAN MATCH`` glob for every key of this schedule (the table above, queues included), for
        tools that size or delete a whole schedule (an id without ``* ? [ ] \\``)."""
        return f"{self.base}:*"


def schedule_keys(schedule_id: str, prefix: str = DEFAULT_PREFIX) -> ScheduleKeys:
    """Return the key names of one schedule."""
    return ScheduleKeys(prefix=prefix, schedule_id=schedule_id)


def all_keys_pattern(prefix: str = DEFAULT_PREFIX) -> str:
    """``SCAN MATCH`` glob for every key under ``prefix``, only for wiping a namespace of its own (a
    benchmark's throw-away prefix); one another deployment's extends (``rs``, ``rs:x``) matches its keys."""
    return f"{prefix}:*"


def active_index(prefix: str = DEFAULT_PREFIX) -> str:
    """Zset of live schedule ids (score: publish ms); the reaper walks it."""
    return f"{prefix}:active"


def lapse_index(prefix: str = DEFAULT_PREFIX) -> str:
    """Zset: active schedule id -> lease-clock ms until which none of its leases lapse (reapers').

    Tagged ``{<prefix>:active}``: the active index's name has no braces, so it hashes on its whole
    name, and this key lands in its slot: a reaper pass's one script may read both on Redis Cluster.
    """
    return f"{prefix}:lapse:{{{active_index(prefix)}}}"


def announcing_index(prefix: str = DEFAULT_PREFIX) -> str:
    """Zset: schedule id -> server ms its latest announce began (or its publish, listed ahead of its
    script: ``announcing.list_ahead``, ops67), until a reaper saw that announce (or a later one) reach
    every inbox; tagged ``{<prefix>:active}``, so it is written first in the active index's pipeline
    and read with the active and lapse indexes by a reaper pass's one script
    (``DeliveryIndexes.walk_for_reaping``)."""
    return f"{prefix}:announcing:{{{active_index(prefix)}}}"


def inbox(worker_id: str, prefix: str = DEFAULT_PREFIX) -> str:
    """Zset of schedule ids announced to one worker (score: publish ms); its own hash slot."""
    return f"{prefix}:inbox:{{{worker_id}}}"


def sidecar_presence(worker_id: str, prefix: str = DEFAULT_PREFIX) -> str:
    """String: the instance id of the live sidecar of ``worker_id`` (``PRESENCE_TTL_MS``)."""
    return f"{prefix}:sidecar:{{{worker_id}}}"
