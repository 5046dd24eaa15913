"""Prometheus metrics: request counts and latencies, stage timings, plan quality, queue depths,
leases the reaper took back, and the predictor version serving.

Each app gets its own registry (no process-global state), so two apps in one test process do not
collide. Queue depths are read from Redis at scrape time by a collector, so they are true at the
moment Prometheus asks and cost nothing between scrapes; the serving model version is likewise read
when scraped, so the one series it exposes is the version serving now.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from service.delivery.outcomes import ReapReport

_log = logging.getLogger("service.metrics")

# from 1 ms: validate, baseline and predict take ~1-4 ms at 1,024 x 16 (docs/benchmarks.md), and a
# first bucket of 5 ms held them all; up to a minute: long-polls wait up to 30 s, and a plan may
# queue for ROLLOUT_PLAN_QUEUE_TIMEOUT_S (30)
LATENCY_BUCKETS = (
    *(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.25, 0.5),
    *(1.0, 2.5, 5.0, 10.0, 30.0, 60.0),
)
DEPTH_CACHE_S = 2.0  # queue depths are read from Redis at most this often, however often scraped
RATIO_BUCKETS = (1.0, 1.01, 1.02, 1.05, 1.1, 1.2, 1.5, 2.0, 3.0, 5.0)

REAP_OUTCOMES = ("requeued", "dead_lettered")  # the reaped-leases counter's only label values
RETRAIN_OUTCOMES = ("ok", "busy", "insufficient_data", "error", "stopped")  # the retrains counter's
LOAD_FAILURES = ("version", "listing")  # the failed model loads counter's: a version, the store's listing
PUBLISHED = ("true", "false")  # the planned-trajectories counter's
QUEUE_STATES = ("queued", "running", "done", "failed")  # the queue-depth gauge's (``Delivery.totals``)

# A function returning queue depths by (schedule_id, state) -> count; raises when Redis is down.
DepthSource = Callable[[], Mapping[tuple[str, str], int]]
# A function returning the serving predictor's version (``v<N>`` or ``fallback``).
VersionSource = Callable[[], str]


class _DepthCollector(Collector):
    """Reads the queue depths of recent schedules when scraped, at most every ``DEPTH_CACHE_S``, and
    exposes them summed by state: ``rollout_queue_depth{state}`` and ``rollout_queue_schedules``.

    /metrics needs no token (scrapers), so a flood of scrapes must not become a flood of Redis
    reads: within the window a scrape answers from the last reading.

    No ``schedule_id`` label: each step is a new schedule, so a label per schedule minted four new
    series a step and dropped them when it finished, thousands a day of series each scraped for
    minutes (Prometheus's head and index grow with every series ever seen, not with those live). The
    four states are four series for good, 0 while nothing is active; one schedule's own counts are
    ``GET /schedule/{id}``'s."""

    def __init__(self, source: DepthSource) -> None:
        self._source = source
        self._read_at = -DEPTH_CACHE_S
        self._depths: Mapping[tuple[str, str], int] | None = {}
        self._lock = threading.Lock()

    def collect(self) -> Iterable[GaugeMetricFamily]:
        """The depths by state and how many schedules they sum over, read from Redis at most every
        ``DEPTH_CACHE_S`` however often scraped; no series while Redis is down."""
        depth = GaugeMetricFamily(
            "rollout_queue_depth",
            "Trajectories by state (queued, running, done, failed), summed over the newest unfinished"
            " schedules",
            labels=["state"],
        )
        schedules = GaugeMetricFamily(
            "rollout_queue_schedules", "Unfinished schedules the queue depths sum over (at most 32)"
        )
        depths = self._read()
        if depths is not None:  # Redis down: no series, rather than zeros that read as an idle fleet
            totals = dict.fromkeys(QUEUE_STATES, 0)
            for (_, state), count in depths.items():
                totals[state] = totals.get(state, 0) + count
            for state, count in totals.items():
                depth.add_metric([state], count)
            schedules.add_metric([], len({schedule_id for schedule_id, _ in depths}))
        yield depth
        yield schedules

    def _read(self) -> Mapping[tuple[str, str], int] | None:
        with self._lock:
            if time.monotonic() - self._read_at < DEPTH_CACHE_S:
                return self._depths
            try:
                self._depths = self._source()
            except Exception as error:  # a scrape must not fail because Redis is down
                _log.warning("queue depths unavailable: %s", error)
                self._depths = None
            self._read_at = time.monotonic()
            return self._depths


class _ModelInfoCollector(Collector):
    """``rollout_model_info{version} 1`` for the version serving when scraped: always one series, so
    a hot reload or a retrain replaces the label instead of leaving the old version's series behind
    (the label's values over time are unbounded; at any moment there is exactly one)."""

    def __init__(self, source: VersionSource) -> None:
        self._source = source

    def collect(self) -> Iterable[GaugeMetricFamily]:
        """The one series of the version serving now (none when it cannot be read: logged)."""
        family = GaugeMetricFamily(
            "rollout_model_info", "The length predictor serving now (v<N> or fallback)", labels=["version"]
        )
        try:
            family.add_metric([self._source()], 1)
        except Exception as error:  # a scrape must not fail because the model store is unreadable
            _log.warning("serving model version unavailable: %s", error)
        yield family


class LastValue(Collector):
    """A gauge with no series until its first ``set``: the value of the last event on this replica.

    A ``Gauge`` reads 0 from the start, and 0 is a value: a replica that has planned nothing yet (a
    fresh pod, or one of several that the trainers' requests did not reach) said its last plan was 0x
    as fast as round robin, which a ``min`` over replicas or an alert on a low speed-up took for a bad
    plan."""

    def __init__(self, name: str, documentation: str) -> None:
        self._name = name
        self._documentation = documentation
        self._value: float | None = None

    def set(self, value: float) -> None:
        """Record the latest value (a float store: atomic under the GIL, as a scrape reads it)."""
        self._value = value

    def collect(self) -> Iterable[GaugeMetricFamily]:
        """The family, with its one series once a value was set."""
        family = GaugeMetricFamily(self._name, self._documentation)
        if self._value is not None:
            family.add_metric([], self._value)
        yield family


@dataclass
class Metrics:
    """The service's instruments, all on one private registry."""

    registry: CollectorRegistry = field(default_factory=CollectorRegistry)

    def __post_init__(self) -> None:
        reg = self.registry
        self.requests = Counter(
            "rollout_http_requests", "HTTP requests", ["route", "method", "status"], registry=reg
        )
        self.latency = Histogram(
            "rollout_http_request_seconds",
            "HTTP request latency",
            ["route"],
            buckets=LATENCY_BUCKETS,
            registry=reg,
        )
        self.stage = Histogram(
            "rollout_schedule_stage_seconds",
            "Time per /schedule stage (queue for a plan slot, validate, predict, plan, baseline, publish)",
            ["stage"],
            buckets=LATENCY_BUCKETS,
            registry=reg,
        )
        self.quality = Histogram(
            "rollout_plan_quality_ratio",
            "Predicted makespan over the physical lower bound (1.0 is optimal)",
            ["policy"],
            buckets=RATIO_BUCKETS,
            registry=reg,
        )
        self.speedup = LastValue(
            "rollout_plan_speedup_vs_round_robin", "This replica's last plan's predicted speed-up"
        )
        reg.register(self.speedup)
        self.trajectories = Counter(
            "rollout_scheduled_trajectories", "Trajectories planned", ["published"], registry=reg
        )
        self.actuals = Counter("rollout_actuals", "Actual lengths reported", registry=reg)
        self.actuals_skipped = Counter(
            "rollout_actuals_skipped",
            "Actuals stream entries a read skipped: not a report the history can hold (another writer's)",
            registry=reg,
        )
        self.retrains = Counter("rollout_retrains", "Predictor retrains", ["outcome"], registry=reg)
        # a version that does not load was only logged, once (``ModelService``): an alert needs a series
        self.model_load_failures = Counter(
            "rollout_model_load_failures",
            "Model store loads that failed: a version that did not load, or a store not listed (each try)",
            ["what"],
            registry=reg,
        )
        self.reaped = Counter(
            "rollout_reaped_leases",
            "Lapsed leases (a worker stopped heartbeating) this replica's reaper took back, by outcome",
            ["outcome"],
            registry=reg,
        )
        # Every series of a fixed label set exists from the start, at 0: one born at its first count
        # reads 1 at its first sample, so increase() and rate() see no rise, and an alert on the first
        # failed retrain of a replica's life (or on its first reap) never fired.
        for counter, values in (
            (self.reaped, REAP_OUTCOMES),
            (self.retrains, RETRAIN_OUTCOMES),
            (self.model_load_failures, LOAD_FAILURES),
            (self.trajectories, PUBLISHED),
        ):
            for value in values:
                counter.labels(value)

    def count_reaped(self, report: ReapReport) -> None:
        """Count one reaper pass's work on one schedule: leases requeued, and items dead-lettered
        because the lapsed lease was their last attempt."""
        self.reaped.labels("requeued").inc(report.requeued)
        self.reaped.labels("dead_lettered").inc(report.dead_lettered)

    def count_load_failure(self, listing: bool) -> None:
        """Count one failed try at the model store: the store not listed (``listing``) or a version
        that did not load (damaged, foreign); the model held keeps serving either way."""
        self.model_load_failures.labels("listing" if listing else "version").inc()

    def watch_model(self, source: VersionSource) -> None:
        """Expose ``rollout_model_info{version}`` from ``source`` at every scrape."""
        self.registry.register(_ModelInfoCollector(source))

    def watch_queues(self, source: DepthSource) -> None:
        """Expose ``rollout_queue_depth`` from ``source`` at every scrape."""
        self.registry.register(_DepthCollector(source))

    def render(self) -> bytes:
        """The text exposition format."""
        return generate_latest(self.registry)
