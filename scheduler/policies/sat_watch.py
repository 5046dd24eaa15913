"""The watch that stops a running CP-SAT search once the caller's hard deadline has passed.

Why. The planner gives up at its caller's hard deadline by checking it between its parts
(``scheduler.giveup``), but a CP-SAT search is one call: it was checked only once it returned, at its
own limits. A deterministic limit is a wall-clock one only on an idle host, and the wall limit is at
most what is left of the plan's budget (up to a minute), so on a starved host, or at a replica's stop
(``service/api/stopping.py``: its clock jumps past every deadline), the plan gave up up to one solve
late, its planning thread and the process's exit held that long.

How. ``cut_at_deadline`` has one shared daemon thread (``cpsat-watch``) read the hard deadline's
clock every ``POLL_S`` while a solve runs, and ask CP-SAT to stop (``CpSolver.stop_search``: under
the solver's own lock, safe from another thread) once it has passed. A stop asked before the search
has begun is lost, so the watch asks again at every poll until the solve has returned. The thread
sleeps while no solve runs, and a solve without a hard deadline is not watched at all: it reads no
clock and stops on its limits only, as before. A cut solve returns what it had (FEASIBLE, or UNKNOWN,
where the callers fall back), and the planner's next check gives the plan up: a search is cut only
past the deadline, so a plan that is returned was never cut, and a replay's plan (``clock.frozen``)
is the same plan.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from ortools.sat.python import cp_model

from scheduler import giveup

POLL_S = 0.005  # between two readings of the deadline's clock while a solve runs


class _Watch:
    """The solves under way with a hard deadline, and the one thread that stops those past it."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._solves: dict[int, tuple[cp_model.CpSolver, Callable[[], bool]]] = {}
        self._keys = itertools.count()
        self._thread: threading.Thread | None = None

    @contextmanager
    def watching(self, solver: cp_model.CpSolver, passed: Callable[[], bool]) -> Iterator[None]:
        """Stop ``solver``'s search, run in the block, once ``passed()``."""
        with self._changed:
            key = next(self._keys)
            self._solves[key] = (solver, passed)
            if self._thread is None or not self._thread.is_alive():  # a forked child has none
                self._thread = threading.Thread(target=self._run, name="cpsat-watch", daemon=True)
                self._thread.start()
            self._changed.notify()
        try:
            yield
        finally:
            with self._changed:
                del self._solves[key]

    def _run(self) -> None:
        while True:
            with self._changed:
                while not self._solves:
                    self._changed.wait()
                solves = list(self._solves.values())
            for solver, passed in solves:
                if passed():
                    solver.stop_search()
            with self._changed:
                self._changed.wait(POLL_S)


_WATCH = _Watch()


@contextmanager
def cut_at_deadline(solver: cp_model.CpSolver) -> Iterator[None]:
    """Run the block (``solver``'s solve) with its search stopped once this context's hard deadline
    has passed (``giveup.passed``); unwatched where there is none."""
    passed = giveup.passed()
    if passed is None:
        yield
        return
    with _WATCH.watching(solver, passed):
        yield
