"""The pull mode's bookkeeping of the worker process it serves (``service/sidecar/pull_api.py`` has
the routes): whether that process is alive, what it was handed and lost, and the session behind it.

Apart from the routes because it is the part with state and timing: the worker's signs of life (a
quiet spell past ``idle_timeout_s`` stops the heartbeats, so the leases of a process that died lapse
although the sidecar lives on), the lost leases kept for ``GET /leases``, an item held unreported past
its bound (``holds``), handing out the next item within the slot and KV limits, and the session
still ``Connecting`` while Redis is down at start-up (``connecting.py``: its connect runs in a daemon
thread, so a SIGTERM meanwhile is not held up by a wait that has no end).

Once connected it runs the push mode's ``Takeover``: the leases a killed predecessor under this worker
id left running are handed back, attempts refunded, before the first claim (``/next`` hands out nothing
until then), and its presence key is kept fresh. The worker process may have outlived that
predecessor and still run what it was handed: those leases are handed back all the same (this process
cannot tell which of them a worker still runs), and its ``/done`` of one is then refused ``stale`` by
the lease's token, so the item's result is accepted once, from whichever run holds the current lease.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from typing import Any

from service.delivery.errors import UnknownScheduleError
from service.delivery.outcomes import CompletionOutcome
from service.delivery.records import TrajectoryResult
from service.sidecar.connecting import (
    CONNECTING_RETRY_AFTER_S,
    REFUSED_KEPT,
    REPORT_RETRY_GRACE_S,
    Connecting,
    ConnectingError,
    in_daemon_thread,
)
from service.sidecar.holdings import Held, lease_id
from service.sidecar.holds import DEFAULT_HOLD_TIMEOUT_S, overdue
from service.sidecar.sampling import sample_params
from service.sidecar.session import WorkerSession
from service.sidecar.supervision import Supervisor
from service.sidecar.takeover import Takeover
from service.sidecar.timings import Durations

MAX_WAIT_S = 30.0  # the longest long-poll of GET /next
# lost leases kept for /leases, newest: each carries its item (prompt included), and a worker that never
# asks (it need not: its /done is answered 409 anyway) must not grow the sidecar by every cancel of a run
LOST_KEPT = 1024
log = logging.getLogger("service.sidecar")


Abandoned = tuple[Held, Callable[[], None]]  # a lease held past its bound, and the end of its turn


class PullState:
    """The pull session: liveness of the worker process, the leases it lost, and shutdown."""

    def __init__(
        self,
        session: WorkerSession | Connecting,
        idle_timeout_s: float,
        stopping: Callable[[], bool] = lambda: False,
        release_within_s: float = 2.0,
        hold_timeout_s: float = DEFAULT_HOLD_TIMEOUT_S,
    ) -> None:
        self._session: WorkerSession | None = None
        if not isinstance(session, Connecting):
            self._attach(session)
        self.worker_id = session.worker_id if isinstance(session, Connecting) else session.settings.worker_id
        self.idle_timeout_s = idle_timeout_s
        self.stopping = stopping  # true once the server shuts down: claim nothing more
        self.release_within_s = release_within_s  # shutdown: hand back what is held within this
        self.hold_timeout_s = hold_timeout_s  # an item handed out longer than its bound is abandoned
        self.last_seen = time.monotonic()
        self.lost: deque[dict[str, Any]] = deque(maxlen=LOST_KEPT)
        self.generation = Durations()  # wall seconds of each accepted /done, for GET /metrics
        self.lock = asyncio.Lock()
        # ``POST /reset``s so far: a long poll begun before one is a dead worker process's, and an
        # item handed to it would stay held, unread, until its hold bound (``next_item``)
        self.resets = 0
        self.started = time.monotonic()  # leases taken or extended since are this process's own
        # hands back a killed predecessor's leases, then keeps the presence key; None until the server
        # runs (``begin``): an app driven without its lifespan (tests) claims at once, as before
        self.takeover: Takeover | None = None
        # the heartbeats and the takeover: the first to die is ``loops.dead`` (``/health`` 503), and
        # its ``on_death`` stops the server (``create_pull_app``'s ``on_failure``)
        self.loops = Supervisor()
        # reports (schedule, key, token) answered 503 while connecting, not yet retried: the takeover
        # waits for their retries (``_retries_landed``) before it hands back what they report
        self.refused: set[tuple[str, str, int]] = set()
        self.report_retry_grace_s = REPORT_RETRY_GRACE_S

    def _attach(self, session: WorkerSession) -> None:
        """Serve ``session``; a resend of a kept ``/done`` that lands records what its answer would
        have (``landed``)."""
        self._session = session
        session.resends.landed = self.landed

    def landed(self, held: Held, result: TrajectoryResult, outcome: CompletionOutcome) -> None:
        """What an answered completion of a lease held here records, once: its tokens and wall time
        for the decode rate (KV admission, the hold bound), and, when it landed (accepted, or a
        repeat of this token's landed completion, whose own answer never came), its generation
        seconds (``GET /metrics``). A ``/done`` Redis never answered recorded neither, so a heartbeat's
        resend of it that lands (``Resends.again``) records them here, as a first answer would."""
        self.session.holdings.observe(result.output_tokens, result.wall_time_s)
        if outcome is not CompletionOutcome.STALE:
            self.generation.observe(result.wall_time_s)

    @property
    def connected(self) -> bool:
        """Whether the session exists (Redis answered at start-up)."""
        return self._session is not None

    @property
    def session(self) -> WorkerSession:
        """The worker session; ``ConnectingError`` (503) until Redis has answered."""
        if self._session is None:
            raise ConnectingError()
        return self._session

    @property
    def claims_open(self) -> bool:
        """Whether ``/next`` may claim: the takeover is done (or none runs)."""
        return self.takeover is None or self.takeover.done.is_set()

    @property
    def taking_over(self) -> bool:
        """Connected, and still handing back (or checking for) a predecessor's leases."""
        return self.connected and not self.claims_open

    def begin(self) -> None:
        """Set up the takeover once the session exists, before any request can claim (no await
        between the session's arrival and this, so no ``/next`` slips in ahead of it)."""
        if self._session is not None and self.takeover is None:
            self.takeover = Takeover(self._session, started=self.started, before_reset=self._retries_landed)

    @contextlib.asynccontextmanager
    async def reporting(self, schedule_id: str, key: str, token: int) -> AsyncIterator[WorkerSession]:
        """The session for a worker's ``/done`` or ``/fail``, in the lease's turn (``report_turns``:
        one sent while another of it is answered waits, then finds the lease as that one left it);
        ``ConnectingError`` (a 503 to retry) before Redis answered, the report then remembered until its
        retry has been answered, so the takeover does not hand its lease back in between (its finished
        item run again)."""
        lease = (schedule_id, key, token)
        if self._session is None:
            if len(self.refused) < REFUSED_KEPT:
                self.refused.add(lease)
            raise ConnectingError()
        try:
            async with self._session.turns.of(lease):
                yield self._session
        finally:
            self.refused.discard(lease)

    async def _retries_landed(self, stop: asyncio.Event) -> None:
        """Before the hand-back: wait for the retries of the reports refused while connecting, each
        of a lease perhaps still current (a killed predecessor's), for at most their ``Retry-After``
        and ``report_retry_grace_s`` more. Without it a predecessor whose presence had lapsed was
        taken over at once, the retry came a second later and was refused stale, and the item ran
        again (the chaos4 soak)."""
        deadline = time.monotonic() + CONNECTING_RETRY_AFTER_S + self.report_retry_grace_s
        while self.refused and not stop.is_set() and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        self.refused.clear()

    async def run(self, pending: Connecting | None) -> None:
        """Connect when still ``pending`` (served meanwhile), then take over what a killed predecessor
        held and keep this process present, and heartbeat, until cancelled. Both loops are supervised
        (``loops``): the first to die stops the sidecar, which exits 70 (``supervision``)."""
        if pending is not None:
            try:
                self._attach(await in_daemon_thread(pending.connect))
            except Exception as error:  # refused credentials: the caller's ``connect`` stops the server
                log.error("could not connect to Redis: %s", error)
                return
        self.begin()
        assert self.takeover is not None
        self.loops.start("heartbeat loop", self.heartbeats())
        self.loops.start("takeover loop", self.takeover.run(asyncio.Event()))
        try:
            await asyncio.get_running_loop().create_future()  # until the server stops
        finally:
            await self.loops.stop()

    async def leave(self, within_s: float) -> None:
        """A graceful exit: delete the presence key (the next process need not wait for it), if Redis
        answers within ``within_s`` (else the key lapses within the presence TTL)."""
        if self.takeover is not None and within_s > 0:
            await self.takeover.leave(within_s)

    def idle(self) -> bool:
        """Whether the worker has been quiet past ``idle_timeout_s`` (its leases left to lapse)."""
        return time.monotonic() - self.last_seen > self.idle_timeout_s

    def touch(self) -> None:
        """The worker called us: it is alive, keep its leases."""
        self.last_seen = time.monotonic()

    async def heartbeats(self) -> None:
        """Heartbeat the worker's leases while it is alive; record the ones found lost."""
        while True:
            await self.session.until_heartbeat_due(time.monotonic())
            if not self.idle():  # quiet: its leases lapse so they are redelivered
                await self.beat()

    async def beat(self) -> None:
        """One heartbeat of every held lease; those found gone are forgotten and listed as lost, and so
        are those held past their bound (``abandon``), which are then reported failed."""
        dropped = self.abandon()
        try:  # from the turns' take on: whatever raises, each is given up and each lease counted
            self.lost.extend(lease_json(held) for held, _ in dropped if not held.failing)  # listed once
            try:
                lost = await self.session.heartbeat()
            except Exception:  # never let the heartbeat loop die: every lease would lapse
                log.exception("heartbeat failed")
                lost = []
            self.lost.extend(lease_json(held) for held in lost)
            await self.fail_abandoned(dropped)
            await self.resend_overdue()
        finally:  # cancelled (a shutdown) first: the worker's reports waiting for these turns go on,
            # and those never reported are held again with their failure report, as the shutdown
            # then sends it (``_cut``): dropped from the holdings, nobody ended them but their lapse
            for held, end_turn in dropped:
                self._cut(held)
                end_turn()

    def abandon(self) -> list[Abandoned]:
        """Forget the items held past their bound (``holds``) with no report of them in flight (that
        one decides), so none is heartbeated again, each in its lease's turn (``report_turns``), taken
        here before any await, with the function that gives it up: the caller reports them failed
        (``fail_abandoned``), and a worker's ``/done`` or ``/fail`` of one waits for that answer and
        is then stale. Without the turn, a ``/done`` sent while the heartbeat ran, before the failure
        report, was accepted as a lease not held (``inherited``) beside the failure's ``stale``. One
        whose failure report went unanswered (``failing``) is taken again, even if a decode rate
        measured since raised its bound; one whose ``/done`` did is sent again (``resend_overdue``)."""
        holdings, turns = self.session.holdings, self.session.turns
        late = [h for h in holdings.all() if h.failing and not h.completing]
        late += [h for h in overdue(holdings, self.hold_timeout_s) if not h.failing]
        dropped = [h for h in late if h.unanswered is None and not turns.busy(lease_id(h.lease))]
        for held in dropped:
            holdings.remove(lease_id(held.lease))
        return [(held, turns.take(lease_id(held.lease))) for held in dropped]

    async def fail_abandoned(self, dropped: list[Abandoned]) -> None:
        """Report each abandoned item failed, through the path a ``/fail`` takes: requeued at once with
        an attempt spent, at the head of another live worker's queue when one may take it (dead-lettered
        once its attempts are spent), where its lapse would have requeued it here a lease TTL later with
        nobody able to take it meanwhile. The worker dropped it and will not report it,
        so waiting out the lease only kept a straggler's item, the one its step most likely waits for,
        from running again. Each is taken from ``dropped`` as its report is sent (what is left there
        was never reported), and its turn given up once that report is answered (or not).

        One Redis does not answer (past the session's retry window) is held again (``failing``), not
        heartbeated, and the next beat sends it once more: its lease ends with the first answer of it
        or of a worker's report meanwhile (a late ``/done`` accepted, ``accepted``; the failure
        taken, or its repeat answered DUPLICATE, ``failed``; either refused, ``stale``), or at
        the shutdown's hand-back. It counted ``lost`` at once, and a late ``/done`` that Redis then
        accepted counted ``accepted`` and ``inherited`` beside it: one lease ended twice. One whose
        answer a shutdown cut (this beat cancelled) still counts ``lost``: no beat comes again."""
        holdings = self.session.holdings
        while dropped:
            held, end_turn = dropped.pop(0)
            key, held_s = held.lease.key, holdings.held_for(held)
            if not held.failure:
                log.warning("item %s held %.0fs unreported: reporting it failed", key, held_s)
            reason = _abandoned_why(held, held_s)
            try:
                await self.session.fail(held, reason, keep_unanswered=True)
            except UnknownScheduleError:
                continue  # its schedule is gone: nothing to requeue (counted ``stale``)
            except Exception as exc:  # Redis gone past the retry window: held again (``failing``)
                log.warning("could not report %s failed (%r); reported again at the next beat", key, exc)
                held.failing = True
                holdings.restore(held)
            except BaseException:  # cut by a shutdown: no beat comes again, the shutdown sends it
                self._cut(held)
                raise
            finally:
                end_turn()

    def _cut(self, held: Held) -> None:
        """Hold again, ``failing``, an abandoned item whose failure report a shutdown cut (or never
        let go out): the shutdown's ``resend_kept`` sends that report (``unsent``), within its
        grace, and hands back what Redis does not answer. The beat is cancelled before the shutdown
        hands back what is held (``create_pull_app``'s lifespan), as the push drain cancels its loops:
        dropped from the holdings, such an item was neither failed nor handed back, counted ``lost``
        and left leased, by nobody, until its lease lapsed (embedlog55). Its lease may have ended
        since (the cut report landed: a resend is answered DUPLICATE, counted ``failed``)."""
        if held.ended:
            return
        held.failure = _abandoned_why(held, self.session.holdings.held_for(held))
        held.failing = True  # listed lost already (``beat``), its worker no longer told it holds it
        self.session.holdings.restore(held)

    async def resend_overdue(self) -> None:
        """Send once more the kept result of each item held past its bound whose ``/done`` Redis
        never answered (``resend_kept``), instead of reporting it failed: the worker did report it,
        and its lease ends as that ``/done`` did, ``accepted`` or ``duplicate``, its result kept.
        Reported failed, a landed ``/done`` was refused ``stale`` and one that had not landed ran
        again, an attempt spent. Unanswered, the next beat tries."""
        late = [h for h in overdue(self.session.holdings, self.hold_timeout_s) if h.unanswered is not None]
        await self.resend_kept(late)

    async def resend_kept(self, helds: list[Held] | None = None, within_s: float | None = None) -> None:
        """Send once more the kept report of each of ``helds`` (default: every lease held with one,
        before ``POST /reset`` or the shutdown hands them back: a ``/done``'s result, or a failure
        report, the worker's or the hold bound's, ``unsent``), within ``within_s`` if given; one
        refused lapsed, and is listed lost (once: a ``failing`` one was). Handed back unsent, a landed
        report's lease was refused and counted ``lost``, and one that had not landed was released:
        a finished item ran again, a failed one came back with its attempt refunded."""
        kept = helds if helds is not None else self.unsent()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(within_s):  # not wait_for: see service/sidecar/waits.py
                for held in kept:
                    if await self.session.refused_again(held) and not held.failing:
                        self.lost.append(lease_json(held))

    def unsent(self) -> list[Held]:
        """The leases held with a report Redis never answered, none in flight: a ``/done``'s kept
        result (``unanswered``), or a failure report (``failure``: a lease whose failure Redis
        answered is no longer held)."""
        holdings = self.session.holdings.all()
        return [h for h in holdings if not h.completing and (h.unanswered is not None or h.failure)]

    async def reset_polls(self) -> None:
        """End the long polls in flight (``POST /reset``: they are the previous process's); one taking
        an item now finishes first, and that item is among those the reset hands back."""
        async with self.lock:
            self.resets += 1

    async def next_item(self, wait_s: float) -> Held | None:
        """Start the oldest waiting lease that fits, else claim one; poll up to ``wait_s``, or until a
        ``POST /reset`` says the process that asked is gone, or the stop (204 then). Both are checked
        again once the lock is taken: polls queued behind a claim at SIGTERM each walked a claim of
        their own after it, and held the exit past the drain (chaos13, review50c)."""
        deadline = time.monotonic() + min(wait_s, MAX_WAIT_S)
        begun = self.resets
        while not self.stopping():
            async with self.lock:
                if self.resets != begun:  # its process died; what it took now would reach nobody
                    return None
                if self.stopping():  # came while this poll waited for the lock: claim nothing more
                    return None
                held = await self._take_one()
            if held is not None or time.monotonic() >= deadline:
                return held
            await asyncio.sleep(min(0.2, max(0.0, deadline - time.monotonic())))
        return None

    async def _take_one(self) -> Held | None:
        if not self.claims_open:  # a predecessor's leases go back to the queue first
            return None
        holdings = self.session.holdings
        waiting = holdings.waiting()
        if not waiting and holdings.free_slots() > 0:
            waiting = await self.session.claim(1)
        if not waiting or not holdings.can_start(waiting[0]):
            return None  # nothing to do, or the oldest waiting item does not fit the KV cache yet
        holdings.start(waiting[0])
        return waiting[0]


def _abandoned_why(held: Held, held_s: float) -> str:
    """The failure an item held past its bound is reported with: one sent before and unanswered (a
    worker's ``/fail``, or this bound's) goes as it went."""
    return held.failure or f"held {held_s:.0f}s by the pull worker without /done or /fail"


def lease_json(held: Held) -> dict[str, Any]:
    """The lease of ``held`` as the worker sees it (``GET /next``, ``GET /leases``)."""
    lease = held.lease
    return {
        "schedule_id": lease.schedule_id,
        "key": lease.key,
        "token": lease.token,
        "attempt": lease.attempt,
        "deadline_ms": lease.deadline_ms,
        "item": lease.item.to_json(),
        "params": sample_params(lease.item),  # the sampling fields to send for this sample
    }
