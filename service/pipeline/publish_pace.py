"""How long this replica's publishes take per trajectory, so that a caller's deadline reserves what a
publish of its size needs (``service/pipeline/deadline.py``).

A flat reserve (0.25 s until round 46) was wrong at both ends (review46a, docs/experiments.md): a
4,096 x 32 publish took 130-320 ms on a loaded host, so 8 of 40 such requests were answered after
their deadline, and any deadline under 250 ms refused a 32-trajectory step answered in ~35 ms. A
publish costs about a fixed part (a few Redis round trips) plus a part per trajectory (its items, their
JSON, the pipelined writes), and how fast each goes depends on the host and its Redis: so each replica
measures its own. The pace of a publish is its seconds over its trajectories, counted as at least
``FLOOR_TRAJECTORIES``, so that the fixed part of a small publish is not read as a per-trajectory cost
that would inflate the next large one's reserve (a 32-trajectory publish in 5 ms is not 0.16 ms per
trajectory); a request is reserved the slowest pace among the last ``REMEMBERED`` publishes (one slow
publish on a busy host is what the next may meet too), times ``HEADROOM``, times its trajectories (at
least the floor), plus ``FIXED_S`` for what follows the publish check and is not measured here.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager

# publishes remembered: enough that one fast publish does not forget a slow spell, few enough that a
# host that got faster (or a Redis that recovered) stops reserving for the slow spell within a few steps
REMEMBERED = 8
# a publish of fewer trajectories is paced as this many: below it the fixed part dominates
FLOOR_TRAJECTORIES = 256
# before the first publish: the slowest measured on a loaded 2-core host (review46a: 320 ms for 4,096)
PRIOR_S_PER_TRAJECTORY = 0.08e-3
# the next publish may be slower than the slowest remembered (review46a: 130-320 ms for one size)
HEADROOM = 1.5
# what follows the last check and no publish measures: the answer's encoding, the response's write
FIXED_S = 0.02


class PublishPace:
    """The recent pace of this replica's publishes (thread-safe: plans publish from several threads)."""

    def __init__(self, history: tuple[tuple[float, int], ...] = ()) -> None:
        self._paces: deque[float] = deque(maxlen=REMEMBERED)
        self._lock = threading.Lock()
        for seconds, trajectories in history:
            self.record(seconds, trajectories)

    def record(self, seconds: float, trajectories: int) -> None:
        """Remember that a publish of ``trajectories`` took ``seconds``."""
        with self._lock:
            self._paces.append(max(0.0, seconds) / max(trajectories, FLOOR_TRAJECTORIES))

    def paces(self) -> tuple[float, ...]:
        """The remembered paces (seconds per trajectory), oldest first."""
        with self._lock:
            return tuple(self._paces)

    def s_per_trajectory(self) -> float:
        """The slowest remembered pace, the prior before any publish."""
        with self._lock:
            return max(self._paces, default=PRIOR_S_PER_TRAJECTORY)

    def reserve_s(self, trajectories: int) -> float:
        """Seconds to keep before a deadline for the publish of ``trajectories`` and what follows it:
        what the plan's budget leaves, and what must be left when the publish starts."""
        paced = self.s_per_trajectory() * max(trajectories, FLOOR_TRAJECTORIES)
        return FIXED_S + HEADROOM * paced

    @contextmanager
    def timed(self, trajectories: int) -> Iterator[None]:
        """Record the time the block takes as a publish of ``trajectories`` (not if it raised: a
        publish refused or failed part-way says nothing of a whole one's pace)."""
        started = time.perf_counter()
        yield
        self.record(time.perf_counter() - started, trajectories)
