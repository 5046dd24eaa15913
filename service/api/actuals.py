"""``/actuals``: workers (or the trainer) report what finished trajectories really produced.

Each report is stored in the durable actuals stream (the predictor's training data) and folded into
the reporting worker's learned decode speed. A batch is validated whole before anything is written,
so a rejected batch stores nothing.
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
    """Append the reports to the actuals stream, then update each reporting worker's speed."""
    ctx = context_of(request)
    length = ctx.actuals.append(body.actuals)
    ctx.models.sync()  # fold them into this replica's history now, not on the next /schedule
    scales = ctx.speeds.observe(body.actuals)
    ctx.metrics.actuals.inc(len(body.actuals))
    return ActualsAccepted(accepted=len(body.actuals), stream_length=length, time_scales=scales)
