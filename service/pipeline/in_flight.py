"""The mark a ``POST /schedule`` under a caller-chosen ``schedule_id`` holds in Redis from the moment
it is accepted for planning until it publishes or is refused (``keys.ScheduleKeys.planning``).

A trainer that restarts and gives up on the step it had in flight DELETEs its id, and may find it not
yet published: the old request still in line for a plan slot or planning, on any replica. The DELETE
must keep that step from reaching the fleet (the abandoned step would occupy it before the next
one), so it withdraws an id it finds marked (``lua/cancel.lua``: 202 ``withdrawn``, and the publish
is refused 409). An id neither published nor marked (a typo) is a 404 that writes nothing, as any
rejected request. So the mark is taken back when the request is refused or fails (a refused request
leaves Redis as it was), and the publish deletes it in its own atomic step (``lua/publish.lua``).

Only a request that publishes under an id its caller chose is marked: a dry run publishes nothing,
and an id the service draws is unknown to the trainer until the answer names it.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import redis

from service.api.schemas import ScheduleRequest
from service.context import Context
from service.delivery import keys

_log = logging.getLogger("service.pipeline")


@contextmanager
def in_flight(ctx: Context, body: ScheduleRequest, schedule_id: str, budget_s: float) -> Iterator[None]:
    """Hold ``schedule_id``'s in-flight mark for the block (the wait for a plan slot, the plan and
    the publish), taken back as it ends: its own publish deleted it already, but a request refused,
    failed, or that lost the id to one published after its early check, must leave none. It lives as
    long as the block may (the plan queue's timeout, the request's budget,
    ``keys.PLANNING_MARGIN_S`` to predict and publish), so the mark of a replica that died
    mid-request lapses by itself."""
    if not (body.schedule_id and body.publish):
        yield
        return
    request_id = uuid.uuid4().hex
    ttl_s = ctx.settings.plan_queue_timeout_s + budget_s + keys.PLANNING_MARGIN_S
    ctx.delivery.mark_planning(schedule_id, request_id, int(ttl_s * 1000))
    try:
        yield
    finally:  # refused (503, 409, 422), failed or answered: nothing of it in flight any more
        _unmark(ctx, schedule_id, request_id)


def _unmark(ctx: Context, schedule_id: str, request_id: str) -> None:
    """Take the request's mark back; a Redis that fails it now is logged, not raised over the answer
    or the error the request gives: the mark lapses by itself (``in_flight``)."""
    try:
        ctx.delivery.unmark_planning(schedule_id, request_id)
    except redis.RedisError as error:
        _log.warning("in-flight mark left to lapse", extra={"error": str(error)[:200]})
