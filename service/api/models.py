"""``/models``: which predictor version serves, and retraining it from the actuals on demand."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request

from service.api.learning_schemas import ModelStatus, RetrainResponse
from service.auth.scopes import AuthFirstRoute, any_client, trainer_only
from service.context import context_of
from service.problems.table import documented

router = APIRouter(tags=["models"], route_class=AuthFirstRoute)


@router.get("/models", dependencies=[Depends(any_client)], responses=documented(401, 403, 503))
def model_status(request: Request) -> ModelStatus:
    """The serving version, the stored versions and the history the predictor reads; 503 naming the
    store where it cannot be listed (the model held keeps serving)."""
    ctx = context_of(request)
    ctx.models.refresh()
    return ModelStatus(
        version=ctx.models.version,
        stored_versions=[f"v{v}" for v in ctx.models.stored_versions()],
        history_rows=ctx.models.rows,
        retraining=ctx.retrainer.running_anywhere(),
        retrain_every_steps=ctx.settings.retrain_every_steps,
        synthetic=ctx.models.synthetic,
    )


@router.post(
    "/models/retrain", dependencies=[Depends(trainer_only)], responses=documented(401, 403, 409, 503)
)
def retrain(request: Request) -> RetrainResponse:
    """Fit a new version on the actuals history held, store it and hot-swap it in; 409 if one is
    running, 503 naming the store where it cannot be written (the model held keeps serving)."""
    result = context_of(request).retrainer.retrain_now()
    return RetrainResponse(version=result.version, history_rows=result.history_rows, seconds=result.seconds)
