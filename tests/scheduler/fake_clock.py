"""A stand-in for the ``time`` module whose clock advances one second per reading, so that every
timed step of the code under test appears to take a second and budget checks become deterministic."""

from __future__ import annotations


class SteppingClock:
    """``perf_counter`` advances one second each time it is read."""

    def __init__(self) -> None:
        self.now = 0.0

    def perf_counter(self) -> float:
        self.now += 1.0
        return self.now
