"""How long the engine took per item, as a Prometheus histogram the sidecar's ``/metrics`` serves.

Why. A worker's counters say how many items it ran, not how long each took: an engine that slowed
down (a thermal throttle, a neighbour on the node, a longer-than-planned length distribution) shows
only as a step that ends late. Generation times of RL rollouts are heavy-tailed, from under a second
to many minutes for a long chain of thought, so the buckets run from 0.5 s to an hour.
"""

from __future__ import annotations

import bisect
import threading
from dataclasses import dataclass, field

# seconds: short answers take under a second, long chains of thought (32k tokens at tens of
# tokens/s under load) many minutes
GENERATION_BUCKETS = (0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1200.0, 1800.0, 3600.0)


@dataclass
class Durations:
    """A histogram's counts, written by the sidecar's event loop and read by the health server's
    thread at scrape time (hence the lock: a scrape must never see a count without its bucket)."""

    bounds: tuple[float, ...] = GENERATION_BUCKETS
    _counts: list[int] = field(init=False)  # per bucket, not cumulative; the last is +Inf
    _sum: float = field(default=0.0, init=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False)

    def __post_init__(self) -> None:
        self._counts = [0] * (len(self.bounds) + 1)

    def observe(self, seconds: float) -> None:
        """Count one duration in the first bucket whose bound is at least ``seconds``."""
        with self._lock:
            self._counts[bisect.bisect_left(self.bounds, seconds)] += 1
            self._sum += seconds

    def snapshot(self) -> tuple[list[tuple[str, float]], float]:
        """Cumulative ``(le, count)`` pairs, ``+Inf`` last, and the sum: what Prometheus reads."""
        with self._lock:
            counts, total = list(self._counts), self._sum
        bounds = [*(str(bound) for bound in self.bounds), "+Inf"]
        cumulative, running = [], 0
        for bound, count in zip(bounds, counts, strict=True):
            running += count
            cumulative.append((bound, float(running)))
        return cumulative, total
