"""Where a sidecar counts how each lease it took ended: once, in one counter.

The counters balance (docs/sidecar.md, counters): ``claimed + stolen + inherited = accepted +
duplicate + stale + failed + released + lost + cancelled``. What ends a lease is often seen more than
once: a heartbeat finds it gone and then its report is refused, a pull worker repeats a ``/done`` whose
reply it lost, or reports a lease it no longer holds. Each of those counted again was a lease ended
twice, so the rule for which sighting counts lives here, apart from the protocol steps
(``session.py``) that meet them:

* a report's answer counts only for a lease held here (``held``): one this sidecar handed out and no
  longer holds was counted as it ended here (lost, failed past its hold bound, refused, accepted), and
  a pull worker's key of one never held here (a killed predecessor's, handed back and counted
  ``reset``; or never handed out) is its word alone, which could name keys without end. Its one
  exception is an acceptance or a taken failure of a killed predecessor's lease still current: it
  ends here unclaimed, counted ``inherited`` beside its end;
* a lease the trainer cancelled counts ``cancelled`` (not ``lost`` or ``stale``), each item once
  however often its end shows (``cancels.py``);
* two reports of one lease take turns (``report_turns.py``), so the second finds the lease no
  longer held and counts nothing.

A failure or a completion is counted only once the server took it, so neither counter tells of work
that did not land.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from service.delivery.outcomes import CompletionOutcome, ReleaseOutcome
from service.problems.details import clipped
from service.sidecar.cancels import Cancels
from service.sidecar.session_settings import SessionStats

log = logging.getLogger("service.sidecar")


@dataclass
class Ledger:
    """The end counters of one session, with the rule for what each sighting of an end adds."""

    stats: SessionStats
    cancels: Cancels  # the session's: schedules found cancelled, and the items counted for each
    found_cancelled: Callable[[str], Awaitable[bool]]  # asks Redis, once per schedule found cancelled

    async def gone(self, schedule_id: str, keys: list[str]) -> None:
        """Count leases held here and found gone in Redis: ``cancelled`` when the trainer cancelled
        their schedule, else ``lost`` (they lapsed and were taken back). Cut before Redis said which
        (a shutdown's bound), ``lost``: each was forgotten as it ended, and nothing asks again."""
        try:
            cancelled = await self.found_cancelled(schedule_id)
        except BaseException:
            self.stats.lost += len(keys)
            raise
        if cancelled:
            self.cancelled(schedule_id, keys)
        else:
            self.stats.lost += len(keys)

    async def gone_each(self, keys: dict[str, list[str]]) -> None:
        """``gone`` for each schedule's keys, in turn; cut, those of the schedules not asked about yet
        count ``lost`` too (forgotten as they ended, nothing counts them later)."""
        groups = list(keys.items())
        for i, (schedule_id, group) in enumerate(groups):
            try:
                await self.gone(schedule_id, group)
            except BaseException:
                self.stats.lost += sum(len(rest) for _, rest in groups[i + 1 :])
                raise

    def cancelled(self, schedule_id: str, keys: list[str]) -> None:
        """Count ``cancelled`` the items of ``keys`` not counted yet: an item whose lease a heartbeat
        found gone and whose report was then refused, or a report repeated, ended once (``cancels``)."""
        self.stats.cancelled += self.cancels.count(schedule_id, keys)

    async def refused(
        self, schedule_id: str, key: str, what: str, why: str = "lease lost", held: bool = True
    ) -> None:
        """A report refused because the lease was gone: ``cancelled`` when the trainer cancelled the
        schedule (expected, told once), else ``stale`` with a warning; either only when ``held``."""
        if await self.found_cancelled(schedule_id):
            if held:
                self.cancelled(schedule_id, [key])
        else:
            self.stats.stale += int(held)
            log.warning("%s of %s refused as stale (%s)", what, clipped(key), why)  # a pull worker's key

    async def completion(
        self, outcome: CompletionOutcome, schedule_id: str, key: str, token: int, held: bool
    ) -> None:
        """A completion's answer: ``accepted``, ``duplicate`` (of a lease held here: its reply was
        lost and a repeat answered, its one end), or refused."""
        if outcome is CompletionOutcome.ACCEPTED:
            self.stats.accepted += 1
            self.stats.inherited += int(not held)  # current in Redis, never held here: a predecessor's
        elif outcome is CompletionOutcome.DUPLICATE:
            self.stats.duplicate += int(held)  # not held: its end was counted already, or not here
        else:
            why = "lease lost" if held else f"token {token} is no lease this sidecar holds"
            await self.refused(schedule_id, key, "completion", why, held)

    async def failure(
        self, outcome: ReleaseOutcome, schedule_id: str, key: str, token: int, held: bool
    ) -> None:
        """A failure report's answer: ``failed`` once taken (requeued or dead-lettered), or
        ``duplicate`` of a lease held here (its answer was lost and a repeat answered: it was taken
        then, its one end, counted ``failed`` as the completion's repeat counts ``duplicate``), or
        refused. A duplicate of a lease not held here counts nothing: its end was counted already."""
        if outcome is ReleaseOutcome.DUPLICATE:
            self.stats.failed += int(held)
        elif outcome is not ReleaseOutcome.STALE:
            self.stats.failed += 1
            self.stats.inherited += int(not held)
        else:
            why = "lease lost" if held else f"token {token} is no lease this sidecar holds"
            await self.refused(schedule_id, key, "failure report", why, held)
