"""Fake solves for the tests of the shared CP-SAT watch (``scheduler/policies/sat_watch.py``): a
solver that records its stop, a clock that passes its deadline only when the test says so, either
one raising on demand, and how long a test waits for the watch's reading.

The raising-registration and failed-reading tests both register these; they share them here rather
than through one test module's private classes, so a change to a fake reaches both.
"""

from __future__ import annotations

import threading

from ortools.sat.python import cp_model

WAIT_S = 30.0  # the longest a test waits for the watch's reading (it reads every ``POLL_S``)


class StopRecorder(cp_model.CpSolver):
    """A solver that records its stop (``raises``: whose stop raises instead)."""

    def __init__(self, raises: bool = False) -> None:
        super().__init__()
        self.stopped = threading.Event()
        self.raises = raises

    def stop_search(self) -> None:
        self.stopped.set()
        if self.raises:
            raise RuntimeError("stop_search failed")


class DeadlineClock:
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
