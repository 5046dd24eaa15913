"""Keeps the step planning entries of this process's live ``POST /schedule`` requests from lapsing
while the requests live (``service.pipeline.step_part``).

An entry is written for what the request should take: the plan queue's timeout, the plan's budget
and ``keys.PLANNING_MARGIN_S`` to predict and publish. A request can take longer: a plan whose
stages no budget cuts, on a CPU-starved host, with no caller's deadline to give up at; a publish
Redis holds. Once past its deadline the entry is none (``indexes.PLANNING_NOW``), and a retrain asked
while the request still planned or published fitted its step without it (retrain48). The deadline
stays what it was for a replica that dies (the step kept out that long at most), and one thread per
process looks every quarter of ``keys.PLANNING_MARGIN_S`` for live entries within half of it of their
deadline and pushes those to that margin past now (``Delivery.keep_planning``: one round trip per
tick that finds any, only entries still there and only ever later, so a take-back is never undone),
from the request's arrival until its take-back (``Arrived.release``). A request that ends in the life
it was written for, nearly every one, is never written again: no traffic, and a snapshot of Redis
taken around it (the withdraw tests') does not see its entry move.

An entry is kept ``LONGEST_S`` at most: every request ends long before (the longest budget is a
minute, the plan queue's timeout an hour at most), so only an entry whose take-back was never
called, a bug, would outlive it, and it then lapses as a dead replica's does rather than keep its
step out for good. A Redis error extending is a warning: the entries lapse at their deadline, as
before, and the next tick tries again.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import defaultdict
from dataclasses import dataclass

from service.context import Context
from service.delivery import keys
from service.delivery.errors import REDIS_FAILED

_log = logging.getLogger("service.pipeline")

LONGEST_S = 3 * 3600.0  # an entry kept longer than this was never taken back: let it lapse
_TICKS_PER_MARGIN = 4  # a tick late by up to a quarter of the margin still finds a due entry live


@dataclass(frozen=True)
class _Held:
    ctx: Context
    step: int
    lapses: float  # ``time.monotonic()`` when its deadline passes (this side of Redis's answer: later)
    until: float  # ``time.monotonic()`` past which it is no longer kept (``LONGEST_S``)


class StepKeeper:
    """The entries kept (member -> what it is), and the thread that extends them while there are any."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: dict[str, _Held] = {}
        self._thread: threading.Thread | None = None

    def hold(self, ctx: Context, step: int, member: str, life_s: float) -> None:
        """Keep ``member`` of ``step``'s planning entries, just written for ``life_s``, live until
        ``let_go``; the thread starts if none runs."""
        now = time.monotonic()
        with self._lock:
            self._held[member] = _Held(ctx, step, now + life_s, now + LONGEST_S)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="step-keeper", daemon=True)
                self._thread.start()

    def let_go(self, member: str) -> None:
        """Stop keeping ``member`` (its request takes it back next)."""
        with self._lock:
            self._held.pop(member, None)

    def held(self) -> int:
        """How many entries are kept now."""
        with self._lock:
            return len(self._held)

    def tick(self) -> None:
        """Extend each entry kept that is within half of ``keys.PLANNING_MARGIN_S`` of its deadline to
        that margin past now (Redis's clock): one round trip per deployment; those past ``LONGEST_S``
        let go, with a warning."""
        now, margin_s = time.monotonic(), keys.PLANNING_MARGIN_S
        with self._lock:
            stale = [member for member, held in self._held.items() if held.until < now]
            for member in stale:
                del self._held[member]
            by_ctx: dict[int, tuple[Context, list[tuple[int, str]]]] = {}
            for member, held in self._held.items():
                if held.lapses - now <= margin_s / 2:
                    by_ctx.setdefault(id(held.ctx), (held.ctx, []))[1].append((held.step, member))
        if stale:
            _log.warning("step's planning entries kept past %.0f s, left to lapse: %d", LONGEST_S, len(stale))
        life_ms = int(margin_s * 1000)
        for ctx, entries in by_ctx.values():
            if _extended(ctx, entries, life_ms):
                self._pushed([member for _, member in entries], now + margin_s)

    def _pushed(self, members: list[str], lapses: float) -> None:
        """``members`` extended to lapse at ``lapses`` (those still kept)."""
        with self._lock:
            for member in members:
                held = self._held.get(member)
                if held is not None:
                    self._held[member] = _Held(held.ctx, held.step, lapses, held.until)

    def _run(self) -> None:
        """Tick while entries are kept; the thread ends with the last (``hold`` starts another)."""
        while True:
            time.sleep(keys.PLANNING_MARGIN_S / _TICKS_PER_MARGIN)
            with self._lock:
                if not self._held:
                    self._thread = None
                    return
            try:
                self.tick()
            except Exception:  # a bug: logged, the keeper goes on
                _log.exception("keeping the step's planning entries failed")


def _extended(ctx: Context, entries: list[tuple[int, str]], life_ms: int) -> bool:
    """``entries`` (step, member) of one deployment extended; False, logged, where Redis failed."""
    by_step: dict[int, list[str]] = defaultdict(list)
    for step, member in entries:
        by_step[step].append(member)
    try:
        ctx.delivery.keep_planning(by_step, life_ms)
    except REDIS_FAILED as error:
        _log.warning("step's planning entries not extended: %s: %s", type(error).__name__, error)
        return False
    return True


KEEPER = StepKeeper()
