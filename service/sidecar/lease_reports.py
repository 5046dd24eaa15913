"""A worker's reports of how its leases ended: a completion or a failure, each sent through outages and
counted once by its answer, whether the lease is held here or not.

Apart from the session's claims, heartbeats and hand-backs because it answers a question of its own:
a report Redis answered, refused, or never answered (past the retry window, or cut by a shutdown) may
have landed all the same, so what becomes of the lease, and of the result or failure it carried?
Push mode forgets the lease and keeps the report to be sent again (``resends.py``); pull mode
(``keep_unanswered``) keeps the lease held for the worker's retry; a lease whose failure went
unanswered and whose completion is then refused is settled by the failure's resend
(``Resends.failure_first``), and the mirror order by the result's (``Resends.result_first``).
``WorkerSession`` delegates its ``complete_held``, ``complete_key``, ``fail_held`` and ``fail_key``
here; each lease's end goes to the ``Ledger``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import TypeVar

from service.delivery.errors import UnknownScheduleError
from service.delivery.outcomes import CompletionOutcome, ReleaseOutcome
from service.delivery.protocol import Delivery
from service.delivery.records import TrajectoryResult
from service.delivery.remap import remapped
from service.sidecar.holdings import Held, Holdings, lease_id
from service.sidecar.ledger import Ledger
from service.sidecar.outage_retry import OutageRetry
from service.sidecar.resends import Resends
from service.sidecar.session_settings import SessionSettings, SessionStats

log = logging.getLogger("service.sidecar")  # the session's logger: operators grep its lines there
T = TypeVar("T")


@dataclass
class LeaseReports:
    """The completion and failure reports of one ``WorkerSession``: its client, holdings and counters."""

    delivery: Delivery
    holdings: Holdings
    settings: SessionSettings
    stats: SessionStats
    reports: OutageRetry  # the session's: one outage warning for completions, failures and releases
    ledger: Ledger  # which counter each lease's one end goes to
    resends: Resends  # reports Redis never answered, sent again

    async def complete_held(
        self, held: Held, result: TrajectoryResult, keep_unanswered: bool = False, once: bool = False
    ) -> tuple[CompletionOutcome, ReleaseOutcome | None]:
        """Report a finished item (retried through outages) and forget it.

        A report Redis never answered (past the retry window, or cancelled) forgets the lease too,
        unless ``keep_unanswered``: heartbeats must not keep an item nobody will report leased forever,
        and the result is kept to be sent again at the next heartbeats (``resends.kept``); the pull API
        tells its worker to retry, so the lease stays held, heartbeated and listed until the retry
        lands, its result kept (``resends.again``; ``once``: one try, no retry window). One forgotten
        as ended (``WorkerSession._forget_ended``) is answered STALE unsent: it was counted then, and
        Redis would refuse it.

        Pull: a lease whose failure report went unanswered (``held.failure``: the worker's ``/fail``,
        or the hold bound's) and whose completion is then refused may have been taken by that
        failure: the report is sent once more (``resends.failure_first``), and its answer, the second
        of the pair, counts the lease (``failed``, or ``stale``); unanswered, the next beat sends it
        (``failing``). The refusal counted ``stale`` where the failure had landed (round 45's
        failonce, left alone)."""
        if held.ended:  # one step with setting ``completing``: a heartbeat ends the lease or leaves it
            return CompletionOutcome.STALE, None
        held.completing = True
        lease, failure_sent = held.lease, bool(held.failure)
        try:
            outcome = await self.complete_key(
                lease.schedule_id, lease.key, lease.token, result, once=once, failure_sent=failure_sent
            )
        except UnknownScheduleError:  # its keys are gone (retention passed, or Redis lost its data):
            # nothing will take the result or run the item again, and the lease ends here, so it is
            # counted here for both modes (a pull /done's 404 left it uncounted: claimed > ended)
            self.holdings.remove(lease_id(lease))
            self.stats.stale += 1
            log.warning(
                "completion of %s refused: schedule %s is gone from Redis; result dropped",
                lease.key,
                lease.schedule_id,
            )
            raise
        except BaseException:
            held.completing, held.unanswered = False, result  # it may have landed
            if not keep_unanswered:
                self.holdings.remove(lease_id(lease))
                self.resends.keep(held)
            raise
        if outcome is CompletionOutcome.STALE and failure_sent:
            held.completing = False
            return outcome, await self.resends.failure_first(held)
        self.holdings.remove(lease_id(lease))
        return outcome, None

    async def complete_key(
        self,
        schedule_id: str,
        key: str,
        token: int,
        result: TrajectoryResult,
        held: bool = True,
        once: bool = False,
        failure_sent: bool = False,
    ) -> CompletionOutcome:
        """Report a finished item by its lease token, held here or not (``held`` false: a retry after
        a lost reply, or a pull worker's report of a lease it does not hold, which a refusal's warning
        must not call a lost lease, and only an acceptance counts: an end not this process's to count).
        ``failure_sent``: a refusal is not counted, the failure report's resend counts the lease."""
        entries = [(key, token, result)]
        complete, worker = self.delivery.complete_many, self.settings.worker_id
        reports = OutageRetry(0.0) if once else self.reports
        send = partial(complete, schedule_id, entries, None, worker)
        [outcome] = await reports.call("complete", self._remapped, schedule_id, send)
        if not (failure_sent and outcome is CompletionOutcome.STALE):
            await self.ledger.completion(outcome, schedule_id, key, token, held)
        return outcome

    async def fail_held(
        self, held: Held, reason: str, keep_unanswered: bool = False, once: bool = False
    ) -> tuple[ReleaseOutcome, CompletionOutcome | None]:
        """Report that an item could not run: retried elsewhere or dead-lettered by attempts.

        As ``complete``: a report Redis never answered (past the retry window, or cut) may have
        landed, and ``release.lua`` answers a repeat of a taken failure DUPLICATE, so it is sent
        again to learn which (``held.failure``): push mode forgets the lease and keeps the report
        (``resends.kept``), so the heartbeats do not keep an item nobody reports leased; with
        ``keep_unanswered`` (pull) the lease stays held for the worker's retry, and a heartbeat that
        finds it gone first sends the report again (``resends.fail_again``; ``once``: one try, no
        retry window). Its lease ends once, with the first answer: ``failed`` (taken now, or
        DUPLICATE: taken before), ``stale`` (it lapsed first). One forgotten as ended: STALE, unsent.

        Pull: a lease whose ``/done`` went unanswered (``held.unanswered``) and whose failure report
        is then refused may have been taken by that result: it is sent once more
        (``resends.result_first``), and its answer counts the lease (``duplicate``, or ``stale``), as
        ``complete_held`` does the mirror order. The refusal counted ``stale`` (review46a)."""
        if held.ended:
            return ReleaseOutcome.STALE, None
        key = lease_id(held.lease)
        if not keep_unanswered:
            self.holdings.remove(key)
        held.completing = True  # a heartbeat meanwhile finds the lease gone: the report decides
        held.failure = reason  # sent again with it when unanswered
        lease, result_sent = held.lease, keep_unanswered and held.unanswered is not None
        reports = OutageRetry(0.0) if once else self.reports
        try:
            send = partial(self.delivery.fail, lease, reason)
            outcome = await reports.call("fail", self._remapped, lease.schedule_id, send)
            # counted as it is answered; a refusal first asks Redis whether the trainer cancelled, and
            # a cut there (a shutdown's bound) is a cut report: not forgotten, counted nowhere
            if not (result_sent and outcome is ReleaseOutcome.STALE):
                await self.ledger.failure(outcome, lease.schedule_id, lease.key, lease.token, held=True)
        except UnknownScheduleError:  # its keys are gone: the lease ends here, counted as ``complete`` does
            self.holdings.remove(key)
            self.stats.stale += 1
            raise
        except BaseException:
            held.completing = False  # it may have landed: sent again (``held.failure``), its answer counts it
            if not keep_unanswered:
                self.resends.keep(held)
            raise
        if result_sent and outcome is ReleaseOutcome.STALE:
            held.completing, held.failure = False, ""  # refused: it never landed, the result decides
            return outcome, await self.resends.result_first(held)
        self.holdings.remove(key)
        return outcome, None

    async def fail_key(self, schedule_id: str, key: str, token: int, reason: str) -> ReleaseOutcome:
        """Report a failure of a lease not held here (a pull worker's ``/fail`` of its killed
        sidecar's lease, a repeat, or a token never handed out), as ``complete_key`` a completion: the
        token in Redis decides. Still current, it is charged an attempt as any failure and counted
        ``failed`` and ``inherited`` (it ended here unclaimed); else refused as a completion is. It was
        refused unasked, and the takeover then handed the lease back refunded: the failure lost."""
        fail, worker = self.delivery.fail_key, self.settings.worker_id
        send = partial(fail, schedule_id, worker, key, token, reason)
        outcome = await self.reports.call("fail", self._remapped, schedule_id, send)
        await self.ledger.failure(outcome, schedule_id, key, token, held=False)
        return outcome

    def _remapped(self, schedule_id: str, send: Callable[[], T]) -> T:
        """``send()``, a report on ``schedule_id``, sent once more to its slot's new master where its
        master did not answer and has just been failed over (``remap.remapped``: the client's own read
        of the map is paced to a second). Blocking: ``OutageRetry.call`` runs it on a thread."""
        return remapped(self.delivery.client, self.delivery.keys(schedule_id).meta, send)
