"""The sidecar's counters for Prometheus: ``GET /metrics`` on its health port (push mode).

Why. The service's metrics see plans, not workers: a sidecar that keeps failing items, losing
leases or waiting on its engine shows only as a flat queue depth there. Its own counters
(``SessionStats``) were printed once, on exit. Here they are read at every scrape by a collector,
so the loop keeps no second set of books, and each series carries the worker id; with them the
engine's seconds per item (``service.sidecar.timings``), the one sign of an engine gone slow.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from service.sidecar.runner import Sidecar
from service.sidecar.session import SessionStats

_HELP = {  # what each SessionStats counter counts, as its HELP line
    "claimed": "Leases taken from the own queue or the shared FIFO",
    "stolen": "Leases taken from another worker's queue",
    "accepted": "Completions accepted",
    "duplicate": "Completions answered as a repeat of an accepted one",
    "stale": "Completions or failure reports refused because the lease was gone",
    "failed": "Items reported failed and requeued or dead-lettered (the engine refused or kept failing them)",
    "released": "Leases handed back unstarted or unfinished",
    "lost": "Leases a heartbeat found gone (the work was stopped)",
    "reaped": "Lapsed leases this worker's reaps requeued or dead-lettered",
    "cancelled": (
        "Leases stopped, or completions or failure reports refused, as the trainer cancelled the schedule"
    ),
}


class _SidecarCollector(Collector):
    """Reads the runner's counters and state at scrape time."""

    def __init__(self, runner: Sidecar, worker_id: str) -> None:
        self.runner = runner
        self.worker_id = worker_id

    def collect(self) -> Iterator[Metric]:
        """One counter per ``SessionStats`` field, then what the sidecar holds and its engine state."""
        stats, holdings = self.runner.session.stats, self.runner.session.holdings
        for field in dataclasses.fields(SessionStats):
            family = CounterMetricFamily(
                f"rollout_sidecar_{field.name}", _HELP[field.name], labels=["worker_id"]
            )
            family.add_metric([self.worker_id], getattr(stats, field.name))
            yield family
        gauges = {
            "held": ("Items running on the engine now", holdings.in_flight()),
            "waiting": (
                "Leases claimed but not started yet (waiting for the KV cache to fit them)",
                len(holdings) - holdings.in_flight(),
            ),
            "engine_up": ("1 while the engine answered its last call", float(self.runner.engine_up)),
            "loop_silent_seconds": (
                "Seconds since the main loop last turned",
                time.monotonic() - self.runner.last_turn,
            ),
        }
        for name, (doc, value) in gauges.items():
            gauge = GaugeMetricFamily(f"rollout_sidecar_{name}", doc, labels=["worker_id"])
            gauge.add_metric([self.worker_id], value)
            yield gauge
        generation = HistogramMetricFamily(
            "rollout_sidecar_generation_seconds",
            "Engine seconds per item run to completion (request sent to reply received)",
            labels=["worker_id"],
        )
        buckets, total = self.runner.generation.snapshot()
        generation.add_metric([self.worker_id], buckets, total)
        yield generation


def exposition(runner: Sidecar, worker_id: str) -> bytes:
    """The Prometheus text exposition of one sidecar (a fresh registry: nothing global)."""
    registry = CollectorRegistry()
    registry.register(_SidecarCollector(runner, worker_id))
    return generate_latest(registry)
