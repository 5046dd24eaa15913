"""A registration whose clock or ``stop_search`` raises does not end the shared watch: the other
solves under way are still stopped at their deadlines (``scheduler/policies/sat_watch.py``).

Fake clocks and fake stops only: each waits on an event the watch sets, never on elapsed time."""

from __future__ import annotations

import threading
from contextlib import ExitStack

import pytest
from ortools.sat.python import cp_model

from scheduler.policies import sat_watch

WAIT_S = 30.0  # the longest a test waits for the watch's reading (it reads every ``POLL_S``)


class _Stopped(cp_model.CpSolver):
    """A solver that records its stop (``raises``: whose stop raises instead)."""

    def __init__(self, raises: bool = False) -> None:
        super().__init__()
        self.stopped = threading.Event()
        self.raises = raises

    def stop_search(self) -> None:
        self.stopped.set()
        if self.raises:
            raise RuntimeError("stop_search failed")


class _Clock:
    """A clock before its deadline (0.0) until ``passed`` is set; with ``raises``, every reading off
    the registering thread raises (and sets ``raised``)."""

    def __init__(self, raises: bool = False) -> None:
        self.passed = threading.Event()
        self.raised = threading.Event()
        self.raises = raises
        self.owner = threading.get_ident()

    def __call__(self) -> float:
        if self.raises and threading.get_ident() != self.owner:
            self.raised.set()
            raise RuntimeError("clock failed")
        return 2.0 if self.passed.is_set() else 0.0


def _broken(kind: str) -> tuple[_Stopped, _Clock, threading.Event]:
    """A registration that raises at the watch's first reading of it: its clock, or its stop (its
    clock past its deadline at once); and the event set once it has raised."""
    if kind == "clock":
        wall = _Clock(raises=True)
        return _Stopped(), wall, wall.raised
    solver, wall = _Stopped(raises=True), _Clock()
    wall.passed.set()
    return solver, wall, solver.stopped


@pytest.mark.parametrize("kind", ["clock", "stop"])
def test_a_registration_that_raises_leaves_the_others_watched(kind: str) -> None:
    """A solve under way, its deadline not yet passed; another registers whose clock (or stop)
    raises at the watch's reading. The first one's deadline then passes: it is still stopped
    (main: the raise ended the shared thread, and nothing stopped it until a new registration)."""
    watch = sat_watch._WATCH  # the shared one: a watch of its own would leave a second "cpsat-watch"
    solver, wall = _Stopped(), _Clock()
    bad_solver, bad_wall, raised = _broken(kind)
    with ExitStack() as held:
        held.enter_context(watch.watching(solver, 1.0, wall))
        held.enter_context(watch.watching(bad_solver, 1.0, bad_wall))
        assert raised.wait(WAIT_S)
        wall.passed.set()
        assert solver.stopped.wait(WAIT_S)


def test_the_watch_stops_solves_registered_after_one_raised() -> None:
    """The thread that read the raising registration is the one that stops the next solve: it went
    on reading, no new thread was needed (and the raising one is no longer read)."""
    watch = sat_watch._WATCH  # the shared one: a watch of its own would leave a second "cpsat-watch"
    bad_solver, bad_wall, raised = _broken("clock")
    with watch.watching(bad_solver, 1.0, bad_wall):
        assert raised.wait(WAIT_S)
        first = watch._thread
        solver, wall = _Stopped(), _Clock()
        wall.passed.set()
        with watch.watching(solver, 1.0, wall):
            assert solver.stopped.wait(WAIT_S)
    assert watch._thread is first
    assert not bad_solver.stopped.is_set()
