"""Completions and failure reports Redis never answered, sent once more to learn how their lease
ended, so it counts once.

A completion whose answer never came (Redis down past the session's retry window, or the call cut
by a shutdown) may have landed (the connection dropped after the write) or not. ``complete.lua``
answers DUPLICATE only for the token whose completion it accepted, so one more try of the same
token tells which: DUPLICATE, it landed (``duplicate``, as a repeat within the window counts it);
ACCEPTED, it had not and the lease was still current (the result goes through now, ``accepted``);
STALE, it never landed and the lease is gone (``stale``, or ``cancelled``: ``ledger.py``).

Pull mode keeps such a lease held for its worker's retry, and the heartbeat that finds it gone sends
the kept result (``again``). Push mode has no worker to retry: its lease is forgotten at once (the
heartbeats must not keep leased an item nobody reports), and was counted nowhere, so ``claimed``
ran ahead of what ended. Its result is now kept here and sent at each heartbeat until Redis answers
(``kept``); at shutdown (``settle``) each gets one last try within the drain's bound, and one Redis
still does not answer counts ``lost``: landed or lapsing, nothing tells them apart any more, as for
an unanswered hand-back.

A push failure report (the watchdog's) Redis never answered is kept and sent again the same way
(``held.failure``, its reason): ``release.lua`` records the token of each failure it takes
(``P:failed``) and answers a repeat DUPLICATE, so the resend tells a landed failure (``failed``)
from one that never landed (taken now, ``failed``; or refused, the lease lapsed: ``stale``). Before,
it counted ``lost`` at once: a landed failure and a lapse left the same record in Redis. Pull mode
keeps such a lease held for the worker's retry, as an unanswered ``/done``'s, and the heartbeat that
finds it gone sends the report again (``fail_again``), and so does a ``/done`` of it that Redis refuses
(``failure_first``). An unreadable item's failure report at its claim (``claims.py``: its lease is
never held) is kept here in either mode, as a push one is.

A kept result is not sent for ever: once Redis has answered for its schedule for ``GIVE_UP_TTLS`` of
its lease's TTLs and two reaper passes since the later of its keep and the last outage's end, and it
has still had no answer (Redis refuses it, ``READONLY``; or its call alone times out), it is given up,
``lost``. By then its lease cannot be current: no heartbeat has renewed it since its keep; a silence
on its schedule graces a running lease once, to a TTL past the first script after it (``common.lua``,
``pulse``), and the service's reaper reaches every schedule each second, so that grace, if any, ends
a TTL and a pass after Redis answers again, and the next pass requeues the lapsed lease: a resend
could only be answered ``stale``. An outage does not age it (a heartbeat that fails, or a resend that
finds Redis unreachable with no lease held to heartbeat): Redis back, the grace may make the lease
current again, and the result lands. With no reaper running and nothing else reaching its schedule, a
lease unrenewed for longer is graced by the first script that does, so a result given up then could
have landed, had its resend ever gone through. Any answer is one for every schedule of a single
Redis; on a Redis Cluster only one for the schedule's own hash slot is (``answering.py``): a slot no
master serves while the others answer is an outage of that schedule, for the reaper as for its
resend, and a resend unanswered where no heartbeat answered for its slot tells that outage.

Pull mode records what an accepted ``/done`` records (``landed``: the generation seconds and the
decode rate) when a resend of its kept result lands; push mode recorded both at the engine's reply.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field

from service.delivery.errors import UnknownScheduleError
from service.delivery.outcomes import CompletionOutcome, ReleaseOutcome
from service.delivery.reaper import DEFAULT_INTERVAL_S
from service.delivery.records import TrajectoryResult
from service.sidecar.answering import WHOLE, Answering, Where
from service.sidecar.holdings import Held, Holdings, LeaseId, lease_id
from service.sidecar.outage_retry import TRANSIENT
from service.sidecar.report_turns import ReportTurns
from service.sidecar.session_settings import SessionStats

log = logging.getLogger("service.sidecar")
# ``WorkerSession.complete(held, result, keep_unanswered, once)``: counts the answer, keeps the
# result of one unanswered (``keep`` unless ``keep_unanswered``), counts a gone schedule ``stale``
Complete = Callable[[Held, TrajectoryResult, bool, bool], Awaitable[CompletionOutcome]]
# ``WorkerSession.fail(held, reason, keep_unanswered, once)``: as ``Complete``, for a failure report
Fail = Callable[[Held, str, bool, bool], Awaitable[ReleaseOutcome]]
# a lease's end the pull API records as it records a ``/done``'s answer (``PullState.landed``)
Landed = Callable[[Held, TrajectoryResult, CompletionOutcome], None]
GIVE_UP_TTLS = 2.0  # lease TTLs of Redis answering after which a kept result is given up (docstring)
REAPER_PASSES_S = 2 * DEFAULT_INTERVAL_S  # and the reaper's two passes: one graces, the next requeues


@dataclass
class Resends:
    """The push completions and failure reports kept for another try, and the one-try resend of a
    completion both modes use."""

    turns: ReportTurns  # the session's: a resend takes its lease's turn, as a worker's report does
    complete: Complete
    fail: Fail
    stats: SessionStats
    ttl_s: Callable[[str], float | None]  # a schedule's lease TTL, None when unknown (never given up)
    landed: Landed = lambda held, result, outcome: None  # pull mode's records of an answered /done
    clock: Callable[[], float] = time.monotonic
    where: Where = lambda schedule_id: WHOLE  # a schedule's answer domain (``answering.where_of``)
    _kept: dict[LeaseId, Held] = field(default_factory=dict, init=False)
    # when each was kept, and its lease's TTL in seconds (``_give_up``)
    _bounds: dict[LeaseId, tuple[float, float | None]] = field(default_factory=dict, init=False)
    _answering: Answering = field(init=False)  # since when Redis answers, per slot on a cluster
    _beat: frozenset[str] = field(default=frozenset(), init=False)  # schedules this beat answered for

    def __post_init__(self) -> None:
        self._answering = Answering(self.where)

    def __len__(self) -> int:
        return len(self._kept)

    def keep(self, held: Held) -> None:
        """Keep a completion (``held.unanswered``) or a failure report (``held.failure``) Redis never
        answered whose lease was forgotten."""
        assert held.unanswered is not None or held.failure
        key = lease_id(held.lease)
        self._kept[key] = held
        self._bounds.setdefault(key, (self.clock(), self.ttl_s(key[0])))

    def answered(self, schedule_ids: Iterable[str]) -> None:
        """A heartbeat went through for the leases of ``schedule_ids``: the kept results of their
        schedules (of every schedule, on a single Redis) age from now on, unless they already did."""
        self._beat = frozenset(schedule_ids)
        self._answering.answered(self._beat, self.clock())

    def unreachable(self, schedule_ids: Iterable[str] | None = None) -> None:
        """A heartbeat did not go through (an outage): no kept result ages until Redis answers for its
        schedule again; or, on a cluster, it did not for ``schedule_ids`` alone (their slots or
        masters not answering, the others did): only their kept results stop ageing."""
        if schedule_ids is not None:
            self._answering.unreachable(schedule_ids)
            return
        self._beat = frozenset()
        self._answering.outage()

    async def again(self, held: Held, holdings: Holdings) -> CompletionOutcome | None:
        """Pull: the kept completion of a lease held, sent once more in its turn (the worker's retry
        may be in flight; one that came first decided, and this sends nothing): a heartbeat found the
        lease gone, or it passed its hold bound. The answer, counted and recorded as a ``/done``'s
        (``landed``); None when not sent or not answered (the next heartbeat tries again)."""
        assert held.unanswered is not None
        async with self.turns.of(lease_id(held.lease)):
            if holdings.get(lease_id(held.lease)) is not held:
                return None
            result = held.unanswered
            try:
                outcome = await self.complete(held, result, True, True)
            except UnknownScheduleError:  # counted ``stale``
                return None
            except Exception as exc:  # still held, its result kept: the next heartbeat tries again
                _unanswered(lease_id(held.lease), exc)
                return None
            self.landed(held, result, outcome)
            return outcome

    async def fail_again(self, held: Held, holdings: Holdings) -> ReleaseOutcome | None:
        """Pull: the failure report (``held.failure``) of a lease held whose ``/fail`` went unanswered,
        sent once more in its turn, a heartbeat having found the lease gone (the failure may be what
        took it: answered DUPLICATE, ``failed``), unless the worker's retry came first. The answer,
        counted; None when not sent or not answered (the next heartbeat tries again)."""
        async with self.turns.of(lease_id(held.lease)):
            if holdings.get(lease_id(held.lease)) is not held:
                return None
            try:
                return await self.fail(held, held.failure, True, True)
            except UnknownScheduleError:  # counted ``stale``
                return None
            except Exception as exc:  # still held: the next heartbeat tries again
                _unanswered(lease_id(held.lease), exc)
                return None

    async def failure_first(self, held: Held) -> ReleaseOutcome | None:
        """Pull: the unanswered failure report (``held.failure``) of a lease whose completion Redis
        just refused, sent once more in the turn that completion holds: DUPLICATE, the failure took
        the lease (``failed``); STALE, the lease lapsed (``stale``); counted as answered. None when
        not answered: the lease is held ``failing``, so the next beat sends it (``PullState.abandon``)
        and its worker is no longer told it holds it; or its schedule is gone (counted ``stale``)."""
        try:
            return await self.fail(held, held.failure, True, True)
        except UnknownScheduleError:
            return None
        except Exception as exc:
            _unanswered(lease_id(held.lease), exc)
            held.failing = True
            return None

    async def result_first(self, held: Held) -> CompletionOutcome | None:
        """Pull: the unanswered completion (``held.unanswered``) of a lease whose failure report Redis
        just refused, sent once more in the turn that report holds: DUPLICATE, the result took the
        lease (``duplicate``); STALE, the lease lapsed (``stale``); counted and recorded as a
        ``/done``'s answer. None when not answered: the lease stays held with its result for the next
        beat (``again``); or its schedule is gone (counted ``stale``)."""
        result = held.unanswered
        assert result is not None
        try:
            outcome = await self.complete(held, result, True, True)
        except UnknownScheduleError:
            return None
        except Exception as exc:
            _unanswered(lease_id(held.lease), exc)
            return None
        self.landed(held, result, outcome)
        return outcome

    async def kept(self, probe: bool = False) -> None:
        """Push: each kept completion once (a heartbeat's round), in its lease's turn; answered, it is
        counted and forgotten. The first Redis does not answer ends the round, kept again by the
        send: an outage costs one try a heartbeat, not one socket timeout per result. Any error ends
        it so, not only an outage's (``READONLY`` from a replica a failover promoted): raised, it
        went up through the heartbeat, which dropped the leases it had found lost, and through
        ``settle`` past the drain, the kept lease counted nowhere. ``probe``: no heartbeat went out
        (no lease held), so the resend's own answer tells whether Redis answers; those past their
        bound are given up first (module docstring)."""
        if probe:
            self._beat = frozenset()
        self._give_up()
        for key in list(self._kept):
            async with self.turns.of(key):
                held = self._kept.pop(key, None)
                if held is None:
                    continue  # an earlier round, cut short, sent it meanwhile
                try:
                    outcome = await self._send(held)
                except UnknownScheduleError:
                    self._bounds.pop(key, None)
                    continue
                except Exception as exc:
                    self._unanswered_by(exc, key[0])
                    _unanswered(key, exc)
                    return
            self._bounds.pop(key, None)
            self._answering.answered([key[0]], self.clock())  # it answered: an outage of it is over
            log.info("%s of %s sent again once Redis answered: %s", _what(held), key[1], outcome.value)

    async def _send(self, held: Held) -> CompletionOutcome | ReleaseOutcome:
        """One try of a kept report; unanswered, the session keeps it again."""
        if held.unanswered is not None:
            return await self.complete(held, held.unanswered, False, True)
        return await self.fail(held, held.failure, False, True)

    def _unanswered_by(self, exc: Exception, schedule_id: str) -> None:
        """What a resend's error says of Redis for its schedule: a refusal is an answer; unreachable,
        an outage of it only when this beat's heartbeat did not answer for it (none went through,
        ``probe``; or on a cluster, none for its slot): else its call alone failed."""
        if not isinstance(exc, TRANSIENT):
            self._answering.answered([schedule_id], self.clock())
        elif not self._answering.covers(schedule_id, self._beat):
            self._answering.unreachable([schedule_id])

    def _give_up(self) -> None:
        """Count ``lost`` the kept results Redis has answered past for ``GIVE_UP_TTLS`` of their
        lease's TTLs and two reaper passes since their keep (or the last outage's end): their leases
        lapsed and were requeued, so no resend could land any more."""
        now = self.clock()
        for key, (kept_at, ttl_s) in list(self._bounds.items()):
            since = self._answering.since(key[0])
            if since is None:
                continue
            answered_s = now - max(kept_at, since)
            if ttl_s is None or answered_s <= GIVE_UP_TTLS * ttl_s + REAPER_PASSES_S:
                continue
            del self._bounds[key]
            held = self._kept.pop(key, None)
            if held is not None:
                self.stats.lost += 1
                log.warning(
                    "%s of %s given up, unanswered while Redis answered for %.0fs: its lease lapsed (lost)",
                    _what(held),
                    key[1],
                    answered_s,
                )

    async def settle(self, within_s: float) -> None:
        """Shutdown (push, its heartbeats stopped): one last try of each kept completion, within
        ``within_s``; those still unanswered are left to lapse and count ``lost``, also when a second
        signal cuts the try short (cancelled: ``hurry.py``)."""
        try:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(max(0.0, within_s)):  # not wait_for: see service/sidecar/waits.py
                    await self.kept()
        finally:
            if self._kept:
                log.warning("%d reports Redis never answered are left to lapse (lost)", len(self._kept))
            self.stats.lost += len(self._kept)
            self._kept.clear()
            self._bounds.clear()


def _unanswered(key: LeaseId, exc: Exception) -> None:
    """An outage's error was told by the retry (``outage_retry.py``); any other is told here."""
    if not isinstance(exc, TRANSIENT):
        log.warning("report of %s not answered (%r); sent again later", key[1], exc)


def _what(held: Held) -> str:
    """What a kept report is, for its log lines."""
    return "completion" if held.unanswered is not None else "failure report"
