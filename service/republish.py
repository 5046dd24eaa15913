"""A caller-chosen ``schedule_id`` sent again: a retry of the same step, or a reuse for other work.

Trainers choose the id per step (``<run>-step-<n>``) so that a retry after a timeout or a 503 is
refused (409) instead of publishing the step twice, and follows the stored one. That is right only
when the retry asks for the same work. A restarted run that kept its ``RUN_ID``, or a trainer that
re-sends the id with another batch (other prompts, a raised ``max_new_tokens``, other sampling), would
get the same 409 and follow a step that is not the one it asked for: its rollouts then silently
belong to other prompts, caps or policies. So the publish stores a digest of the work beside the
schedule, and a repeat whose work differs is refused as invalid input naming ``schedule_id`` (422:
the request can never succeed under that id), as idempotency keys reused with another payload are.
"""

from __future__ import annotations

import hashlib
import json

from scheduler.errors import InvalidInputError
from service.api.schemas import ScheduleRequest
from service.context import Context
from service.delivery import UnknownScheduleError
from service.problems import ConflictError

# What the workers generate: the prompts, their samples and caps, the sampling, the step. Planning
# knobs (policy, budget, inventory, seed) are left out: a retry may plan differently, same work.
WORK_FIELDS = {"batch", "sampling", "step"}


def work_digest(body: ScheduleRequest) -> str:
    """A digest of the work ``body`` asks for, independent of key order and of unset defaults."""
    work = body.model_dump(mode="json", include=WORK_FIELDS)
    return hashlib.sha256(json.dumps(work, sort_keys=True).encode()).hexdigest()


def refuse_republish(body: ScheduleRequest, schedule_id: str, ctx: Context) -> None:
    """Refuse a request whose caller-chosen id is already published; return when it is not.

    The same work again is a retry whose first attempt stored it: publishing again would make the
    workers generate the batch twice, so it is refused (409). That first attempt may have failed
    between storing and announcing (a Redis timeout or OOM answered 503), so the refusal announces the
    stored schedule again: the 409 then means what it says, the step is out and the workers see it.
    Other work under the id is a 422 naming ``schedule_id`` (module docstring). A cancelled schedule
    is a 409 that says so: a restarted trainer that cancelled its step and resent it under the same
    id would otherwise follow a step whose every item is cancelled. A schedule stored without a
    digest (published before digests, or its digest write failed) is taken as the same."""
    stored = ctx.delivery.request_digest(schedule_id)
    if stored is not None and stored != work_digest(body):
        raise InvalidInputError(
            "schedule_id",
            schedule_id,
            "already published with a different batch, sampling or step; a schedule_id names one "
            "step's work: choose a new one (unique per run and step) for this request",
        )
    try:
        ctx.delivery.announce(schedule_id, ctx.settings.retention_s)
    except UnknownScheduleError:
        return
    if ctx.delivery.cancelled(schedule_id):  # following it would wait on a step that runs nothing
        message = f"schedule {schedule_id} was cancelled and stays so; send the step under a new schedule_id"
    else:
        message = f"schedule {schedule_id} is already published; follow it with GET /schedule/{schedule_id}"
    raise ConflictError(message, field="schedule_id", value=schedule_id)
