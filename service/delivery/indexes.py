"""Announcing a schedule: the reapers' index of active schedules and each worker's inbox, and retiring it.

A sidecar looks for work in its inbox, a reaper walks the active index; neither scans keys. Both are
sorted sets outside the schedule's hash slot (single-key commands, so any slot of a Redis Cluster),
written after the schedule's atomic publish in a second round trip. So they are kept right by
repair, not atomicity: every publish, replay and cancel re-derives them from the schedule's own
counts, and a schedule that has settled is retired however the two raced. Each inbox's own write is
atomic, though (``_INBOX``): its entry and its expiry land together or not at all, since a repair
comes only with the next announce to that worker. The reapers' lapse index
(when each active schedule's next lease can lapse) is kept here too. ``Delivery`` inherits this;
kept apart so each module reads in one sitting.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from typing import NamedTuple

from redis.cluster import RedisCluster
from redis.commands.core import Script
from redis.exceptions import RedisClusterException

from service.delivery import announcing
from service.delivery import keys as keyspace
from service.delivery.errors import (
    NODE_DOWN,
    OUT_OF_MEMORY,
    REDIS_FAILED,
    SLOT_NOT_SERVED,
    IndexNodeDown,
    UnknownScheduleError,
)
from service.delivery.planning_keep import KEEP, keep_each
from service.delivery.scripts import evaluate
from service.delivery.unanswered import Unanswered
from service.delivery.views import DeliveryViews, text

# What one reaper pass works on, in one script on the indexes' slot: KEYS[1] the active index, KEYS[2]
# the lapse index, KEYS[3] the announcing index; ARGV[1] now in ms ('' = this server's clock, as
# lua/common.lua reads it), ARGV[2] how old (server ms) an announcing entry must be, ARGV[3] at most how
# many (0: none read). Answers {the schedules due, the announcing entries with their scores, oldest
# first}. Entries of the lapse index whose schedule left the active index are dropped (only a reaper's
# write can leave one: a reap that settled its schedule, whose retire ran first).
_WALK = """
local t = redis.call('TIME')
local clock = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local now = tonumber(ARGV[1]) or clock
local quiet, live, due, gone = {}, {}, {}, {}
local entries = redis.call('ZRANGE', KEYS[2], 0, -1, 'WITHSCORES')
for i = 1, #entries, 2 do quiet[entries[i]] = tonumber(entries[i + 1]) end
for _, sid in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
  live[sid] = true
  if not quiet[sid] or quiet[sid] < now then due[#due + 1] = sid end
end
for sid, _ in pairs(quiet) do
  if not live[sid] then gone[#gone + 1] = sid end
end
for i = 1, #gone, 4000 do
  redis.call('ZREM', KEYS[2], unpack(gone, i, math.min(i + 3999, #gone)))
end
local listed = {}
if tonumber(ARGV[3]) > 0 then
  local upto = clock - tonumber(ARGV[2])
  listed = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', upto, 'WITHSCORES', 'LIMIT', 0, ARGV[3])
end
return {due, listed}
"""

# Announce one schedule in one worker's inbox, atomically: KEYS[1] the inbox; ARGV the schedule id, its
# publish time (ms, the score), the pruning horizon (ms: older entries go) and the inbox's life (ms;
# only ever extended, so a schedule kept for less time does not cut a longer one's short). As ZADD
# then PEXPIRE in two round trips, a crash between them left a new inbox without an expiry, for good
# if its worker never came back (no later announce to repair it). One key: any slot of a cluster.
_INBOX = """
redis.call('ZADD', KEYS[1], ARGV[2], ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', '(' .. ARGV[3])
if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[4]) then redis.call('PEXPIRE', KEYS[1], ARGV[4]) end
"""

# Add one schedule to its step's set (``keys.step_schedules``), atomically: KEYS[1] the set; ARGV the
# schedule id and the set's life (ms; only ever extended, as an inbox's). One key: any slot of a cluster.
_STEP = """
redis.call('SADD', KEYS[1], ARGV[1])
if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[2]) then redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
"""

# A request of a step that will publish, from its arrival until it ends (``keys.step_planning``):
# KEYS[1] the zset; ARGV the member and its life (ms). Scored by a deadline in Redis's clock, so every
# replica reads entries alike; entries past theirs (a replica that died mid-request) are pruned, and
# the key lives as long as its latest entry. One key: any slot of a cluster.
_PLANNING = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', '(' .. now)
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[2]) then redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
"""

# How many entries of ``keys.step_planning`` (KEYS[1]) are not past their deadline (read-only).
PLANNING_NOW = """
local t = redis.call('TIME')
return redis.call('ZCOUNT', KEYS[1], tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000), '+inf')
"""


class ReapingWalk(NamedTuple):
    """What one reaper pass read (``DeliveryIndexes.walk_for_reaping``)."""

    due: list[str]  # active schedules a lease of which may have lapsed, oldest first
    listed: list[tuple[str, str]]  # the announcing index's entries old enough: (schedule id, score)


class DeliveryIndexes(DeliveryViews):
    """The active index and the worker inboxes of one deployment; ``Delivery`` adds the atomic steps."""

    _walk: Script | None = None  # ``_WALK``, registered on first use
    marks: announcing.MarkScripts | None = None  # the announce's mark, registered on first use
    # schedule id -> retention (s) of this process's announces whose listing did not land (the active
    # index's node did not answer): ``announcing.relist``'s, set by ``ScriptCalls.__init__``
    unlisted: dict[str, int]

    def announce(self, schedule_id: str, retention_s: int) -> bool:
        """Announce a stored schedule again; ``UnknownScheduleError`` when there is none. Whether it
        was announced (False: settled or cancelled, retired instead).

        ``publish`` stores atomically, then announces in a second round trip; a timeout or OOM in
        between leaves a schedule no sidecar sees. The caller's retry (same ``schedule_id``) is one
        who knows, so the refusal of that retry repairs it here (idempotent); a reaper is the other,
        where the announce's mark says it did not reach every inbox (``announcing.reannounce``), or
        this process's, where its announce could not list it (``unlisted``: ``announcing.relist``).
        """
        info = self.info(schedule_id)
        return self._announce(schedule_id, sorted(set(info.workers) - set(info.drained)), retention_s)

    def enter_step(self, step: int, schedule_id: str, retention_s: int) -> None:
        """Record ``schedule_id`` as a part of ``step``, for the retention (``keys.step_schedules``):
        called once its publish stored and announced it, by the request that published it only (a
        loser of its id's race changes nothing). The announce put it in the active index, which holds
        it until it settles, and before the announce no sidecar can claim from it: no moment passes
        where a part that may have run is in neither and an asked-for retrain cannot see it
        (``service.learning.step_over``: a part that settled before any of its actuals arrived is in
        no other index). One round trip, any slot."""
        key = keyspace.step_schedules(step, self.prefix)
        pipe = self.client.pipeline(transaction=False)  # typed ``execute_command``, as ``_announce``'s
        pipe.execute_command("EVAL", _STEP, 1, key, schedule_id, retention_s * 1000)
        pipe.execute()

    def enter_planning(self, step: int, member: str, life_ms: int) -> None:
        """Record a request of ``step`` that will publish, for ``life_ms`` at most
        (``keys.step_planning``): a part of the step not yet in its set nor the active index, which
        an asked-for retrain must take for not over. One round trip, any slot."""
        key = keyspace.step_planning(step, self.prefix)
        pipe = self.client.pipeline(transaction=False)  # typed ``execute_command``, as ``enter_step``'s
        pipe.execute_command("EVAL", _PLANNING, 1, key, member, life_ms)
        pipe.execute()

    def keep_planning(
        self, members: Mapping[int, Sequence[str]], life_ms: int, unanswered: Unanswered | None = None
    ) -> dict[int, Exception]:
        """Push ``enter_planning``'s entries (``members`` by step) of requests still alive to
        ``life_ms`` past now, where they are still there and that is later: a request that overruns
        the life it was written for (``service.pipeline.step_keeper``). Answers the steps not kept,
        each with its error: on a Redis Cluster only, a pipeline per master, a master that did not answer
        asked once a pass (``planning_keep.py``). A single Redis: one round trip, its failure raised
        (the whole server, told to ``unanswered`` first, so the pass asks it nothing more)."""
        unanswered = Unanswered(self.client) if unanswered is None else unanswered
        client = self.client  # narrowed, not ``self.client``: its pipeline stays the union's (typed)
        if isinstance(client, RedisCluster):
            return keep_each(client, self.prefix, members, life_ms, unanswered)
        pipe = self.client.pipeline(transaction=False)
        for step, names in members.items():
            pipe.execute_command("EVAL", KEEP, 1, keyspace.step_planning(step, self.prefix), life_ms, *names)
        try:
            pipe.execute()
        except NODE_DOWN as error:
            unanswered.met(keyspace.step_planning(next(iter(members)), self.prefix), error)
            raise
        return {}

    def leave_planning(self, step: int, member: str) -> None:
        """Take back ``enter_planning``'s entry (the key goes with its last entry). One round trip."""
        self.client.zrem(keyspace.step_planning(step, self.prefix), member)

    def _announce(self, schedule_id: str, workers: Sequence[str], retention_s: int) -> bool:
        """Index the schedule for reapers and each worker's inbox (single-key commands: any slot);
        whether it was announced.

        A schedule that is already finished (a replay after the work was done, or an empty one) or
        cancelled is retired instead, so replays never put finished work back in front of the sidecars.
        On a Redis Cluster each node's indexes are sent apart (``_each_node``): one pipeline for all
        failed whole on one dead master, so no inbox nor the reapers' index held the stored schedule
        (announce64); now that node's error is raised after the others are announced, and the
        caller's retry (same ``schedule_id``, ``announce``) repairs the inboxes it missed, or a reaper
        does: the schedule is marked before the writes and listed with the active index's entry,
        the mark cleared once every node answered (``announcing.py``: no call more than before).
        Where the listing itself did not land (the active index's node down), this process's reaper
        announces it again once that node answers (``unlisted``: in memory, ops66). A node out of
        memory is met as one down (ops67): its refusal raised after the others' writes (a 503, never
        an announce taken for done), the mark kept, and the schedule ``unlisted`` where it was the
        active index's node.
        """
        keys = self.keys(schedule_id)
        self.marks = self.marks or announcing.MarkScripts.on(self.client)
        begun = announcing.begin(self.client, self.marks, keys, retention_s)
        if begun is None:
            self.unlisted.pop(schedule_id, None)
            self._retire(schedule_id)
            return False
        missed: list[str] = []
        try:
            writes = self._announce_writes(schedule_id, workers, retention_s, *begun)
            self._each_node(writes, "announcing a stored schedule in its indexes", missed=missed)
        except NODE_DOWN + SLOT_NOT_SERVED + OUT_OF_MEMORY:
            if keyspace.active_index(self.prefix) in missed:  # nothing the reapers walk lists it
                self.unlisted[schedule_id] = retention_s
            else:
                self.unlisted.pop(schedule_id, None)
            with contextlib.suppress(*REDIS_FAILED):  # the announce's error is the one raised
                self._settled_check(keys, complete=False)
            raise
        self.unlisted.pop(schedule_id, None)
        return self._settled_check(keys, complete=True)

    def _announce_writes(
        self, schedule_id: str, workers: Sequence[str], retention_s: int, published: int, marked: int
    ) -> dict[str, list[tuple[object, ...]]]:
        """An announce's commands by key: the active index's first (``_each_node`` sends its node
        first), the announcing index's entry first of all (``marked``: the server's ms at ``BEGIN``),
        so whatever of that pipeline ran lists the schedule for the reapers before any inbox is
        written; then the lapse index and each worker's inbox (``_INBOX``)."""
        horizon = published - retention_s * 1000
        # Pruning needs a later announce to the same worker; an expiry does not (a departed worker).
        life_ms = (retention_s + keyspace.INBOX_MARGIN_S) * 1000
        active, lapse = keyspace.active_index(self.prefix), keyspace.lapse_index(self.prefix)
        writes: dict[str, list[tuple[object, ...]]] = {
            active: [
                ("ZADD", keyspace.announcing_index(self.prefix), marked, schedule_id),  # its slot
                ("ZADD", active, published, schedule_id),
                ("ZREMRANGEBYSCORE", active, "-inf", f"({horizon}"),
            ],
            lapse: [("ZREM", lapse, schedule_id)],  # a re-publish is reaped at once
        }
        for worker in workers:  # the body, not its SHA: no NOSCRIPT to rerun, on any node of a cluster
            inbox = keyspace.inbox(worker, self.prefix)  # (whose pipelines refuse ``eval``, not the command)
            writes[inbox] = [("EVAL", _INBOX, 1, inbox, schedule_id, published, horizon, life_ms)]
        return writes

    def _settled_check(self, keys: keyspace.ScheduleKeys, complete: bool) -> bool:
        """After an announce's writes: its mark cleared where ``complete`` (``announcing.END``); a
        schedule settled or cancelled meanwhile retired (that retire may have run before the announce,
        which undid it), answering False."""
        assert self.marks is not None  # registered by the announce
        if announcing.end(self.client, self.marks, keys, complete):
            return True
        self._retire(keys.schedule_id)
        return False

    def _each_node(
        self,
        writes: Mapping[str, Sequence[tuple[object, ...]]],
        doing: str,
        hold_back: str | None = None,
        missed: list[str] | None = None,
    ) -> None:
        """Send ``writes`` (each key's commands) in one pipeline per node the cluster client's map
        sends the keys to, each whatever the others answer; the first that failed is raised after
        the rest, a node that did not answer as ``IndexNodeDown``, a slot not served as it is
        (``SLOT_NOT_SERVED``: its node's "Hash slot not served", or a slot the map sends nowhere,
        once the retries and map refresh of the client's pipeline are spent), a node out of memory
        as it is (``OUT_OF_MEMORY``: its ZADDs and inbox scripts refused, its ZREMs run; ops67), and
        the names of every pipeline that failed, or was not sent, go in ``missed``.
        ``hold_back``'s node, where given, is sent last, and not at all where another failed
        (``_retire``), and ``hold_back``'s own commands last in its pipeline: a pipeline cut short
        (its node gone mid-way, a command of it redirected to a node down) has run a head of it, so
        ``hold_back`` stays where any other did not land. A single Redis: one pipeline. Until ops66
        a slot not served, until ops67 an out-of-memory refusal, was raised at once, the nodes after
        it not sent: other workers were not announced the schedule, or not retired from it."""
        client = self.client
        names = list(writes)
        groups: dict[str | None, list[str]] = (
            _by_node(client, names) if isinstance(client, RedisCluster) else {None: names}
        )
        failed: Exception | None = None
        missed = [] if missed is None else missed
        for node in sorted(groups, key=lambda n: hold_back in groups[n]):  # stable: hold_back's last
            group = groups[node]
            if failed is not None and hold_back in group:
                missed += group
                break
            try:
                self._send(group, writes, hold_back)
            except NODE_DOWN + SLOT_NOT_SERVED + OUT_OF_MEMORY as error:
                missed += group
                down = node is not None and isinstance(error, NODE_DOWN)
                failed = failed or (IndexNodeDown(str(node), error, doing) if down else error)
        if failed is not None:
            raise failed

    def _send(
        self, names: Sequence[str], writes: Mapping[str, Sequence[tuple[object, ...]]], last: str | None
    ) -> None:
        """One pipeline of ``names``' writes, in their order but for ``last``'s, which go last."""
        pipe = self.client.pipeline(transaction=False)
        for command in (c for name in sorted(names, key=lambda n: n == last) for c in writes[name]):
            pipe.execute_command(*command)
        pipe.execute()

    def _retire(self, schedule_id: str) -> None:
        """Drop a finished schedule from the indexes; its keys stay until retention for reading.

        On a Redis Cluster, one pipeline per node the client's map sends the indexes to, each sent
        whatever the others answer: a node that does not answer is raised as its own
        (``IndexNodeDown``), and a slot not served as it is, after the others' indexes are retired
        (``_each_node``). One pipeline for them all raised
        redis-py's bare "Connection refused" or timeout, naming no node, which its callers took for the
        schedule's master's, whose script had just answered (review53b). The active index's node is
        sent last, and not where another did not answer, and its removal from that index last on it:
        the schedule stays in the reapers' index wherever some removal may not have landed, so a
        reaper's pass over it (a reap of a settled schedule answers it settled) retires it again."""
        try:
            workers = self.info(schedule_id).workers
        except UnknownScheduleError:
            workers = ()
        active = keyspace.active_index(self.prefix)
        lapse, listed = keyspace.lapse_index(self.prefix), keyspace.announcing_index(self.prefix)
        names = [active, lapse, listed, *(keyspace.inbox(w, self.prefix) for w in workers)]
        writes = {name: [("ZREM", name, schedule_id)] for name in names}
        # kept in the active index where another node did not answer: a reaper's pass retires it again
        self._each_node(writes, "retiring a settled schedule from its indexes", hold_back=active)

    def due_for_reaping(self, now_ms: int | None = None) -> list[str]:
        """Active schedules, oldest first, a lease of which may have lapsed by now (the lease clock,
        or ``now_ms``): those whose time in the lapse index passed (a lease lapses once now is past
        its deadline, as ``lua/reap.lua`` reads it), and those it has none for (new, or failing to
        reap). ``walk_for_reaping``'s first part, the announcing index not read."""
        return self.walk_for_reaping(now_ms, count=0).due

    def walk_for_reaping(
        self,
        now_ms: int | None = None,
        after_ms: int = keyspace.REANNOUNCE_AFTER_MS,
        count: int = keyspace.REANNOUNCE_BATCH,
    ) -> ReapingWalk:
        """What one reaper pass works on, in one script on the indexes' slot (``_WALK``): the
        schedules due (``due_for_reaping``), and up to ``count`` entries of the announcing index at
        least ``after_ms`` old on that node's clock, oldest first (``announcing.reannounce``). The
        script also drops the lapse entries of schedules no longer active. So a pass with nothing
        to do is one command, on Redis Cluster too (reannounce65 had made it two: ops66).

        On Redis Cluster the clock is the indexes' node's, not the schedule's: a skew between the
        two delays a reap by as much (milliseconds under NTP, against lease ttls of seconds).
        """
        if self._walk is None:
            self._walk = self.client.register_script(_WALK)
        names = [keyspace.active_index(self.prefix), keyspace.lapse_index(self.prefix)]
        names.append(keyspace.announcing_index(self.prefix))
        args = ["" if now_ms is None else now_ms, after_ms, count]
        due, flat = evaluate(self.client, self._walk, names, args)
        listed = [(text(flat[i]), text(flat[i + 1])) for i in range(0, len(flat), 2)]
        return ReapingWalk([text(s) for s in due], listed)

    def defer_reaping(self, quiet_until_ms: Mapping[str, int]) -> None:
        """Record, per schedule just reaped, when its next lease can lapse at the earliest (the
        reap's ``quiet_until_ms``): passes until then skip it. Any such time stays a true bound
        (a later lease's deadline is its writer's now + ttl), so replicas' writes may land in any order."""
        if quiet_until_ms:
            self.client.zadd(keyspace.lapse_index(self.prefix), dict(quiet_until_ms))


def _by_node(client: RedisCluster, names: Sequence[str]) -> dict[str | None, list[str]]:
    """``names`` by the node the client's map sends each to (its name; None where the map sends it
    nowhere: its slot not covered, whose pipeline the client sends after a refresh of its map, or
    fails with the slot's error), in order."""
    groups: dict[str | None, list[str]] = {}
    for name in names:
        try:
            node: str | None = str(client.get_node_from_key(name).name)  # type: ignore[no-untyped-call]
        except RedisClusterException:
            node = None
        groups.setdefault(node, []).append(name)
    return groups
