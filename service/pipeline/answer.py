"""The answer to a planned ``POST /schedule``: the chosen plan's assignments in queue order, its
quality, and the ``round_robin`` baseline beside it, built before the publish, which stores it with
the schedule for a retry of a caller-chosen ``schedule_id`` to replay (``republish``).

Kept apart from ``service/pipeline/stages.py`` (which calls ``respond`` between the plan and the
publish, by its own name: tests wrap ``stages.respond``) so that the pipeline reads as its stages
and this module as what the caller is told.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from scheduler.types import Plan, PlanRequest
from service.api.schemas import AssignedItem, ScheduleRequest, ScheduleResponse
from service.pipeline.served import timings

if TYPE_CHECKING:  # the stages' own types: stages imports this module
    from service.pipeline.stages import Predicted, Validated


def respond(
    schedule_id: str,
    body: ScheduleRequest,
    checked: Validated,
    plan_request: PlanRequest,
    chosen: Plan,
    baseline: Plan,
    predicted: Predicted,
) -> ScheduleResponse:
    """The response body: assignments in queue order, plan quality, the baseline; its timings are
    zero until the caller sets them (``served.timings``), after the publish that stores the rest."""
    by_key = {t.key: t for t in plan_request.trajectories}
    items = {
        key: AssignedItem(
            prompt_id=t.prompt_id, sample_idx=t.sample_idx, predicted_tokens=round(t.predicted_tokens, 1)
        )
        for key, t in by_key.items()
    }
    assignments = {w.worker_id: [items[k] for k in w.items] for w in chosen.workers}
    # Built from our own typed values: constructing skips re-validating thousands of assignments.
    return ScheduleResponse.model_construct(
        schedule_id=schedule_id,
        step=body.step,
        policy=chosen.policy,
        status=chosen.status,
        published=body.publish,
        model_version=predicted.version,
        prediction_sources=predicted.sources,
        quantile=checked.quantile,
        assignments=assignments,
        dispatch_order=list(chosen.dispatch_order),
        predicted_makespan_s=chosen.predicted_makespan_s,
        lower_bound_s=chosen.lower_bound_s,
        round_robin_makespan_s=baseline.predicted_makespan_s,
        speedup_vs_round_robin=_speedup(baseline.predicted_makespan_s, chosen.predicted_makespan_s),
        time_scales={w.worker_id: w.time_scale for w in plan_request.inventory.workers},
        time_scale_sources=checked.time_scale_sources,
        time_budget_ms=round(plan_request.time_budget_s * 1000.0, 1),
        timings=timings({}, 0.0),
        at_once_hedge=chosen.at_once or None,
    )


def _speedup(baseline_s: float, chosen_s: float) -> float:
    """How many times sooner the plan ends than the equal split; 1.0 when there is nothing to end."""
    return baseline_s / chosen_s if chosen_s > 0 else 1.0
