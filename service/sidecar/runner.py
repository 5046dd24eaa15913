"""The push-mode sidecar: keep the engine busy with this worker's planned items, and nothing more.

One asyncio task per item in flight sends it to the engine and completes it; one heartbeat task
keeps every held lease alive and cancels the item whose lease the server no longer honours (the
HTTP request is closed, so the engine aborts it). The main loop refills free slots as items finish:
claim from the own queue, else steal, within the engine's concurrency and, when the schedule asks
for it, the KV cache (see ``holdings``).

Failures are sorted by whose fault they are (``engine_client``). The engine refusing an item (a
4xx but 401/403/429 and a 404 naming the model), failing on it (a 500 with an error body, after the
retries in place) or answering what does not parse is charged to the item: it is reported failed,
so a poison item is dead-lettered after its attempts. The engine being down (connection errors,
429, 502-504, a bare 500, its API key refused, an aborted request) is not: the lease is released
without spending an attempt and claiming pauses until the engine answers again; but an item such
a failure keeps hitting while the engine answers its health probe is charged after all, an engine
that stops answering while items run has them handed back, and one item it never answers past its
bound (a stuck sequence) is reported failed, as a pull worker's is (``watchdog``). On SIGTERM the
sidecar stops claiming, hands back what it has not started, lets running items finish for
``drain_timeout_s`` and releases the rest (``push_drain``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any

from service.delivery.errors import REDIS_FAILED, UnknownScheduleError
from service.delivery.outcomes import CompletionOutcome
from service.redis_conn import RedisTooOldError, VersionCheck, version_known
from service.sidecar.engine_client import EngineClient
from service.sidecar.engine_reply import EngineError, EngineReply, result_of
from service.sidecar.holdings import Held
from service.sidecar.holds import DEFAULT_HOLD_TIMEOUT_S
from service.sidecar.hurry import Hurry
from service.sidecar.in_flight import InFlight
from service.sidecar.push_drain import drain
from service.sidecar.session import RELEASE_GRACE_S, SessionStats, WorkerSession
from service.sidecar.supervision import LoopDiedError, Supervisor
from service.sidecar.takeover import Takeover
from service.sidecar.timings import Durations
from service.sidecar.waits import done_else_dropped, done_unless, sleep_unless, stopped_at
from service.sidecar.watchdog import EngineWatch, retry_or_fail

log = logging.getLogger("service.sidecar")


@dataclass(frozen=True, slots=True)
class RunnerSettings:
    """Pacing of the push loop."""

    idle_poll_s: float = 0.2  # how often an idle sidecar looks for new schedules or work to steal
    drain_timeout_s: float = 20.0  # on shutdown, how long running items may finish before release
    engine_retries: int = 2  # in-place retries of a transient engine failure, before hand-back or failure
    engine_retry_pause_s: float = 0.5  # pause between those retries
    engine_wait_s: float = 1.0  # poll interval while waiting for the engine to (re)appear
    redis_retry_s: float = 0.5  # pause after Redis failed a claim before trying again
    engine_probe_s: float = 5.0  # while items run, how often the engine's /health is asked
    engine_stall_s: float = 30.0  # no answer from the engine this long while items run: hand them back
    hang_timeout_s: float = DEFAULT_HOLD_TIMEOUT_S  # one item unanswered this long (at least): hand back
    release_grace_s: float = RELEASE_GRACE_S  # a hand-back's bound; on shutdown, past the drain timeout


@dataclass
class Sidecar:
    """Push mode: claims items and runs them on the engine until ``stop`` is set."""

    session: WorkerSession
    engine: EngineClient
    settings: RunnerSettings = RunnerSettings()
    # a plain Redis down at start-up: its version, asked before the first claim (``launch.connect``)
    # and before the takeover's first write
    version: VersionCheck | None = None
    _items: InFlight = field(default_factory=InFlight, init=False)  # a task per item on the engine
    _claiming: asyncio.Lock = field(default_factory=asyncio.Lock, init=False)  # held by a claim in flight
    _engine_down: bool = field(default=True, init=False)  # until the engine first answers
    _last_refusal: str | None = field(default=None, init=False)  # the last "not ready" logged
    _failed_at: float | None = field(default=None, init=False)  # when the engine last failed an item
    # claiming failed on Redis (logged once); None until the first claim reached it or failed
    _redis_down: bool | None = field(default=None, init=False)
    # a claim still waiting on Redis when told to stop: the drain waits for it within its time
    _claim_left: asyncio.Task[list[Held]] | None = field(default=None, init=False)
    watch: EngineWatch = field(init=False)  # the engine's signs of life while items run (``watchdog``)
    # hands back at start what an earlier process of this worker id held (``takeover``)
    takeover: Takeover = field(init=False)
    generation: Durations = field(default_factory=Durations, init=False)  # engine seconds per item run
    last_turn: float = field(default_factory=time.monotonic, init=False)  # monotonic time the main
    # loop last turned (or polled a loading engine): what the liveness probe reads (``health``)
    hurry: Hurry = field(init=False)  # set by a second signal: the drain ends now (``hurry.py``)
    # the background loops (heartbeats, takeover, engine watch, hang bound): the first to die stops
    # the sidecar, which hands back what it holds and exits 70 (``supervision``)
    loops: Supervisor = field(default_factory=Supervisor, init=False)

    def __post_init__(self) -> None:
        self.hurry = Hurry(grace_s=self.settings.release_grace_s)
        self._items.died = self.loops.fail  # an item's task that dies of a bug stops the sidecar too
        self.watch = EngineWatch(self.engine, self.settings.engine_probe_s, self.settings.engine_stall_s)
        self.takeover = Takeover(self.session, retry_s=self.settings.redis_retry_s, version=self.version)

    @property
    def engine_up(self) -> bool:
        """Whether the engine answered last time the sidecar asked (or ran an item on it)."""
        return not self._engine_down

    @property
    def redis_up(self) -> bool:
        """Whether the last claim reached Redis and the last heartbeat did not fail (what the
        readiness probe reads); False before the first claim (a plain Redis down at start-up is
        only found out by claiming). A sidecar whose slots are all busy claims nothing, so its
        heartbeats are what find Redis gone."""
        return self._redis_down is False and not self.session.heartbeats_failing

    async def run(self, stop: asyncio.Event) -> SessionStats:
        """Serve until ``stop`` is set, then drain; return the session's counters. ``LoopDiedError`` once
        drained when a background loop (or the main loop) died of an exception it did not expect.

        Nothing is claimed before the takeover is done: what an earlier process of this worker id
        held goes back to the head of its queue first, so it is claimed first, in the plan's order."""

        def died(_: LoopDiedError) -> None:  # hand back what is held now (a second signal's drain), exit 70
            stop.set()
            self.hurry.set()

        self.loops.on_death = died
        self.loops.start("heartbeat loop", self._heartbeats())
        self.loops.start("takeover loop", self._takeover(stop))
        watch = self.watch.watch(lambda: bool(self._items), self._engine_stalled)
        self.loops.start("engine watch loop", watch)
        hangs = self.watch.hangs(self.session, self.settings.hang_timeout_s, self._items.stop)
        self.loops.start("hang bound loop", hangs)
        signalled = asyncio.create_task(stopped_at(stop))  # the drain's clock starts at the stop
        try:
            try:
                await self._serve(stop)
            except RedisTooOldError:
                raise  # nothing claimed yet: the command says why, exit 2
            except Exception as exc:  # a bug in the main loop: hand back what is held, then exit 70
                self.loops.fail("main loop", exc)
            ends = await self._drain(signalled.result() if signalled.done() else time.monotonic())
            # a hand-back a loop has under way (the engine watch's, the hang bound's) ends before the
            # loops are cancelled, within the drain's time: cut, its leases lapsed, handed back by nobody
            await self._within(self.session.hand_backs_settled(), ends)
        finally:
            signalled.cancel()
            await self.loops.stop()
        # the heartbeats' resends over, then the presence key: within the drain's time, not past it,
        # and cut by a second signal that comes meanwhile
        await self._within(self.session.resends.settle(ends - time.monotonic()), ends)
        # the next process of this id need not wait for the presence key to lapse; before any claim,
        # the key this process wrote says Redis answered (review50c: it was left, and the next
        # process, stopped in its wait on it, named a twin)
        if self.redis_up or (self._redis_down is None and self.takeover.marked):
            await self._within(self.takeover.leave(ends - time.monotonic()), ends)
        if self.loops.dead is not None:
            raise self.loops.dead
        return self.session.stats

    async def _within(self, step: Coroutine[Any, Any, None], ends: float) -> None:
        """A last step of the shutdown, by ``ends`` or a second signal's grace (``hurry.py``); past it
        left undone (it counts what it leaves itself as it is cancelled)."""
        with contextlib.suppress(TimeoutError):
            await self.hurry.bound(step, ends)

    async def _takeover(self, stop: asyncio.Event) -> None:
        """The takeover, then the presence key; a server found too old ends it without a death: the
        main loop's own check of the same version raises it (the command's exit 2, not 70)."""
        with contextlib.suppress(RedisTooOldError):
            await self.takeover.run(stop)
        await asyncio.get_running_loop().create_future()  # until cancelled, as a loop that lives

    async def _serve(self, stop: asyncio.Event) -> None:
        """Claim and start items until ``stop`` is set (the main loop)."""
        while not stop.is_set():
            self.last_turn = time.monotonic()
            if self.version is not None:
                check = asyncio.create_task(asyncio.to_thread(version_known, self.version))
                if not await done_else_dropped(stop, check):  # a stalled server: nothing claimed yet
                    return
                if not check.result():  # RedisTooOldError: too old
                    await sleep_unless(stop, self.settings.redis_retry_s)
                    continue
            if not self.takeover.done.is_set():  # before the engine's "claiming" line: it holds
                await sleep_unless(stop, self.settings.idle_poll_s)  # claims up to a presence TTL
                continue
            if not await self._engine_ready(stop):
                return
            try:
                await self._fill(stop)
                if self._redis_down:
                    log.info("redis reachable again, claiming")
                self._redis_down = False
            except REDIS_FAILED as exc:  # Redis down or restarting: keep running, retry soon
                if not self._redis_down:  # once per outage, not twice a second for its length
                    log.warning("redis unavailable, not claiming: %s", exc)
                self._redis_down = True
                await sleep_unless(stop, self.settings.redis_retry_s)
            await self._items.wait_any(stop, self.settings.idle_poll_s)

    async def _engine_ready(self, stop: asyncio.Event) -> bool:
        """Wait (without claiming) until the engine answers; False if asked to stop meanwhile."""
        while self._engine_down and not stop.is_set():
            self.last_turn = time.monotonic()  # alive: waiting for an engine that may take minutes
            if self._failed_at is not None:  # it just failed an item (an abort: paused for a weight
                # sync, still listing its models): give it a moment, or the item goes straight back
                await sleep_unless(stop, self._failed_at + self.settings.engine_wait_s - time.monotonic())
                self._failed_at = None
            try:  # a frozen engine's probe is not waited out (its timeout) past a stop
                probe = asyncio.create_task(self.engine.ready())
                if not await done_else_dropped(stop, probe):
                    return False
                model = probe.result()
                self.watch.alive()
                self._engine_down = False
                # said at start too: a sidecar that works would otherwise log nothing at all, and
                # one line says which model it requests (the first listed, unless --engine-model)
                again = " again" if self._last_refusal is not None else ""
                log.info("engine ready%s, claiming: requesting model %s", again, model)
                self._last_refusal = None
                return True
            except EngineError as exc:
                if str(exc) != self._last_refusal:  # once per change, not once a second for an hour
                    log.warning("engine not ready, not claiming: %s", exc)
                self._last_refusal = str(exc)
                await self._hand_back_unstarted()
            if self._items:
                return True  # still finishing items; the loop comes back here once they are done
            await sleep_unless(stop, self.settings.engine_wait_s)
        return not stop.is_set()

    async def _hand_back_unstarted(self) -> None:
        """Release leases claimed but not started (a claim in flight as the engine went down): nothing
        starts them until it answers, and heartbeated they stay out of reach of reapers and thieves."""
        waiting = self.session.holdings.waiting()
        if waiting:
            log.warning("engine down: releasing %d unstarted leases", len(waiting))
            await self.session.hand_back(waiting, self.settings.release_grace_s)

    async def _fill(self, stop: asyncio.Event) -> None:
        """Start what may start, then claim into free slots until nothing more fits or comes."""
        holdings = self.session.holdings
        while not self._engine_down:
            self._start_waiting()
            if holdings.waiting() or holdings.free_slots() == 0:
                return
            if not await self._claim(holdings.free_slots(), stop):
                return

    async def _claim(self, want: int, stop: asyncio.Event) -> bool:
        """Claim up to ``want`` items, unless the engine is known stalled; whether any came. A claim
        still waiting on Redis when ``stop`` is set is left to the drain (``push_drain.claim_landed``):
        awaited here, a stalled Redis held the drain's start back by the client's 5 s socket timeout,
        past the exit docs/sidecar.md promises.

        Under the lock the stall path takes before handing back: a claim sent just before the stall
        was found could otherwise reach Redis just after, lease the items just handed back, and hold
        them (heartbeats renewing them) on a frozen engine until the readiness check timed out and
        released them again, counted twice."""
        async with self._claiming:
            if self._engine_down or stop.is_set():  # told to stop while the engine's probe was out
                return False
            claim = asyncio.create_task(self.session.claim(want))
            if not await done_unless(stop, claim):
                self._claim_left = claim
                return False
            got = claim.result()
        for schedule_id in self.session.cancelled_held():  # its inbox read said so: stop them now
            self._stop_cancelled(schedule_id)
        return bool(got)

    def _start_waiting(self) -> None:
        """Send each waiting lease that fits now to the engine, one task each (``_run_item``)."""
        for held in self.session.holdings.start_fitting():  # first come, first served
            self._items.start(held, self._run_item(held))

    async def _run_item(self, held: Held) -> None:
        """Generate one item and complete it; a cancellation (lost lease, shutdown) just stops it."""
        try:
            reply = await self._generate(held)
        except EngineError as exc:
            await self._engine_failed(held, exc)
            return
        except Exception as exc:  # the request could not even be built or sent (a payload that does
            # not encode): charged to the item, or its lease, renewed by the heartbeat, never ends
            log.exception("could not send %s to the engine", held.lease.key)
            await self._engine_failed(held, EngineError(f"{type(exc).__name__}: {exc}", retryable=False))
            return
        self.watch.alive()
        self.generation.observe(reply.wall_time_s)
        self.watch.forget((held.lease.schedule_id, held.lease.key))
        self.session.holdings.observe(reply.completion_tokens, reply.wall_time_s)  # rate: KV, hang bound
        try:
            concurrency = self.session.holdings.mean_concurrency(held)
            outcome = await self.session.complete(held, result_of(held, reply, concurrency))
            if outcome is CompletionOutcome.STALE and self.session.is_cancelled(held.lease.schedule_id):
                self._stop_cancelled(held.lease.schedule_id)
        except UnknownScheduleError:  # its keys are gone: counted and logged by ``session.complete``
            pass
        except Exception:  # Redis gone past the retry window: ``resends.py`` sends it at a later heartbeat
            log.exception("could not complete %s; sent again once Redis answers", held.lease.key)

    def _stop_cancelled(self, schedule_id: str) -> None:
        """The trainer cancelled ``schedule_id`` (a completion of it was just refused): close its other
        requests now, as the next heartbeat would, so their slots go to the next step at once."""
        for held in self.session.drop_cancelled(schedule_id):
            self._items.cancel(held)

    async def _engine_failed(self, held: Held, exc: EngineError) -> None:
        """Release the item if the engine is at fault, fail it if the item is (see module docstring)."""
        reason: str | None = str(exc)
        if exc.engine_down:  # the engine's fault, unless a healthy engine keeps failing this item
            reason = await self.watch.charge((held.lease.schedule_id, held.lease.key), exc)
        died = ""
        if reason is None:
            # lost mid-way and the engine down now: it died running the item, perhaps of it, so
            # the refund is once per item (keys.RESET_REFUNDS): one that kills it every time ends
            died = "its engine" if exc.crashed and not await self.watch.healthy() else ""
            self._engine_down, self._failed_at = True, time.monotonic()
            log.warning("engine failing, releasing %s: %s", held.lease.key, exc)
        else:
            log.warning("engine failed %s, reporting it failed: %s", held.lease.key, reason)
        await retry_or_fail(self.session, held, reason, died)

    async def _engine_stalled(self, silent_s: float) -> None:
        """The engine gave no sign of life for ``silent_s`` while items ran on it (frozen, hung): stop
        those requests and hand every lease back without spending an attempt, as for an engine that
        is down, so the reaper and thieves are not kept from them; the main loop then waits for the
        engine as at startup. A completion already being sent is left to finish. No claim starts
        once this begins, and one already in flight is waited for: its leases go back here, once,
        instead of after the next readiness check."""
        self._engine_down, self._failed_at = True, time.monotonic()
        holdings = self.session.holdings
        stuck = self._items.running(holdings)
        log.warning("engine gave no sign of life for %.1fs; releasing %d running items", silent_s, len(stuck))
        await self._items.stop(*stuck)
        async with self._claiming:  # a claim in flight ends first: what it leased goes back with the rest
            hand = [h for h in holdings.all() if not h.completing]
            await self.session.hand_back(hand, self.settings.release_grace_s)

    async def _generate(self, held: Held) -> EngineReply:
        """The engine's reply; its last error once the retries in place are spent, ``crashed`` when any
        try was lost mid-way (after an engine's death the retries meet a refused connection)."""
        crashed = False
        for attempt in range(self.settings.engine_retries + 1):
            try:
                return await self.engine.generate(held.lease.item)
            except EngineError as exc:
                crashed = crashed or exc.dropped
                if not exc.retryable or attempt == self.settings.engine_retries:
                    exc.crashed = crashed
                    raise
                await asyncio.sleep(self.settings.engine_retry_pause_s)
        raise AssertionError("unreachable")

    async def _heartbeats(self) -> None:
        """Renew every held lease each interval; stop the engine requests of the leases found lost."""
        while True:
            await self.session.until_heartbeat_due(time.monotonic())
            try:
                lost = await self.session.heartbeat()
            except Exception:  # never let the heartbeat loop die: every lease would lapse
                log.exception("heartbeat failed")
                continue
            for held in lost:
                if not self.session.is_cancelled(held.lease.schedule_id):  # a cancel is told once
                    log.warning(
                        "lease on %s lost; stopping it",
                        held.lease.key,
                        extra={"schedule_id": held.lease.schedule_id},
                    )
                self._items.cancel(held)

    async def _drain(self, stopped: float) -> float:
        """Stop claiming and drain (``push_drain``) from ``stopped`` (the stop's time): the shutdown
        keeps to ``drain_timeout_s`` plus ``release_grace_s`` from it, Redis down included."""
        died = "its sidecar" if self.loops.dead is not None else ""  # a bug: refunded once per item
        claim, self._claim_left = self._claim_left, None
        deadline = stopped + self.settings.drain_timeout_s
        grace_s = self.settings.release_grace_s
        return await drain(self.session, self._items, claim, self.hurry, deadline, grace_s, died)
