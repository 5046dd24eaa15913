"""The watch that stops a running CP-SAT search once the caller's hard deadline has passed.

Why. The planner gives up at its caller's hard deadline by checking it between its parts
(``scheduler.giveup``), but a CP-SAT search is one call: it was checked only once it returned, at its
own limits. A deterministic limit is a wall-clock one only on an idle host, and the wall limit is at
most what is left of the plan's budget (up to a minute), so on a starved host, or at a replica's stop
(``service/api/stopping.py``: its clock jumps past every deadline), the plan gave up up to one solve
late, its planning thread and the process's exit held that long.

How. ``cut_at_deadline`` has one shared daemon thread (``cpsat-watch``) read each running solve's
deadline clock and ask CP-SAT to stop once it has passed (``CpSolver.stop_search``: under the
solver's own lock, safe from another thread). It reads again when the nearest deadline is due, and
``POLL_S`` at the latest, since a clock may jump (the stop's does): a caller's deadline is met as it
passes, the stop within ``POLL_S``. A stop asked before the search has begun is lost, so the watch
asks again at each reading until the solve has returned. A solve registers without waking the thread
unless its deadline comes before the thread's next reading, and the thread reads on for ``LINGER_S``
after the last solve before it sleeps: the cpsat policy's solves come one after another. A reading
every 5 ms and a wake for each solve cost a small solve (24 ms of CPU) 0.8-1.8 ms of CPU and 4-14 ms
of wall at load 6-10; this way, 0.2 ms of CPU and no wall that the host's noise does not hide
(docs/experiments.md, cpsatstop48). A solve without a hard deadline is not watched at all: it
reads no clock and stops on its limits only, as before. A cut solve returns what it had (FEASIBLE, or
UNKNOWN, where the callers fall back), and the planner's next check gives the plan up: a search is
cut only past the deadline, so a plan that is returned was never cut, and a replay's plan
(``clock.frozen``) is the same plan.

A registration whose clock or ``stop_search`` raises is logged and no longer watched (its solve ends
on its own limits, as an unwatched one does); the others' readings go on. Neither raises today, but a
raise in the shared thread ended it, and every other solve under way was then cut only at its limits
until the next registration started the thread again (deadline49).
"""

from __future__ import annotations

import itertools
import logging
import math
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from ortools.sat.python import cp_model

from scheduler import giveup

POLL_S = 0.05  # the longest wait between two readings of a running solve's clock (a jump's lateness)
LINGER_S = 1.0  # the thread reads on this long after the last solve before it sleeps

_Solve = tuple[cp_model.CpSolver, float, Callable[[], float]]  # the solver, its deadline, its clock
_log = logging.getLogger(__name__)


class _Watch:
    """The solves under way with a hard deadline, and the one thread that stops those past it."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._solves: dict[int, _Solve] = {}
        self._keys = itertools.count()
        self._thread: threading.Thread | None = None
        self._next_reading = math.inf  # ``time.monotonic``, while the thread waits; inf: it sleeps
        self._registered = 0  # solves registered so far: one the thread has not read makes it read again

    @contextmanager
    def watching(
        self, solver: cp_model.CpSolver, deadline: float, wall: Callable[[], float]
    ) -> Iterator[None]:
        """Stop ``solver``'s search, run in the block, once ``wall()`` reaches ``deadline``."""
        due = time.monotonic() + max(0.0, deadline - wall())
        with self._changed:
            key = next(self._keys)
            self._solves[key] = (solver, deadline, wall)
            self._registered += 1
            if self._thread is None or not self._thread.is_alive():  # a forked child has none
                self._thread = threading.Thread(target=self._run, name="cpsat-watch", daemon=True)
                self._thread.start()
            elif due < self._next_reading:
                self._changed.notify()
        try:
            yield
        finally:
            with self._changed:
                self._solves.pop(key, None)  # gone already where its clock or stop raised

    def _run(self) -> None:
        idle_until = 0.0
        while True:
            with self._changed:
                while not self._solves and time.monotonic() >= idle_until:
                    self._next_reading = math.inf
                    self._changed.wait()
                solves, seen = list(self._solves.items()), self._registered
            wait_s, failed = _stopped_past(solves)
            with self._changed:
                for key in failed:
                    self._solves.pop(key, None)
                if solves:
                    idle_until = time.monotonic() + LINGER_S
                if self._registered == seen:  # none came since: nothing unread
                    self._next_reading = time.monotonic() + wait_s
                    self._changed.wait(wait_s)


def _stopped_past(solves: list[tuple[int, _Solve]]) -> tuple[float, list[int]]:
    """Stop each of ``solves`` (by key) whose deadline has passed; how long until the next reading,
    and the keys whose clock or stop raised (logged: the caller stops watching them)."""
    wait_s, failed = POLL_S, []
    for key, (solver, deadline, wall) in solves:
        try:
            left_s = deadline - wall()
            if left_s <= 0:
                solver.stop_search()
        except Exception:  # one solve's clock or stop must not end the others' watch
            _log.exception("watching a CP-SAT search's hard deadline failed; it ends on its own limits")
            failed.append(key)
            continue
        if left_s > 0:
            wait_s = min(wait_s, left_s)
    return wait_s, failed


_WATCH = _Watch()


@contextmanager
def cut_at_deadline(solver: cp_model.CpSolver) -> Iterator[None]:
    """Run the block (``solver``'s solve) with its search stopped once this context's hard deadline
    has passed (``giveup.deadline_and_clock``); unwatched where there is none."""
    watched = giveup.deadline_and_clock()
    if watched is None:
        yield
        return
    with _WATCH.watching(solver, *watched):
        yield
