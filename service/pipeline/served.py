"""How a served ``POST /schedule`` is accounted for: each stage's wall time, the metrics and the one
log line a step leaves behind.

Kept apart from ``service/pipeline/stages.py`` so that the pipeline reads as the stages a batch goes
through, not as what is measured about them.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from service.api.schemas import ScheduleResponse, Timings
from service.context import Context

_log = logging.getLogger("service.pipeline")  # the "scheduled" line's: the pipeline's one logger name
STAGES = ("queue", "validate", "predict", "plan", "baseline", "publish")


@dataclass
class StageClock:
    """Milliseconds spent per stage (a stage entered twice adds up)."""

    spent: dict[str, float] = field(default_factory=dict)

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        """Time the ``with`` block as stage ``name``, also when it raises (its time is still spent)."""
        start = time.perf_counter()
        try:
            yield
        finally:
            self.spent[name] = self.spent.get(name, 0.0) + (time.perf_counter() - start) * 1000.0


def timings(spent: dict[str, float], total_ms: float) -> Timings:
    """Each stage's milliseconds as spent by this request (zero for a stage it did not enter)."""
    return Timings(**{f"{stage}_ms": spent.get(stage, 0.0) for stage in STAGES}, total_ms=total_ms)


def record(ctx: Context, response: ScheduleResponse, count: int) -> None:
    """Metrics and one log line per schedule, with each stage's milliseconds."""
    m = ctx.metrics
    # queue: the wait for a plan slot (ROLLOUT_MAX_CONCURRENT_PLANS), the first sign of too few replicas
    for stage in STAGES:
        m.stage.labels(stage).observe(getattr(response.timings, f"{stage}_ms") / 1000.0)
    if response.lower_bound_s > 0:
        m.quality.labels(response.policy).observe(response.predicted_makespan_s / response.lower_bound_s)
    m.speedup.set(response.speedup_vs_round_robin)
    m.trajectories.labels(str(response.published).lower()).inc(count)
    _log.info(
        "scheduled",
        extra={
            "trajectories": count,
            "policy": response.policy,
            "status": response.status,
            "predicted_makespan_s": round(response.predicted_makespan_s, 3),
            "lower_bound_s": round(response.lower_bound_s, 3),
            "round_robin_makespan_s": round(response.round_robin_makespan_s, 3),
            # every stage's wall time (queue_ms .. publish_ms, total_ms): a slow step is read from its
            # own line, not from a histogram that mixes it with every other step
            **{key: round(ms, 1) for key, ms in response.timings.model_dump().items()},
        },
    )
