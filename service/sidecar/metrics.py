"""The sidecar's counters for Prometheus: ``GET /metrics`` on its health port (push mode) or on
its pull API (pull mode).

Why. The service's metrics see plans, not workers: a sidecar that keeps failing items, losing
leases or waiting on its engine shows only as a flat queue depth there. Its own counters
(``SessionStats``) were printed once, on exit. Here they are read at every scrape by a collector,
so the loop keeps no second set of books, and each series carries the worker id; with them the
engine's seconds per item (``service.sidecar.timings``), the one sign of an engine gone slow.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from service.sidecar.session import SessionStats, WorkerSession
from service.sidecar.timings import Durations

if TYPE_CHECKING:  # pull mode imports this module and loads no engine client
    from service.sidecar.runner import Sidecar

_HELP = {  # what each SessionStats counter counts, as its HELP line
    "claimed": "Leases taken from the own queue or the shared FIFO",
    "stolen": "Leases taken from another worker's queue",
    "accepted": "Completions accepted",
    "duplicate": "Completions of a lease held here answered as a repeat of an accepted one",
    "stale": "Completions or failure reports of a lease held here refused because the lease was gone",
    "failed": "Items reported failed and requeued or dead-lettered (the engine refused or kept failing them)",
    "released": "Leases handed back unstarted or unfinished",
    "lost": "Leases found gone at a heartbeat (work stopped), or a hand-back or report Redis never answered",
    "reaped": "Lapsed leases this worker's reaps requeued or dead-lettered",
    "reset": "Leases an earlier process of this worker id held, handed back when this one started",
    "cancelled": (
        "Items whose lease was stopped or report refused as the trainer cancelled the schedule (each once)"
    ),
    "inherited": (
        "Completions accepted (counted accepted too) and failures taken (counted failed too) of leases an"
        " earlier process of this worker id handed out: a pull worker that outlived a killed sidecar"
        " reported them to its successor"
    ),
}


Gauges = dict[str, tuple[str, float]]  # name -> (HELP line, value), read at scrape time


class _SidecarCollector(Collector):
    """Reads a worker session's counters, holdings and the mode's own gauges at scrape time."""

    def __init__(
        self, session: WorkerSession, worker_id: str, gauges: Callable[[], Gauges], generation: Durations
    ) -> None:
        self.session = session
        self.worker_id = worker_id
        self.gauges = gauges
        self.generation = generation

    def collect(self) -> Iterator[Metric]:
        """One counter per ``SessionStats`` field, then what the sidecar holds and the mode's state."""
        stats, holdings = self.session.stats, self.session.holdings
        for field in dataclasses.fields(SessionStats):
            family = CounterMetricFamily(
                f"rollout_sidecar_{field.name}", _HELP[field.name], labels=["worker_id"]
            )
            family.add_metric([self.worker_id], getattr(stats, field.name))
            yield family
        gauges: Gauges = {
            "held": (HELD_HELP, len(holdings.handed())),
            "waiting": (
                "Leases claimed but not started yet (waiting for the KV cache to fit them)",
                len(holdings.waiting()),
            ),
            **self.gauges(),
        }
        for name, (doc, value) in gauges.items():
            gauge = GaugeMetricFamily(f"rollout_sidecar_{name}", doc, labels=["worker_id"])
            gauge.add_metric([self.worker_id], value)
            yield gauge
        generation = HistogramMetricFamily(
            "rollout_sidecar_generation_seconds", GENERATION_HELP, labels=["worker_id"]
        )
        buckets, total = self.generation.snapshot()
        generation.add_metric([self.worker_id], buckets, total)
        yield generation


HELD_HELP = "Items running on the engine now (pull mode: handed to the worker by /next, not reported yet)"
GENERATION_HELP = (
    "Engine seconds per item run to completion (request sent to reply received; "
    "pull mode: the wall time its /done reports)"
)


def exposition(runner: Sidecar, worker_id: str) -> bytes:
    """The Prometheus text exposition of one push-mode sidecar (a fresh registry: nothing global)."""

    def gauges() -> Gauges:
        return {
            "engine_up": ("1 while the engine answered its last call", float(runner.engine_up)),
            # what /ready reads: a sidecar that cannot reach Redis (an outage, a network cut of its
            # own) claims nothing and was a log line only, where engine_up answered for the engine
            "redis_up": (
                "1 while the last claim reached Redis and heartbeats go through (0 before the first claim)",
                float(runner.redis_up),
            ),
            "loop_silent_seconds": (
                "Seconds since the main loop last turned",
                time.monotonic() - runner.last_turn,
            ),
        }

    return _render(_SidecarCollector(runner.session, worker_id, gauges, runner.generation))


def pull_exposition(session: WorkerSession, generation: Durations) -> bytes:
    """The same for a pull-mode sidecar (``GET /metrics`` on its pull API): its counters, what it
    holds and the wall times its worker reported, live while it runs (they were printed on exit only)."""
    return _render(_SidecarCollector(session, session.settings.worker_id, dict, generation))


def _render(collector: Collector) -> bytes:
    registry = CollectorRegistry()
    registry.register(collector)
    return generate_latest(registry)
