"""A ``POST /schedule`` that will publish, seen as a part of its step from its validation until it ends
(``keys.step_planning``).

An asked-for retrain fits the history's last step once every part of it is over
(``service.learning.step_over``), and finds the parts in the step's set and the active index, which a
part enters only at its publish. A second part still waiting for a plan slot, predicting or planning
was in neither: a retrain asked then fitted the step, and the part published after it (review46b's
finding), where it may hold the step's long tail (stragglers cancelled and sent again). So a
request of the step enters the step's planning entries once validated, and leaves them as it ends,
whatever it answers: published (in the set and the active index by then: no moment where it is in
none), refused, failed, or the loser of its id's race (which so leaves Redis as it found it; each
request's entry is its own, ``<schedule_id> <request id>``, so a loser's take-back leaves the winner's
in place). An entry is scored by a deadline (the plan queue's timeout, the plan's budget and
``keys.PLANNING_MARGIN_S``, as the in-flight mark's), so a replica that dies mid-request keeps the
step open that long at most. Under a caller-chosen id or a drawn one alike; a dry run publishes
nothing and writes nothing.

The entries are bookkeeping, not a condition of the publish: a Redis error writing one is logged and
the request goes on (its publish meets Redis's state anyway), and the part is then seen only from its
publish, as before. A take-back Redis fails is logged too: the entry lapses at its deadline, keeping
the step out until then, never letting it in early.
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
def planning(ctx: Context, body: ScheduleRequest, schedule_id: str, budget_s: float) -> Iterator[None]:
    """Hold ``schedule_id``'s entry among its step's planning requests for the block (the wait for a
    plan slot, the prediction, the plan and the publish), if the request publishes; ``budget_s``: the
    most the plan can be given (``Deadline.capped_s``). Asks Redis twice: call it off the event loop."""
    if not body.publish:
        yield
        return
    member = f"{schedule_id} {uuid.uuid4().hex}"
    life_ms = int((ctx.settings.plan_queue_timeout_s + budget_s + keys.PLANNING_MARGIN_S) * 1000)
    entered = True
    try:
        ctx.delivery.enter_planning(body.step, member, life_ms)
    except redis.RedisError as error:
        entered = not isinstance(error, redis.ResponseError)  # answered (out of memory): nothing landed
        _log.warning("step's planning entry not written: %s: %s", type(error).__name__, error)
    try:
        yield
    finally:
        if entered:
            _left(ctx, body.step, member)


def _left(ctx: Context, step: int, member: str) -> None:
    """Take the entry back; a Redis error is logged, not raised over the request's answer or error."""
    try:
        ctx.delivery.leave_planning(step, member)
    except redis.RedisError as error:
        _log.warning("step's planning entry left to lapse: %s: %s", type(error).__name__, error)
