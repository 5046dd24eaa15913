"""``/actuals``: workers (or the trainer) report what finished trajectories really produced.

Each report is stored in the durable actuals stream (the predictor's training data) and folded into
the reporting worker's learned decode speed. A batch is validated whole before anything is written,
so a rejected batch stores nothing. A report the stream already holds (a retried batch) is neither
stored nor learned from again: only the reports this request stored teach speed.
"""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request

from service.api.schemas import ActualsAccepted, ActualsRequest
from service.auth import AuthFirstRoute, any_client
from service.context import context_of
from service.problems import documented

router = APIRouter(tags=["actuals"], route_class=AuthFirstRoute)


@router.post(
    "/actuals", dependencies=[Depends(any_client)], responses=documented(400, 401, 403, 413, 422, 503)
)
def report_actuals(body: ActualsRequest, request: Request) -> ActualsAccepted:
    """Append the reports new to the actuals stream, then update each reporting worker's speed."""
    ctx = context_of(request)
    appended = ctx.actuals.append(body.actuals)
    ctx.models.sync()  # fold them into this replica's history now, not on the next /schedule
    scales = ctx.speeds.observe(appended.stored)  # a repeat taught its speed when first stored
    ctx.metrics.actuals.inc(len(appended.stored))
    return ActualsAccepted(
        accepted=len(appended.stored),
        repeated=appended.repeated,
        stream_length=appended.length,
        time_scales=scales,
    )
