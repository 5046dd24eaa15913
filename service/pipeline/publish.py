"""The publish stage of ``POST /schedule``: the plan written to Redis for the sidecars to pull.

What the sidecars need beside the plan (each prompt's payload, the lease settings), the race for a
caller-chosen ``schedule_id`` that another request may store first (the loser answers the winner's
plan, ``service/pipeline/republish.py``), and what is remembered once the step is out (each worker's
profile, ``service/speeds/learner.py``). Kept apart from ``service/pipeline/stages.py``, which calls
``publish`` as its last stage, so that the pipeline reads as the stages and this module as what
publishing one involves.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import Any

from scheduler.types import Plan, PlanRequest
from service.api.schemas import BatchItem, Sampling, ScheduleRequest, ScheduleResponse
from service.context import Context
from service.delivery import LeaseSettings, PublishOutcome, ScheduleConflictError, ScheduleWithdrawnError
from service.delivery.publisher import publish_plan
from service.pipeline.post_publish import later
from service.pipeline.republish import encode_answer, replay, withdrawn_conflict, work_digest
from service.problems.table import ConflictError


def publish(
    ids: tuple[str, str],
    chosen: Plan,
    plan_request: PlanRequest,
    body: ScheduleRequest,
    ctx: Context,
    idle: Sequence[str],
    response: ScheduleResponse,
) -> ScheduleResponse | None:
    """Write the plan's queues (with each prompt's payload) for the sidecars; remember worker profiles
    (as the fleet's and this schedule's), and pull the learned speed of each ``idle`` worker (planned
    by it and given nothing) towards its busy peers', so that it is measured again
    (``service/speeds/learner.py``).
    ``ids``: the schedule's, and the request's in-flight mark's (``in_flight.Mark.request_id``; '' for
    a drawn id), which the publish must still find, else 503 with nothing written (``MarkLapsedError``:
    a DELETE meanwhile was a 404, ``service/pipeline/in_flight.py``).
    Under a caller-chosen id, the work's digest and ``response`` (the answer a retry replays) are
    stored in the same atomic step as the schedule. None once published. Once published (and
    announced: the active index holds it from then until it settles) the id joins its step's set
    (``Delivery.enter_step``), what tells an asked-for retrain every part of the step
    (``service.learning.step_over``); only the request that published it writes there, so one that
    lost the race for its id changes nothing.

    Profiles are remembered only once the publish is accepted: a publish that loses a race for its
    ``schedule_id`` (another replica stored the step first, with this plan or another) changes
    nothing and returns the winner's stored answer (``replay``: 422 for other work, 409 when the
    winner stored none), so exactly one caller is told it published and every caller gets one plan;
    the loser's profiles would otherwise describe workers as a plan that never ran. If Redis fails in
    between, the schedule runs and its actuals are compared with each worker's previous profile
    until the next publish.

    Both are bookkeeping the answer waits for only until the caller's deadline
    (``service/pipeline/post_publish.py``): on a Redis stalled after the publish, each was a command
    timeout with its retries added to a 200 past the deadline. The planning entry, taken back after
    them, covers the part until it is in the set.
    """
    schedule_id = ids[0]
    outcome = _stored(ids, chosen, plan_request, body, ctx, response)
    if outcome is PublishOutcome.UNCHANGED:  # a request that raced us stored the step first
        return _winners_answer(body, schedule_id, ctx)
    # announced: the active index holds it until it settles, the planning entry until it enters the set
    entered = partial(ctx.delivery.enter_step, body.step, schedule_id, ctx.settings.retention_s)
    later("entering the step's set", entered)
    remembered = partial(ctx.speeds.remember, schedule_id, plan_request.inventory, idle)
    later("remembering worker profiles", remembered)
    return None


def _stored(
    ids: tuple[str, str],
    chosen: Plan,
    plan_request: PlanRequest,
    body: ScheduleRequest,
    ctx: Context,
    response: ScheduleResponse,
) -> PublishOutcome:
    """``publish_plan`` of the plan with its payloads and lease settings; UNCHANGED when the id
    was stored first by another request (with this plan, or another: ``ScheduleConflictError``)."""
    schedule_id, mark = ids
    payloads = {item.prompt_id: _payload(item, body.sampling) for item in body.batch.items}
    settings = ctx.settings
    lease = LeaseSettings(settings.lease_ttl_ms, settings.max_attempts, settings.retention_s)
    chosen_id = bool(body.schedule_id)  # only a caller that chose the id can send it again
    try:
        outcome = publish_plan(
            ctx.delivery,
            schedule_id,
            chosen,
            plan_request.trajectories,
            payloads,
            lease,
            plan_request.prefix_affinity,
            # each item's steal deadline, from the plan at predicted lengths
            inventory=plan_request.inventory,
            drained=plan_request.excluded_workers,  # they take nothing: not stolen, shared or retried work
            engine=plan_request.engine,  # the deadlines played by the rules of the engine named
            digest=work_digest(body) if chosen_id else "",
            answer=encode_answer(response) if chosen_id else "",
            mark=mark,  # its in-flight mark, still there, or nothing written (``MarkLapsedError``: 503)
        )
    except ScheduleConflictError:  # another plan won the id
        outcome = PublishOutcome.UNCHANGED
    except ScheduleWithdrawnError:  # a DELETE met the id while this request planned it
        raise withdrawn_conflict(schedule_id) from None
    return outcome


def _winners_answer(body: ScheduleRequest, schedule_id: str, ctx: Context) -> ScheduleResponse:
    """The stored answer of the request that published ``schedule_id`` first (``replay``: 422 for
    other work, 409 when it stored none); 409 when its retention has passed since."""
    first = replay(body, schedule_id, ctx, retry=False)
    if first is None:  # and its retention passed since: too late to be a retry of anything
        message = f"schedule {schedule_id} was published by another request and has expired since"
        raise ConflictError(message, field="schedule_id", value=schedule_id)
    return first


def _payload(item: BatchItem, sampling: Sampling | None) -> dict[str, Any]:
    """What the sidecar forwards to the engine: prompt text, token ids or chat messages, and the
    sampling fields (the request's, with the prompt's own over them). Token ids go in ``prompt`` as a
    list of ints, as /v1/completions takes them (vLLM, SGLang): the sidecar forwards ``prompt`` as it
    is, text or ids (``EngineClient.request_for``), so it needs nothing new to send them."""
    payload: dict[str, Any] = {}
    if item.prompt is not None:
        payload["prompt"] = item.prompt
    if item.prompt_token_ids is not None:
        payload["prompt"] = item.prompt_token_ids
    if item.messages is not None:
        payload["messages"] = [m.model_dump() for m in item.messages]
    params = {**(sampling.params() if sampling else {}), **(item.sampling.params() if item.sampling else {})}
    if params:
        payload["params"] = params
    return payload
