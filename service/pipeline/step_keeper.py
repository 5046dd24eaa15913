"""Keeps what this process's live ``POST /schedule`` requests hold in Redis from lapsing while the
requests live: the step planning entry (``service.pipeline.step_part``, ``Entry``) and the in-flight
mark of a caller-chosen id (``service.pipeline.in_flight``, ``InFlight``).

Each is written for what the request should take: the plan queue's timeout, the plan's budget and
``keys.PLANNING_MARGIN_S`` to predict and publish. A request can take longer: a plan whose stages no
budget cuts, on a CPU-starved host, with no caller's deadline to give up at; a publish Redis holds.
Past its deadline an entry is none (``indexes.PLANNING_NOW``), and a retrain asked while the request
still planned or published fitted its step without it (retrain48); a mark past its deadline is gone,
and a DELETE then answered 404 while the request went on to publish the step its trainer believed
withdrawn, and a second POST of the id was not told it was in flight (markkeep48). The deadline stays
what it was for a replica that dies (the step kept out, the id held, that long at most): one thread
per process looks every quarter of ``keys.PLANNING_MARGIN_S`` for what is held within half of it of
its deadline and pushes those to that margin past now (``Delivery.keep_planning``, ``keep_mark``:
only what is still there and only ever later, so a take-back, a withdrawal or a publish is never
undone), from the request's arrival until its take-back (``let_go``, before the take-back is sent). A
request that ends in the life it was written for, nearly every one, is never written again: no
traffic, and a snapshot of Redis taken around it (the withdraw tests') does not see anything move.

Each is kept ``LONGEST_S`` at most: every request ends long before (the longest budget is a minute,
the plan queue's timeout an hour at most), so only one whose take-back was never called, a bug, would
outlive it, and it then lapses as a dead replica's does rather than keep its step out, or its id
withdrawable, for good. A Redis error extending is a warning: they lapse at their deadline, as before,
and the next tick tries again. Redis refusing the service's user (``NoPermissionError``: an ACL without
the keep's command; a password changed) is an error, each tick: no tick heals it, only an operator's
change to the ACL does, and as a warning it read as the passing outages each tick heals (review52c). It
is how a sidecar tells the same refusal of its heartbeat (an error at each beat), and, like it, no
``/readyz`` 503: every replica shares the user, and a 503 would take them all out of service for the
overrunning requests' keeps alone (requests under such an ACL answer 503 ``redis-refused`` already).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import defaultdict
from dataclasses import dataclass
from functools import partial

from service.context import Context
from service.delivery import keys
from service.delivery.errors import REDIS_FAILED
from service.delivery.unanswered import Unanswered
from service.redis_conn import refused

_log = logging.getLogger("service.pipeline")

LONGEST_S = 3 * 3600.0  # kept longer than this, it was never taken back: let it lapse
_TICKS_PER_MARGIN = 4  # a tick late by up to a quarter of the margin still finds a due one live


@dataclass(frozen=True)
class Entry:
    """A request's entry ``member`` among ``step``'s planning ones (``keys.step_planning``)."""

    step: int
    member: str


@dataclass(frozen=True)
class InFlight:
    """A request's in-flight mark: its ``request_id``'s entry in ``schedule_id``'s ``P:planning``."""

    schedule_id: str
    request_id: str


Kept = Entry | InFlight


@dataclass(frozen=True)
class _Held:
    ctx: Context
    lapses: float  # ``time.monotonic()`` when its deadline passes (this side of Redis's answer: later)
    until: float  # ``time.monotonic()`` past which it is no longer kept (``LONGEST_S``)


class StepKeeper:
    """What is kept (an entry or a mark -> its context and deadline), and the thread that extends it
    while anything is."""

    def __init__(self, *, ticks_itself: bool = True) -> None:
        """``ticks_itself`` False: no thread, only its owner's ``tick`` calls extend (a test that counts
        what one tick sends: the thread's own tick, a quarter margin after the first ``hold``, came
        in the middle of a loaded host's test and was counted with it, flaky62)."""
        self._ticks_itself = ticks_itself
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)  # ``settle``'s: a hold, or the thread's end
        self._held: dict[Kept, _Held] = {}
        self._thread: threading.Thread | None = None
        self._wake = threading.Event()  # ``settle``: the thread looks now, not at its next tick
        self._settling = False  # ``settle`` asked while something was kept: the last ``let_go`` wakes it

    def hold(self, ctx: Context, kept: Kept, life_s: float) -> None:
        """Keep ``kept``, written to lapse ``life_s`` from now, live until ``let_go``; the thread (of
        a keeper that ``ticks_itself``) starts if none runs: also where the last one ended on a
        ``BaseException`` (a ``SystemExit`` raised in it), which ends ``_run``: it had left ``_thread``
        set, so no later hold started another and every mark and entry lapsed under its live request
        (review48b)."""
        now = time.monotonic()
        with self._lock:
            self._held[kept] = _Held(ctx, now + life_s, now + LONGEST_S)
            self._changed.notify_all()  # a settle waiting for the thread's end: it will not end now
            if not self._ticks_itself:
                return
            if self._thread is None or not self._thread.is_alive():  # one a BaseException ended too
                self._wake.clear()
                self._settling = False
                self._thread = threading.Thread(target=self._run, name="step-keeper", daemon=True)
                self._thread.start()

    def let_go(self, kept: Kept) -> None:
        """Stop keeping ``kept`` (its request takes it back next)."""
        with self._lock:
            self._held.pop(kept, None)
            if self._settling and not self._held:
                self._wake.set()

    def let_go_all(self) -> int:
        """Stop keeping everything kept now; how many that was. For a caller whose holds have no
        request left to take them back, which ``let_go`` would need one by one: a test's keeper at the
        test's end (tests/conftest.py's ``keeper``), so that ``settle`` then ends its thread at once;
        it had cleared the private ``_held`` under ``_lock`` itself. Like ``let_go``, a ``settle``
        waiting on what was kept is woken."""
        with self._lock:
            count = len(self._held)
            self._held.clear()
            if self._settling:
                self._wake.set()
        return count

    def settle(self, timeout_s: float) -> bool:
        """End the thread now if nothing is kept, else at the last ``let_go``, waiting ``timeout_s``
        at most for the former; whether none runs.

        The thread ends at its first tick with nothing kept, up to a tick (15 s) after the last
        ``let_go``: where an app stops (``service.app``), it is woken to end there, or, where a request
        outlives the stop (a planning thread runs on), as that request lets go. A test process starts
        and stops many apps, and the thread had lived on into the test modules after them (threads61).
        One that keeps something still ticks until then (another app's request, in a process that
        runs several: its next ``hold`` starts another thread). A hold landing while the settle waits
        (before the woken thread looked: it then ticks on) ends the wait at once, as one found kept
        does: the settle had waited out its whole timeout for a thread never to end then (edges63)."""
        with self._lock:
            thread = self._thread
            if thread is None:
                return True
            self._settling = True
            if self._held:
                return False
            self._wake.set()
            self._changed.wait_for(
                lambda: self._thread is not thread or bool(self._held) or not thread.is_alive(), timeout_s
            )
            if self._thread is thread:  # something kept, or the time up: it ticks on (or it had
                return not thread.is_alive()  # died before the wait: none runs then)
        thread.join(timeout_s)  # it ended under the lock (``_run``): only its return is left
        return not thread.is_alive()

    def held(self) -> int:
        """How many are kept now."""
        with self._lock:
            return len(self._held)

    def tick(self) -> None:
        """Extend each one kept that is within half of ``keys.PLANNING_MARGIN_S`` of its deadline to
        that margin past now (Redis's clock): a round trip per deployment for the entries, one per
        mark; a mark found gone (taken back, withdrawn, published, lapsed) let go, and those past
        ``LONGEST_S`` too, with a warning. A context whose extension raises anything but Redis's
        failure (a bug; a pool an app's stop closed, in a process that runs several) is logged and
        skipped: the others' are still extended (review48c)."""
        now, margin_s = time.monotonic(), keys.PLANNING_MARGIN_S
        with self._lock:
            stale = [kept for kept, held in self._held.items() if held.until < now]
            for kept in stale:
                del self._held[kept]
            by_ctx: dict[int, tuple[Context, list[Kept]]] = {}
            for kept, held in self._held.items():
                if held.lapses - now <= margin_s / 2:
                    by_ctx.setdefault(id(held.ctx), (held.ctx, []))[1].append(kept)
        if stale:
            _log.warning("kept past %.0f s, left to lapse: %d planning entries, marks", LONGEST_S, len(stale))
        life_ms = int(margin_s * 1000)
        for ctx, due in by_ctx.values():
            try:
                pushed, gone = _extended(ctx, due, life_ms)
            except Exception:  # a bug, or redis-py on a pool an app's stop closed: the others still kept
                _log.exception("keeping the planning entries and marks of one context failed")
                continue
            self._pushed(pushed, gone, now + margin_s)

    def _pushed(self, pushed: list[Kept], gone: list[Kept], lapses: float) -> None:
        """``pushed`` extended to lapse at ``lapses`` (those still kept), ``gone`` let go."""
        with self._lock:
            for kept in pushed:
                held = self._held.get(kept)
                if held is not None:
                    self._held[kept] = _Held(held.ctx, lapses, held.until)
            for kept in gone:
                self._held.pop(kept, None)

    def _run(self) -> None:
        """Tick while anything is kept; the thread ends with the last (``hold`` starts another), at
        its next tick or when ``settle`` wakes it (an early tick extends only those due, as any)."""
        while True:
            self._wake.wait(keys.PLANNING_MARGIN_S / _TICKS_PER_MARGIN)
            with self._lock:
                self._wake.clear()
                if not self._held:
                    self._thread, self._settling = None, False
                    self._changed.notify_all()
                    return
            try:
                self.tick()
            except Exception:  # a bug: logged, the keeper goes on
                _log.exception("keeping the planning entries and marks failed")
            except BaseException:  # a ``SystemExit``: the thread ends, as with nothing kept (a ``hold``
                with self._lock:  # starts another), and a ``settle`` waiting for that end is told
                    self._thread, self._settling = None, False
                    self._changed.notify_all()
                raise


def _extended(ctx: Context, due: list[Kept], life_ms: int) -> tuple[list[Kept], list[Kept]]:
    """``due`` of one deployment extended: those pushed on, and the marks found gone; where Redis
    failed (logged) neither: tried again at the next tick. Entries and marks each on their own."""
    by_step: dict[int, list[str]] = defaultdict(list)
    marks: list[InFlight] = []
    for kept in due:
        if isinstance(kept, Entry):
            by_step[kept.step].append(kept.member)
        else:
            marks.append(kept)
    pushed: list[Kept] = []
    gone: list[Kept] = []
    unanswered = Unanswered(ctx.delivery.client)  # a master that did not answer: once a tick
    try:
        if by_step:
            failed = ctx.delivery.keep_planning(by_step, life_ms, unanswered)  # told who did not answer
            pushed.extend(kept for kept in due if isinstance(kept, Entry) and kept.step not in failed)
            if failed:
                _told("%d steps' planning entries not extended", len(failed), list(failed.values()))
    except REDIS_FAILED as error:
        _told("%d steps' planning entries not extended", len(by_step), [error])
    if marks:
        _kept_marks(ctx, marks, life_ms, unanswered, (pushed, gone))
    return pushed, gone


def _kept_marks(
    ctx: Context,
    marks: list[InFlight],
    life_ms: int,
    unanswered: Unanswered,
    into: tuple[list[Kept], list[Kept]],
) -> None:
    """Each of ``marks`` kept on its own, put in ``into``'s pushed or gone: one whose call Redis failed
    (a cluster master down or failing over, a key of the wrong type) is neither, tried again at the
    next tick, and the marks after it are still sent: the first failure had ended the tick's marks, so
    a request stuck on a failing master, first in line at every tick, left those of every other slot
    to lapse under their live requests (review48c). A master that did not answer this tick (the steps'
    entries' too) is not asked again: each of its marks had cost its own timeouts (cluster50); one
    failed over since the client last read its map is asked once more, at its new master
    (``Unanswered.sent``), not a tick later (cluster52). The failures are logged once a tick."""
    pushed, gone = into
    failed: list[Exception] = []
    for kept in marks:
        key = ctx.delivery.keys(kept.schedule_id).meta  # the mark's slot (``P:planning``'s)
        known = unanswered.known(key)
        if known is not None:
            failed.append(known)
            continue
        try:
            held = unanswered.sent(
                key, partial(ctx.delivery.keep_mark, kept.schedule_id, kept.request_id, life_ms)
            )
        except REDIS_FAILED as error:
            unanswered.met(key, error)
            failed.append(error)
            continue
        (pushed if held else gone).append(kept)
    if failed:
        _told("%d in-flight marks not extended", len(failed), failed)


def _told(what: str, count: int, failed: list[Exception]) -> None:
    """``count`` not extended (``what``), told once a tick with the first of ``failed``: a warning, or
    an error naming the refusal where Redis refused the service's user (the module's docstring)."""
    first = next((error for error in failed if refused(error)), failed[0])
    level = logging.ERROR if refused(first) else logging.WARNING
    _log.log(level, what + ": %s: %s", count, type(first).__name__, first)


KEEPER = StepKeeper()
