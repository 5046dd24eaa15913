"""``/actuals``: workers (or the trainer) report what finished trajectories really produced.

Each report is stored in the durable actuals stream (the predictor's training data) and folded into
the reporting worker's learned decode speed. A batch is validated whole before anything is written,
so a rejected batch stores nothing. A worker token bound to worker ids may report only for them: a
batch naming any other worker is refused whole (403 naming the first such ``worker_id``), since it
would teach that worker a speed, and the predictor lengths, its own engine never produced. A report
the stream already holds (a retried batch) is neither stored nor learned from again: only the
reports this request stored teach speed.

A batch naming a step that was cancelled before it finished is refused whole (409 naming the first
report of it as ``actuals[i].schedule_id``), unless it says ``partial``: that step's results are the
trajectories that finished before the cancel, the short ones, and would teach the predictor a length
distribution biased short (found live: one such report moved the mean prediction from 588 to 457
tokens, for several steps). Nothing is lost: the caller holds the batch, and resends it without
that step's reports, or with ``partial`` to keep them knowingly. ``Delivery.check_steps`` reads it
in one round trip before anything is stored. A cancel landing between that read and the append is
not seen, and need not be: the append stores reports fixed before the read, of trajectories that
finished before any cancel, so it leaves what the same batch sent a moment earlier leaves (stored,
then cancelled), and no check can refuse a report for a cancel still to come; every batch read
after the cancel sees it. (One atomic check-and-append could not run on Redis Cluster either: the
stream and each step live in other slots.) A step whose keys are gone (retention passed, or never
published) cannot be checked, a step cut short and a whole one then looking alike: its reports are
stored, as a trainer reporting a late step expects, and the answer names it in
``unchecked_schedules`` (the log line in ``unchecked_schedule_ids``).

The reports stored are folded into this replica's history at once, and, on a background thread
after the answer (``ModelService.warm_later``), into what the next step's predict reads, so the
trainer's next ``/schedule`` on this replica does not fold them on its path.

Each batch logs one ``actuals stored`` line at INFO (counts and milliseconds) under the schedule
its reports name, so the step's lines, from ``scheduled`` to its actuals, are found by one id.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Annotated

from fastapi import APIRouter, Depends, Request

from service.api.learning_schemas import ActualReport, ActualsAccepted, ActualsRequest
from service.auth.scopes import AuthFirstRoute, Caller, any_client
from service.context import Context, context_of
from service.logs import schedule_context
from service.problems.table import ForbiddenError, StepCutShortError, documented

router = APIRouter(tags=["actuals"], route_class=AuthFirstRoute)
_log = logging.getLogger("service.actuals")
LOGGED_SCHEDULES = 16  # a batch spanning more schedules names this many on its line, and counts all
SHOWN_WORKERS = 16  # a refusal names this many of the workers the token is bound to


@router.post(
    "/actuals",
    dependencies=[Depends(any_client)],
    responses=documented(400, 401, 403, 409, 413, 415, 422, 503),
)
def report_actuals(
    body: ActualsRequest, request: Request, caller: Annotated[Caller, Depends(any_client)]
) -> ActualsAccepted:
    """Append the reports new to the actuals stream, then update each reporting worker's speed."""
    started = time.perf_counter()
    _own_workers_only(caller, body.actuals)
    ctx = context_of(request)
    schedules = _schedules(body.actuals)
    unchecked = [] if body.partial else _whole_steps_only(ctx, body.actuals, schedules)
    if len(schedules) == 1:
        request.state.schedule_id = schedules[0]  # the access line's too
    appended = ctx.actuals.append(body.actuals)
    ctx.models.sync_stored()  # fold them into this replica's history now, not on the next /schedule
    if appended.stored:  # and the next step's stats and prior, while the trainer trains
        ctx.models.warm_later(max(report.step for report in appended.stored) + 1)
    scales = ctx.speeds.observe(appended.stored)  # a repeat taught its speed when first stored
    ctx.metrics.actuals.inc(len(appended.stored))
    counts = (len(appended.stored), appended.repeated)
    _log_stored(schedules, counts, unchecked, time.perf_counter() - started)
    return ActualsAccepted(
        accepted=len(appended.stored),
        repeated=appended.repeated,
        stream_length=appended.length,
        time_scales=scales,
        unchecked_schedules=unchecked,
    )


def _own_workers_only(caller: Caller, reports: Sequence[ActualReport]) -> None:
    """Refuse the batch when a report names a worker the caller's token is not bound to (a trainer
    token and an unbound worker token may report for any)."""
    if caller.workers is None:
        return
    for index, report in enumerate(reports):
        if report.worker_id not in caller.workers:
            bound = ", ".join(sorted(caller.workers)[:SHOWN_WORKERS])
            raise ForbiddenError(
                f"actuals[{index}].worker_id={report.worker_id!r}: this worker token is bound to "
                f"{bound} and may not report for another worker; nothing of the batch was stored",
                field=f"actuals[{index}].worker_id",
                value=report.worker_id,
            )


def _whole_steps_only(ctx: Context, reports: Sequence[ActualReport], schedules: Sequence[str]) -> list[str]:
    """Refuse the batch when a schedule it names was cancelled before every trajectory finished:
    learning from the survivors alone would bias the predictor short (module doc). The schedules
    whose keys are gone, whose completeness could not be checked, otherwise."""
    checked = ctx.delivery.check_steps(schedules)
    found = {step.schedule_id: step for step in checked.cut_short}
    if not found:
        return checked.unchecked
    index = next(i for i, report in enumerate(reports) if report.schedule_id in found)
    step = found[str(reports[index].schedule_id)]
    others = f" (and {len(found) - 1} other step(s) cut short)" if len(found) > 1 else ""
    raise StepCutShortError(
        f"actuals[{index}].schedule_id={step.schedule_id!r}: that step was cancelled with "
        f"{step.cancelled} of its {step.total} trajectories unfinished{others}, so its results are "
        "the ones that finished first, the short ones, and would teach the predictor lengths biased "
        "short; nothing of the batch was stored. Report its trajectories only if you mean to: "
        'leave them out of the batch, or send it with "partial": true to store and learn from them',
        field=f"actuals[{index}].schedule_id",
        value=step.schedule_id,
    )


def _schedules(reports: Sequence[ActualReport]) -> list[str]:
    """The schedules ``reports`` name, sorted (reports may name none: imported history)."""
    return sorted({report.schedule_id for report in reports if report.schedule_id is not None})


def _log_stored(
    schedules: Sequence[str], counts: tuple[int, int], unchecked: Sequence[str], seconds: float
) -> None:
    """The batch's ``actuals stored`` line (``counts``: accepted, repeated): under its schedule's
    id when it names one, else naming up to ``LOGGED_SCHEDULES`` of those it spans; and as many of
    those whose completeness could not be checked (their keys gone), with their count."""
    named: dict[str, object] = {}
    if len(schedules) > 1:
        named["schedule_ids"] = list(schedules[:LOGGED_SCHEDULES])
    if unchecked:
        named["unchecked_schedule_ids"] = list(unchecked[:LOGGED_SCHEDULES])
        named["unchecked_count"] = len(unchecked)
    with schedule_context(schedules[0] if len(schedules) == 1 else None):
        _log.info(
            "actuals stored",
            extra={
                "accepted": counts[0],
                "repeated": counts[1],
                "schedule_count": len(schedules),
                **named,
                "ms": round(seconds * 1000.0, 1),
            },
        )
