"""Completions Redis never answered, sent once more to learn how their lease ended, so it counts once.

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
an unanswered failure report or hand-back.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from service.delivery.errors import UnknownScheduleError
from service.delivery.outcomes import CompletionOutcome
from service.delivery.records import TrajectoryResult
from service.sidecar.holdings import Held, Holdings, LeaseId, lease_id
from service.sidecar.outage_retry import TRANSIENT
from service.sidecar.report_turns import ReportTurns
from service.sidecar.session_settings import SessionStats

log = logging.getLogger("service.sidecar")
# ``WorkerSession.complete(held, result, keep_unanswered, once)``: counts the answer, keeps the
# result of one unanswered (``keep`` unless ``keep_unanswered``), counts a gone schedule ``stale``
Complete = Callable[[Held, TrajectoryResult, bool, bool], Awaitable[CompletionOutcome]]


@dataclass
class Resends:
    """The push completions kept for another try, and the one-try resend both modes use."""

    turns: ReportTurns  # the session's: a resend takes its lease's turn, as a worker's report does
    complete: Complete
    stats: SessionStats
    _kept: dict[LeaseId, Held] = field(default_factory=dict, init=False)

    def __len__(self) -> int:
        return len(self._kept)

    def keep(self, held: Held) -> None:
        """Keep a completion Redis never answered (``held.unanswered``) whose lease was forgotten."""
        assert held.unanswered is not None
        self._kept[lease_id(held.lease)] = held

    async def again(self, held: Held, holdings: Holdings) -> CompletionOutcome | None:
        """Pull: the kept completion of a lease held and found gone, sent once more in its turn (the
        worker's retry may be in flight; one that came first decided, and this sends nothing). The
        answer, counted; None when not sent or not answered (the next heartbeat tries again)."""
        assert held.unanswered is not None
        async with self.turns.of(lease_id(held.lease)):
            if holdings.get(lease_id(held.lease)) is not held:
                return None
            try:
                return await self.complete(held, held.unanswered, True, True)
            except UnknownScheduleError:  # counted ``stale``
                return None
            except Exception as exc:  # still held, its result kept: the next heartbeat tries again
                _unanswered(lease_id(held.lease), exc)
                return None

    async def kept(self) -> None:
        """Push: each kept completion once (a heartbeat's round), in its lease's turn; answered, it is
        counted and forgotten. The first Redis does not answer ends the round, kept again by the
        send: an outage costs one try a heartbeat, not one socket timeout per result. Any error ends
        it so, not only an outage's (``READONLY`` from a replica a failover promoted): raised, it
        went up through the heartbeat, which dropped the leases it had found lost, and through
        ``settle`` past the drain, the kept lease counted nowhere."""
        for key in list(self._kept):
            async with self.turns.of(key):
                held = self._kept.pop(key, None)
                if held is None or held.unanswered is None:
                    continue  # an earlier round, cut short, sent it meanwhile
                try:
                    outcome = await self.complete(held, held.unanswered, False, True)
                except UnknownScheduleError:
                    continue
                except Exception as exc:
                    _unanswered(key, exc)
                    return
            log.info("completion of %s sent again once Redis answered: %s", key[1], outcome.value)

    async def settle(self, within_s: float) -> None:
        """Shutdown (push, its heartbeats stopped): one last try of each kept completion, within
        ``within_s``; those still unanswered are left to lapse and count ``lost``."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(max(0.0, within_s)):  # not wait_for: see service/sidecar/waits.py
                await self.kept()
        if self._kept:
            log.warning("%d completions Redis never answered are left to lapse (lost)", len(self._kept))
        self.stats.lost += len(self._kept)
        self._kept.clear()


def _unanswered(key: LeaseId, exc: Exception) -> None:
    """An outage's error was told by the retry (``outage_retry.py``); any other is told here."""
    if not isinstance(exc, TRANSIENT):
        log.warning("completion of %s not answered (%r); sent again later", key[1], exc)
