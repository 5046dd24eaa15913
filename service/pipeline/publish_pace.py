"""How long this replica's publishes take per trajectory, so that a caller's deadline reserves what a
publish of its size needs (``service/pipeline/deadline.py``).

No flat reserve fits every step: a 4,096 x 32 publish takes 130-320 ms on a loaded host, a
32-trajectory one ~35 ms, so a flat 0.25 s answered 8 of 40 large steps after their deadline and
refused every small one under a 250 ms deadline (docs/experiments.md, review46a). A
publish costs about a fixed part (a few Redis round trips) plus a part per trajectory (its items, their
JSON, the pipelined writes), and how fast each goes depends on the host and its Redis: so each replica
measures its own, in two parts:

- the publish itself: what must be left when it starts (``Reserve.publish_s``);
- the handover before it, from the plan's due time (or its end, when it ends early) to the publish's
  start: the planner's overrun and the answer's building. The plan's budget is capped to leave both
  (``Reserve.cap_s``): capped to leave the publish's part alone, a plan that used its whole budget
  reached its publish with less than that part left and was refused every time (reserve46's first run).

The pace of a part is its seconds over the request's trajectories, counted as at least
``FLOOR_TRAJECTORIES``, so that the fixed part of a small publish is not read as a per-trajectory cost
that would inflate the next large one's reserve (a 32-trajectory publish in 5 ms is not 0.16 ms per
trajectory). A request is reserved the second slowest pace among the last ``REMEMBERED`` (a slow spell
on a busy host is what the next may meet too, but one stall alone is no pace: a 1,024-trajectory
publish held 444 ms on a host at load 16 reserved 2.7 s for every 4,096-trajectory step after it,
which published in 72-137 ms), times ``HEADROOM``, times its trajectories (at least the floor), plus
``FIXED_S`` for what follows the publish check and is not measured here.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

# publishes remembered: enough that one fast publish does not forget a slow spell, few enough that a
# host that got faster (or a Redis that recovered) stops reserving for the slow spell within a few steps
REMEMBERED = 8
# the slowest remembered paces passed over: a stall of one publish (a descheduled thread, a full
# collection elsewhere) is not what a step of another size meets, a second slow one is a spell
STALLS_IGNORED = 1
# a request of fewer trajectories is paced as this many: below it the fixed part dominates
FLOOR_TRAJECTORIES = 256
# before the first publish: the slowest measured on a loaded 2-core host (review46a: 320 ms for 4,096)
PRIOR_PUBLISH_S_PER_TRAJECTORY = 0.08e-3
# before the first handover: a planner's overrun and the answer, ~40 ms at 4,096 on a loaded host
PRIOR_HANDOVER_S_PER_TRAJECTORY = 0.01e-3
# the next publish may be slower than the slowest remembered (review46a: 130-320 ms for one size)
HEADROOM = 1.5
# what follows the last check and no publish measures: the answer's encoding, the response's write
FIXED_S = 0.02


class Pace:
    """The recent pace of one part (thread-safe: plans publish from several threads)."""

    def __init__(self, prior_s_per_trajectory: float) -> None:
        self._prior = prior_s_per_trajectory
        self._paces: deque[float] = deque(maxlen=REMEMBERED)
        self._lock = threading.Lock()

    def record(self, seconds: float, trajectories: int) -> None:
        """Remember that the part took ``seconds`` for a request of ``trajectories``."""
        with self._lock:
            self._paces.append(max(0.0, seconds) / max(trajectories, FLOOR_TRAJECTORIES))

    def paces(self) -> tuple[float, ...]:
        """The remembered paces (seconds per trajectory), oldest first."""
        with self._lock:
            return tuple(self._paces)

    def s_per_trajectory(self) -> float:
        """The slowest remembered pace but ``STALLS_IGNORED`` (the one pace remembered, while it is the
        only one), the prior before any."""
        slowest = sorted(self.paces(), reverse=True)
        if not slowest:
            return self._prior
        return slowest[min(STALLS_IGNORED, len(slowest) - 1)]

    def need_s(self, trajectories: int) -> float:
        """Seconds the part may take for ``trajectories``, ``HEADROOM`` included."""
        return HEADROOM * self.s_per_trajectory() * max(trajectories, FLOOR_TRAJECTORIES)


@dataclass
class PublishPace:
    """This replica's recent publishes: the handover before each, and the publish itself."""

    handover: Pace = field(default_factory=lambda: Pace(PRIOR_HANDOVER_S_PER_TRAJECTORY))
    publish: Pace = field(default_factory=lambda: Pace(PRIOR_PUBLISH_S_PER_TRAJECTORY))

    def reserve(self, trajectories: int, clock: Callable[[], float] = time.perf_counter) -> Reserve:
        """What a request of ``trajectories`` keeps before its deadline, and its timing of both parts
        (on ``clock``, ``time.perf_counter`` but in tests)."""
        return Reserve(self, trajectories, clock)


@dataclass
class Reserve:
    """One request's reserve: ``cap_s`` left by its plan's budget, ``publish_s`` required at its
    publish; ``planning`` and ``publishing`` time the parts for the requests after it."""

    pace: PublishPace
    trajectories: int
    clock: Callable[[], float]
    _due: float = 0.0  # when the plan's budget ends (``planning``)
    _planned: float = 0.0  # when the plan ended

    @property
    def publish_s(self) -> float:
        """Seconds that must be left when the publish starts: the publish and what follows it."""
        return FIXED_S + self.pace.publish.need_s(self.trajectories)

    @property
    def cap_s(self) -> float:
        """Seconds the plan's budget leaves before the deadline: the handover, then ``publish_s``."""
        return self.pace.handover.need_s(self.trajectories) + self.publish_s

    @contextmanager
    def planning(self, budget_s: float) -> Iterator[None]:
        """Time the plans, given ``budget_s``: the handover counts from the earlier of its end and its
        due time (the planner's overrun is the handover's, not the plan's)."""
        self._due = self.clock() + budget_s
        yield
        self._planned = self.clock()

    @contextmanager
    def publishing(self) -> Iterator[None]:
        """Time the publish, and the handover up to it; recorded only for a publish that returned (one
        refused or failed part-way says nothing of a whole one's pace)."""
        started = self.clock()
        yield
        self.pace.publish.record(self.clock() - started, self.trajectories)
        self.pace.handover.record(started - min(self._due, self._planned), self.trajectories)
