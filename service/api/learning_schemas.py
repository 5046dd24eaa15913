"""Bodies of the learning loop: the actuals a step reports (``POST /actuals``) and the predictor they
train (``GET /models``, ``POST /models/retrain``), documented field by field in docs/api.md.

The step's own bodies, and the rules every request body shares (strict fields, bounded ids, counts
and features), are ``service.api.schemas``; what the API answers about a published step is
``service.api.progress_schemas``.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, BeforeValidator, Field, ValidationInfo, field_validator

from scheduler.trace import actual_finish, output_length
from service.api.schemas import (
    MAX_COUNT,
    Count,
    Name,
    ReportFeatures,
    ScheduleId,
    Strict,
    Tokens,
    Whole,
    few_feature_names,
)


def _an_actual_finish(finish: object) -> object:
    """A finish reason of text refused in the trace format's words where it says no length
    (``scheduler.trace.actual_finish``: an engine's ``abort``); any other value is ``Literal``'s to judge."""
    return actual_finish(finish) if isinstance(finish, str) else finish


class ActualReport(Strict):
    """One finished trajectory as it really ran, reported by its worker."""

    step: Count
    prompt_id: Name
    sample_idx: Count
    worker_id: Name
    prompt_tokens: Tokens
    # before output_tokens, which is held to a length's least only where this says a length (``_a_length``)
    finish_reason: Annotated[Literal["stop", "length"], BeforeValidator(_an_actual_finish)]
    output_tokens: Whole = Field(le=MAX_COUNT)  # at least the token it ended on (``_a_length``)
    wall_time_s: float | None = Field(default=None, gt=0)  # admission to last token on the engine;
    # None: not measured (history imported from a trace), so the report teaches length, not speed
    reward: float | None = None
    max_new_tokens: Tokens | None = None
    concurrency: float | None = Field(default=None, ge=1)  # mean sequences running meanwhile; teaches speed
    schedule_id: ScheduleId | None = None  # the schedule that ran it: its planned profiles teach speed
    features: ReportFeatures = Field(default_factory=dict)

    @field_validator("output_tokens")
    @classmethod
    def _a_length(cls, output_tokens: int, info: ValidationInfo) -> int:
        """At least the token it ended on (``scheduler.trace.output_length``), in the words every
        entry refuses a 0 by. Not judged where the finish reason was refused (an abort): an aborted
        generation's count is no length at all, and a 422 naming both sent the user after the count
        of a report that is no actual (trace55)."""
        if "finish_reason" not in info.data:
            return output_tokens
        return output_length(output_tokens, info.data["finish_reason"])

    @field_validator("max_new_tokens")
    @classmethod
    def _within_cap(cls, cap: int | None, info: ValidationInfo) -> int | None:
        """An engine never generates past its cap: such a row is misreported, and it would teach the
        predictor lengths no sample can have. A field validator (``output_tokens`` is checked before
        it), so the 422 names the report's field and value rather than the whole report; its words name
        the other count alone, as the detail leads with the cap (``max_new_tokens=5: must be >=
        output_tokens=9``; it read ``max_new_tokens=5: output_tokens 9 exceeds max_new_tokens 5``)."""
        output = info.data.get("output_tokens")
        if cap is not None and output is not None and output > cap:
            raise ValueError(f"must be >= output_tokens={output}: an engine never generates past its cap")
        return cap


class ActualsRequest(Strict):
    """``POST /actuals``: a batch of finished trajectories."""

    actuals: list[ActualReport] = Field(min_length=1, max_length=100_000)
    # true: store reports of a step cancelled before it finished too (refused by default, 409: its
    # results are the short trajectories, a survivor-biased length history; service/api/actuals.py)
    partial: bool = False

    @field_validator("actuals")
    @classmethod
    def _few_features(cls, actuals: list[ActualReport]) -> list[ActualReport]:
        few_feature_names([report.features for report in actuals], "the reports")
        return actuals


class ActualsAccepted(BaseModel):
    """How many reports were stored, and the learned speed of each worker that reported."""

    accepted: int  # reports stored by this request
    repeated: int = 0  # reports the stream held already (a retry): not stored or learned from again
    stream_length: int
    time_scales: dict[str, float]
    # schedules the batch names whose keys the service no longer holds (retention passed) or never
    # held, so whether their step was cut short could not be checked: their reports were stored
    unchecked_schedules: list[str] = []


class ModelStatus(BaseModel):
    """``GET /models``."""

    version: str  # serving version: "v<N>" or "fallback"
    stored_versions: list[str]
    history_rows: int  # actuals the predictor reads
    retraining: bool  # a retrain runs now in this or another replica (the shared lock is held)
    retrain_every_steps: int  # 0 = only on demand
    synthetic: bool = False  # the serving version was fitted on a synthetic trace (rows source=synthetic)


class RetrainResponse(BaseModel):
    """``POST /models/retrain``."""

    version: str
    history_rows: int
    seconds: float
