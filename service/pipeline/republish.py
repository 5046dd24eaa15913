"""A caller-chosen ``schedule_id`` sent again: a retry of the same step, or a reuse for other work.

Trainers choose the id per step (``<run>-step-<n>``) so that a retry after a timeout, a 503 or a
proxy's 502 does not publish the step twice. Such a retry asks for the same work, and, as with any
idempotency key (Stripe's, the IETF Idempotency-Key draft), it gets the FIRST attempt's answer: 200,
the same plan and ``schedule_id``, marked ``replayed`` (and ``Idempotent-Replayed: true``), so a
trainer whose first reply was lost still logs the plan it follows. The publish stores that answer
(without its timings, compressed: ``encode_answer``) in the same atomic step as the schedule
(``lua/publish.lua``, ``P:answer``), so a stored schedule always has it, it expires with it, and of
two replicas racing for one id the loser answers the winner's plan, never its own.

That is right only when the retry asks for the same work. A restarted run that kept its ``RUN_ID``,
or a trainer that re-sends the id with another batch (other prompts, a raised ``max_new_tokens``,
other sampling), would follow a step that is not the one it asked for: its rollouts then silently
belong to other prompts, caps or policies. So the publish stores a digest of the work beside the
schedule, and a repeat whose work differs is refused as invalid input naming ``schedule_id`` (422:
the request can never succeed under that id), as idempotency keys reused with another payload are.
A schedule published by an older release (no answer stored) or cancelled keeps its 409.

The inventory plans the work and may differ in a retry (a worker lost between two attempts), but a
retry shares workers with its first attempt: a request that names none of the stored step's
workers is another fleet's, two trainers sharing one service under one run id (the docs' default
``RUN_ID``), and was answered the other trainer's plan, so it followed the other run's step and
trained on samples its own engines never drew. It is refused the same 422 (``same_fleet``).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import logging
import zlib
from array import array
from functools import partial

from pydantic import ValidationError

from scheduler.errors import InvalidInputError
from service.api.schemas import ScheduleRequest, ScheduleResponse
from service.context import Context
from service.delivery import UnknownScheduleError
from service.pipeline.post_publish import later
from service.pipeline.served import timings
from service.problems.table import ConflictError, StepWithdrawnError

_log = logging.getLogger("service.republish")
# What the workers generate: the prompts, their samples and caps, the sampling, the step. Planning
# knobs (policy, budget, inventory, seed) are left out: a retry may plan differently, same work.
WORK_FIELDS = {"batch", "sampling", "step"}
ANSWER_FORMAT = "z1:"  # base64 of zlib'd JSON; an answer in a format this release does not read is not served
UNSTORED = {"timings", "replayed"}  # the request's own, not the answer's: left out of the stored answer


def work_digest(body: ScheduleRequest) -> str:
    """A digest of the work ``body`` asks for, independent of key order and of unset defaults."""
    work = body.model_dump(mode="json", include=WORK_FIELDS)
    for item in work["batch"]["items"]:
        item["prompt_token_ids"] = _ids_digest(item.get("prompt_token_ids"))
        if item["prompt_token_ids"] is None:  # unset, as before the field existed: a retry across
            del item["prompt_token_ids"]  # the upgrade keeps the digest its first attempt stored
    return hashlib.sha256(json.dumps(work, sort_keys=True).encode()).hexdigest()


def _ids_digest(ids: list[int] | None) -> str | None:
    """A prompt's token ids as the SHA-256 of their int64 bytes: JSON text of 256 prompts x 1,024 ids
    took 34 ms to write for the digest, their bytes 2 ms (docs/experiments.md, "Prompts as token ids")."""
    return None if ids is None else hashlib.sha256(array("q", ids).tobytes()).hexdigest()


def encode_answer(response: ScheduleResponse) -> str:
    """The stored form of a ``POST /schedule`` answer: its JSON without timings, zlib'd (level 6),
    in base64 (the service's Redis client decodes replies as text). The JSON of 4,096 assignments
    (~280 kB) stores in ~38 kB, ~10 B a trajectory beside the schedule's ~420 (bench redis-memory),
    in ~5 ms; uncompressed it would have added ~70 B a trajectory."""
    raw = response.model_dump_json(exclude=UNSTORED).encode()
    return ANSWER_FORMAT + base64.b64encode(zlib.compress(raw, 6)).decode("ascii")


def decode_answer(stored: str) -> ScheduleResponse | None:
    """The answer ``encode_answer`` stored, marked replayed (its timings zero, for the caller to set);
    None for one this release cannot read (another format, or damaged: logged), served as a 409."""
    if not stored.startswith(ANSWER_FORMAT):
        return None
    try:
        doc = json.loads(zlib.decompress(base64.b64decode(stored[len(ANSWER_FORMAT) :], validate=True)))
        zero = timings({}, 0.0)  # every stage's field, as ``served.STAGES`` names them
        return ScheduleResponse.model_validate({**doc, "timings": zero, "replayed": True})
    except (binascii.Error, zlib.error, ValueError, ValidationError) as error:
        _log.warning("stored answer unreadable, answering 409", extra={"error": str(error)[:200]})
        return None


def replay(
    body: ScheduleRequest, schedule_id: str, ctx: Context, retry: bool = True
) -> ScheduleResponse | None:
    """The first answer to a request whose caller-chosen id is already published; None when the id
    holds no schedule (plan and publish it).

    The same work again is a retry whose first attempt stored it: it is answered that attempt's
    answer (module docstring), not published again. That first attempt may have failed between
    storing and announcing (a Redis timeout or OOM answered 503), so the replay announces the stored
    schedule again (skipping its drained workers): the answer then means what it says, the step is
    out and the workers see it. For the same reason it enters the id in its step's set
    (``Delivery.enter_step``, idempotent), which that attempt never reached: without it, an asked-for
    retrain takes the step for over once this part settles, before its actuals come (chaos11's
    soak fitted step 156 so); not where ``retry`` is False (a publish that lost its id's race asks
    for the winner's answer, and the winner enters the set: the loser changes nothing). Other work
    under the id is a 422 naming ``schedule_id``. A cancelled
    schedule is a 409 that says so: a restarted trainer that cancelled its step and resent it under
    the same id would otherwise follow a step whose every item is cancelled. A schedule stored
    without an answer (published by an older release) is the 409 it was, "follow it". An id that a
    DELETE withdrew before any publish (``keys.ScheduleKeys.withdrawn``) is a 409 too, before the
    request plans: its publish would be refused."""
    stored = ctx.delivery.stored_request(schedule_id)
    if stored is None:
        return None
    if stored.withdrawn:  # a DELETE met the id before any publish: refused before it plans
        raise withdrawn_conflict(schedule_id)
    if stored.digest is not None and stored.digest != work_digest(body):
        raise InvalidInputError(
            "schedule_id",
            schedule_id,
            "already published with a different batch, sampling or step; a schedule_id names one "
            "step's work: choose a new one (unique per run and step) for this request",
        )
    answer = None if stored.answer is None else decode_answer(stored.answer)
    if answer is not None:
        same_fleet(body, schedule_id, answer)
    try:
        ctx.delivery.announce(schedule_id, ctx.settings.retention_s)
    except UnknownScheduleError:  # its retention passed since the read: nothing holds the id
        return None
    if retry:  # the first attempt may have failed before it; waited for as the publish's (``later``)
        entered = partial(ctx.delivery.enter_step, body.step, schedule_id, ctx.settings.retention_s)
        later("entering the step's set", entered)
    if stored.cancelled:  # following it would wait on a step that runs nothing
        message = f"schedule {schedule_id} was cancelled and stays so; send the step under a new schedule_id"
        raise ConflictError(message, field="schedule_id", value=schedule_id)
    if answer is None:
        message = f"schedule {schedule_id} is already published; follow it with GET /schedule/{schedule_id}"
        raise ConflictError(message, field="schedule_id", value=schedule_id)
    return answer


def withdrawn_conflict(schedule_id: str) -> StepWithdrawnError:
    """The 409 of a request under an id that a DELETE withdrew before it was published
    (``keys.ScheduleKeys.withdrawn``): its trainer gave the step up while it was in flight. Its own
    problem type (``step-withdrawn``): the other 409s on ``schedule_id`` name a step that is out."""
    message = (
        f"schedule {schedule_id} was cancelled (DELETE) before it was published, and nothing was "
        "published; send the step under a new schedule_id"
    )
    return StepWithdrawnError(message, field="schedule_id", value=schedule_id)


def same_fleet(body: ScheduleRequest, schedule_id: str, answer: ScheduleResponse) -> None:
    """Refuse a request under a published ``schedule_id`` whose inventory names none of the workers
    the stored plan was made for (module docstring): a retry keeps at least one of its workers,
    another trainer's fleet keeps none. Checked before the announce, so it changes nothing."""
    planned = set(answer.time_scales) or set(answer.assignments)
    asked = {worker.worker_id for worker in body.inventory.workers}
    if not planned or planned & asked:
        return
    named = ", ".join(sorted(planned)[:4]) + (", ..." if len(planned) > 4 else "")
    raise InvalidInputError(
        "schedule_id",
        schedule_id,
        f"already published on workers ({named}) none of which this request's inventory names: "
        "another run's step under the same id (two trainers sharing the service with one run id)? "
        "choose a schedule_id unique per run and step",
    )
