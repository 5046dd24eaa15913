"""A named daemon thread that calls a function every period until stopped: the service's background passes.

The reaper (``service.delivery.reaper``) and the actuals follower (``service.learning.follower``) each
carried the same ~20 lines: a thread started idempotently, a stop event waited on for the period, a
count of failed ticks in a row so an outage is one warning and not one a tick (at a tick a second a
long outage buried every other line), and a join bounded at shutdown, whose answer tells the app's
stop whether the Redis pool may be closed (``service.startup``). They live here once; what differs
is data: the thread's name, the period, whether the first tick runs at once, which errors are an
outage to ride out (any other ends the thread, as an unexpected error did before), and how the
outage is said (``Outage``).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Outage:
    """How a run of failed ticks is said: ``warning`` (``%s``: the error) once, at the ``warn_at``-th
    failure in a row, and ``ended`` (if any) at the first tick through after that warning."""

    log: logging.Logger
    warning: str
    warn_at: int = 1
    ended: str | None = None


class Periodic:
    """Calls ``tick`` every ``every_s`` on a daemon thread named ``name``; ``start``/``stop`` idempotent.

    ``tick`` answers whether it went through: False is a tick that had nothing it could do (the
    reaper on a server too old), neither a failure nor the end of an outage. An error of ``rides_out``
    is a failed tick, counted and said per ``outage``; any other ends the thread."""

    def __init__(
        self,
        name: str,
        tick: Callable[[], bool],
        every_s: float,
        outage: Outage,
        rides_out: tuple[type[BaseException], ...] = (Exception,),
        at_once: bool = False,
    ) -> None:
        self.name = name
        self.tick = tick
        self.every_s = every_s
        self.outage = outage
        self.rides_out = rides_out
        self.at_once = at_once  # the first tick at start, not a period later
        self.failed = 0  # ticks failed in a row
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> Periodic:
        """Start ticking in the background (no second thread while one runs)."""
        if self._thread is None or not self._thread.is_alive():
            self._stop.clear()
            self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
            self._thread.start()
        return self

    def _run(self) -> None:
        wait = 0.0 if self.at_once else self.every_s
        while not self._stop.wait(wait):
            self.run_once()
            wait = self.every_s

    def run_once(self) -> bool:
        """One tick, its failure counted and said (``Outage``), never raised; whether it went through."""
        try:
            went = self.tick()
        except self.rides_out as error:
            self.failed += 1
            if self.failed == self.outage.warn_at:
                self.outage.log.warning(self.outage.warning, error)
            return False
        if went:
            if self.failed >= self.outage.warn_at and self.outage.ended is not None:
                self.outage.log.info(self.outage.ended)
            self.failed = 0
        return went

    def halt(self) -> None:
        """Start no tick after the current one (``stop`` waits for it)."""
        self._stop.set()

    def stop(self, timeout_s: float = 5.0) -> bool:
        """Stop after the current tick, waiting ``timeout_s`` at most for it; whether it ended. A tick
        still on Redis then must keep its client's pool open: a connection closed mid-reply fails the
        thread reading it with an error that is not a Redis one (``service.startup``)."""
        self.halt()
        thread, self._thread = self._thread, None
        if thread is None:
            return True
        thread.join(timeout_s)
        return not thread.is_alive()
