"""The reaper: expire lapsed leases of every active schedule, from any number of service replicas.

Each pass runs the atomic reap script on every active schedule a lease of which may have lapsed, so
two replicas reaping at once never requeue an item twice: the second finds nothing left to expire.
Each reap tells when that schedule's next lease can lapse at the earliest; the pass records it in the
lapse index (``keys.lapse_index``) and later passes skip the schedule until then. A pass over N
schedules with none lapsed was N script runs and N round trips a second on every replica (1,000:
~5,000 commands); now it is one script, which reads the announcing index too (below: ops66, where
reannounce65 had made it two), plus a reap per schedule that falls due (docs/experiments.md).
Leases lapse only when heartbeats stop (deadline = last heartbeat + lease ttl), so a long trajectory
on a live worker is never reclaimed however long it runs; nor when Redis was out of everyone's reach:
the first script after the silence graces the leases that were running (``lua/common.lua``
``pulse``), and a schedule with a running lease falls due every third of its ttl so that these visits
tell such a silence from holders that all died (docs/delivery.md, "Redis outages").

Each pass then announces again the schedules whose announce did not reach every worker's inbox (a
master down during the publish, the client never retrying), once their node answers
(``announcing.reannounce``): their mark is in Redis, so any replica's reaper does it, after a restart too.
One whose announce could not list it (the active index's own master down) is known only to the process
that announced it, whose reaper announces it again once that master answers (``announcing.relist``).

A reaper given ``ready`` runs a pass only while it answers True: the service's asks the server's
version (``redis_conn.VersionCheck``). Started while Redis was down, the service's reaper had gone on
running its script every second on a server that came back too old, taking back leases, while every
route answered 503 ``redis-too-old``.

A pass can be cut at shutdown (the service's stop waits one command timeout for it: a stalled Redis
would hold it three, its retries). That loses nothing. Each reap is one script, so a schedule's
reap either ran whole or not at all. The leases of a reap not answered are reaped by the next pass of
any replica, and they are requeued once (the script finds them lapsed only once). A lapse-index entry
that was not recorded makes the next pass visit that schedule once more.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection
from functools import partial

import redis

from service.delivery import keys as keyspace
from service.delivery.announcing import reannounce, relist
from service.delivery.errors import OUT_OF_MEMORY, REDIS_FAILED, UnknownScheduleError
from service.delivery.outcomes import ReapReport
from service.delivery.protocol import Delivery
from service.delivery.reach import Reach
from service.periodic import Outage, Periodic

log = logging.getLogger(__name__)
DEFAULT_INTERVAL_S = 1.0  # how often a replica reaps; lease ttl should be several times larger
LOGGED_WORKERS = 16  # worker ids named per lapse line; a whole node lost is still one readable line


def reap_all(
    delivery: Delivery,
    now_ms: int | None = None,
    unserved: list[Exception] | None = None,
    reach: Reach | None = None,
    last: Collection[str] = (),
    due: list[str] | None = None,
) -> dict[str, ReapReport]:
    """One pass over the active schedules that may hold a lapsed lease (``Delivery.due_for_reaping``);
    expired schedules are dropped from the index.

    A schedule whose script fails (keys written by something else, or by a bad setting before it was
    bounded) is logged and skipped: one such schedule had stopped the reaping of every other, and
    their lapsed leases then stayed running until it expired. Connection errors still end the pass on
    a single Redis. A schedule whose Redis Cluster slot is not served now (``SLOT_NOT_SERVED``), or
    whose master does not answer (its connection refused), is skipped too, the others reaped (a
    cluster that serves its other slots: ``reach.py``), and its error is an outage, not damage: put in
    ``unserved``, or raised once the pass is over when none is given. Taken for a damaged schedule, it
    was an error line a pass for each schedule due while a master failed over; raised at once, it
    ended the pass, and a schedule of a served slot due after it was never reaped (a master down: so
    until it came back, measured: helper claimslot48).

    The schedules in ``last`` (the last pass's ``reach.missing``: ``Reaper`` keeps them) are reaped
    after the others due, and the caller's ``reach`` tells what this pass missed, also when it raised
    as an outage: in the due order, two schedules of failed masters first raised every pass before
    any served schedule was reaped (helper reaper49). A pass's own ``reach`` learns which slots are
    unserved from the first that fails, and passes the others over unasked (``reach.py``): each was a
    call of 0.26 s (helper cluster50). A schedule whose master did not answer is reaped at a failover's
    new master in the same pass, the map read again (``Reach.sent``: review52c), not a pass later.
    ``due``: what is due, where the caller read it already (``Reaper``'s pass, with the announcing
    index: ``walk_for_reaping``); None: read here.

    A node out of memory (ops67) refuses a reap that would requeue (nothing of it ran: not taken for
    done, no lapse entry, reaped next pass) and the lapse index's ZADD; either is told as an outage
    with the rest (``unserved``), after the pass: the reports of the reaps that ran are returned.
    Before, a reap's refusal was logged as a damaged schedule at every pass, and the lapse index's
    raised out of the pass, the requeues its reaps had made never told to ``on_reap`` nor logged.
    """
    reports: dict[str, ReapReport] = {}
    refused: list[Exception] = []  # reaps, or the lapse entries, a node out of memory refused
    reach = Reach(delivery.client, delivery.prefix, learns=True) if reach is None else reach
    due = delivery.due_for_reaping(now_ms) if due is None else due
    for schedule_id in _missed_last(due, last):
        if reach.passed_over(schedule_id):  # its slot or master failed already this pass
            continue
        try:
            reports[schedule_id] = reach.sent(schedule_id, partial(delivery.reap, schedule_id, now_ms))
        except UnknownScheduleError:
            delivery.client.zrem(keyspace.active_index(delivery.prefix), schedule_id)
        except reach.catches as error:  # tried again next pass, its slot served or not
            reach.missed(schedule_id, error)
            continue
        except OUT_OF_MEMORY as error:  # its master refused the requeue: no lapse entry, next pass
            refused.append(error)
        except redis.ResponseError as error:  # no lapse entry: tried again next pass
            log.error("reaping schedule %s failed, skipped: %s", schedule_id, error)
        reach.got(schedule_id)  # gone, or its script's error: an answer all the same
    try:  # lost, the schedules are reaped again next pass (nothing lapsed: no writes)
        delivery.defer_reaping({sid: report.quiet_until_ms for sid, report in reports.items()})
    except REDIS_FAILED as error:
        refused.append(error)
    errors = list(dict.fromkeys(reach.missing.values())) + refused[:1]
    if errors and unserved is None:
        raise errors[0]
    if unserved is not None:
        unserved += errors
    return reports


def _missed_last(due: list[str], last: Collection[str]) -> list[str]:
    """``due`` with the schedules of ``last`` moved to its end, each part in its own order."""
    missed = set(last)
    return [sid for sid in due if sid not in missed] + [sid for sid in due if sid in missed]


class Reaper:
    """A daemon thread running ``reap_all`` every ``interval_s``; ``start``/``stop`` are idempotent."""

    def __init__(
        self,
        delivery: Delivery,
        interval_s: float = DEFAULT_INTERVAL_S,
        on_reap: Callable[[ReapReport], None] | None = None,
        ready: Callable[[], bool] | None = None,
    ) -> None:
        """Prepare (not start) a reaper on ``delivery``; ``on_reap`` is told what each pass took back
        from each schedule that had lapsed leases (the service counts them in its metrics); while
        ``ready`` answers False (the server too old) no pass runs."""
        self.delivery = delivery
        self.interval_s = interval_s
        self.on_reap = on_reap
        self.ready = ready
        self.passes = 0  # completed passes, for health checks and tests
        self._missed: set[str] = set()  # the last pass's schedules not reached: reaped last
        # A lapsed lease means a worker stopped heartbeating (a lost node, a killed sidecar): a warning.
        # A Redis outage is said when it starts and when it ends, not once a pass: at one pass a second
        # a long outage buried everything else in the log.
        self._periodic = Periodic(
            "delivery-reaper",
            self._pass_if_ready,
            interval_s,
            Outage(log, "reaper pass failed: %s", ended="reaper passes go through again"),
            rides_out=REDIS_FAILED,  # Redis down, failing over, or resharding: try again next pass
            at_once=True,
        )

    def start(self) -> Reaper:
        """Start reaping in the background."""
        self._periodic.start()
        return self

    def halt(self) -> None:
        """Start no pass after the current one (``stop`` waits for it)."""
        self._periodic.halt()

    def stop(self, timeout_s: float = 5.0) -> bool:
        """Stop after the current pass, waiting ``timeout_s`` at most for it; whether it ended. A pass
        still on Redis then is cut (it loses nothing: see above), and its client's pool must be left
        open: a connection closed mid-reply fails it with an error that is not a Redis one."""
        return self._periodic.stop(timeout_s)

    def _pass_if_ready(self) -> bool:
        """A pass, unless ``ready`` says no (the server too old; it raises while Redis is down)."""
        if self.ready is not None and not self.ready():
            return False
        self._pass()
        return True

    def _pass(self) -> None:
        """One pass over every active schedule; lapsed leases reported and logged; the announces
        again (``announcing``); then the first error of a cluster slot not served now, if any (the
        outage ``_run`` logs once). What it did not reach, also when it raised, goes last in the
        next pass. What is due and what is listed are one read (``walk_for_reaping``)."""
        unserved: list[Exception] = []
        reach = Reach(self.delivery.client, self.delivery.prefix, learns=True)  # its own thread
        walk = self.delivery.walk_for_reaping()  # one script: what is due, what is listed
        try:
            reports = reap_all(self.delivery, unserved=unserved, reach=reach, last=self._missed, due=walk.due)
        finally:
            if reach.missing or reach.answered:  # the walk ran: not a failed read of what is due
                self._missed = set(reach.missing)
        reannounce(self.delivery, listed=walk.listed)  # after the reaps: a node down costs them nothing
        relist(self.delivery)  # this process's announces that the active index's node missed
        for schedule_id, report in reports.items():
            if report.requeued or report.dead_lettered:
                if self.on_reap is not None:
                    self.on_reap(report)
                _log_lapsed(schedule_id, report)
        if unserved:
            raise unserved[0]
        self.passes += 1


def _log_lapsed(schedule_id: str, report: ReapReport) -> None:
    """Warn of lapsed leases, naming whose: the workers that stopped heartbeating are what to look at
    (a lost node, a killed sidecar). At most ``LOGGED_WORKERS`` ids, and how many there were."""
    named = report.workers[:LOGGED_WORKERS]
    more = len(report.workers) - len(named)
    log.warning(
        "reaped expired leases of %s%s",
        ", ".join(named),
        f" (+{more} more)" if more else "",
        extra={
            "schedule_id": schedule_id,
            "requeued": report.requeued,
            "dead_lettered": report.dead_lettered,
            "workers": list(named),
            "workers_count": len(report.workers),
        },
    )
