"""The mark a ``POST /schedule`` under a caller-chosen ``schedule_id`` holds in Redis from its arrival
until it publishes or is refused (``keys.ScheduleKeys.planning``).

A trainer that restarts and gives up on the step it had in flight DELETEs its id, and may find it not
yet published: the old request still waiting for a planning thread, validated, in line for a plan slot
or planning, on any replica. The DELETE must keep that step from reaching the fleet (the abandoned step
would occupy it before the next one), so it withdraws an id it finds marked (``lua/cancel.lua``: 202
``withdrawn``, and the publish is refused 409); an id neither published nor marked (a typo) is a 404
that writes nothing. The mark keeps that promise by these rules:

- only a request that publishes under an id its caller chose is marked: a dry run publishes nothing,
  and an id the service draws is unknown to the trainer until the answer names it;
- taken as soon as the route knows the id, before the request waits for a planning thread
  (``service/api/schedules.py``): a DELETE during that wait (past ``ROLLOUT_MAX_CONCURRENT_PLANS`` +
  16 requests at once) or the validation must find it;
- taken back as the request answers, whatever the answer, last of its bookkeeping (``Mark.release``,
  called by ``service/pipeline/post_publish.py``), or, for a request given up before its thread
  started, by the thread that would have planned it (``service/api/plan_thread.py``); the publish
  deletes it in its own atomic step (``lua/publish.lua``). A refused request leaves Redis as it was;
- a mark Redis fails to write (down, out of memory) is refused only once the body is valid
  (``Mark.check``: a bad body hears its 422 or 413 whatever Redis's state, a valid one the 503),
  before anything reads what is stored under the id: no request publishes unmarked. Its take-back is
  still tried unless Redis refused the write: a write whose answer was lost (a timeout, a connection
  cut after the send) may have landed, and a take-back of an absent entry writes nothing
  (``lua/planning.lua``);
- written for the command timeout only, and extended to the request's TTL once its answer is in hand
  (``Delivery.extend_planning``): a Redis stalled past the command timeout (a long fork, a swap storm,
  a paused VM) runs the write once it resumes, after the request's 503 and perhaps after a take-back
  sent on another connection, so a write whose answer was lost lapses that long after it lands. An
  extension that lands past that window is refused and the request answers 503 (``LateMarkError``); a
  late copy of the mark leaves an extended entry as it is. A take-back retried until Redis answers
  could not do this: finding no entry, it cannot tell a write not landed yet from one never to land,
  so it would poll for the mark's whole TTL, a thread per failed request;
- pushed on while a request that outlives that TTL lives (a plan overrunning its budget on a starved
  host with no caller's deadline, a publish Redis holds), from its extension's answer until its
  take-back (``step_keeper``, ``Delivery.keep_mark``), so a DELETE never answers 404 while the request
  goes on to publish. A keep is an operation of its own, sent only by the process that holds the
  request, that writes only an entry still there and not past its deadline: a mark taken back,
  withdrawn, published or lapsed never comes back, and a replica that dies leaves its marks to lapse at
  most ``keys.PLANNING_MARGIN_S`` past its last keep. An id a DELETE withdrew meanwhile has its
  withdrawal kept instead: left to lapse, a request living past it would publish the abandoned step;
- checked by the publish: it names the request's mark (``Mark.request_id``, through the publish stage
  and ``Delivery.publish``; '' for a drawn id or a dry run, which hold none) and ``lua/publish.lua``
  refuses it where ``P:planning`` no longer holds that entry (lapsed, or only a racing request's
  there): ``MarkLapsedError``, nothing written, answered 503 (``mark-lapsed``) as a mark lost at
  arrival. The keeper cannot cover a Redis that fails every keep for the last half margin (30 s)
  before the kept deadline; this refusal can, and a trainer's retry under the id marks it again and
  publishes. A replay, a conflict and a withdrawal are answered before it, so the loser of a race for
  the id (the winner's publish deleted every mark) still answers the winner's plan, and a withdrawn id
  its 409;
- readable across releases: an older replica runs its own copy of the script (by SHA) and sends no
  mark, so its requests publish unchecked; the mark's nonce is the script's argument before the
  call's nonce, which stays last, so each release's script reads the other's arguments right
  (``wire.publish_args``).

(What each rule was found by: docs/experiments.md, chaos10, markkeep48, review48c and pubmark49.)
"""

from __future__ import annotations

import logging
import time
import uuid
from dataclasses import dataclass

from service.api.convert import time_budget_s
from service.api.schemas import ScheduleRequest
from service.context import Context
from service.delivery import keys
from service.delivery.errors import REDIS_FAILED, nothing_ran
from service.logs import schedule_context
from service.pipeline import step_keeper
from service.pipeline.deadline import NO_DEADLINE, Deadline

_log = logging.getLogger("service.pipeline")


@dataclass(frozen=True)
class Mark:
    """One request's in-flight mark; ``ctx`` None where the request holds none (``mark``), and
    ``unwritten`` the error of a write Redis failed (raised by ``check``)."""

    ctx: Context | None
    schedule_id: str
    request_id: str
    unwritten: Exception | None = None  # one of ``REDIS_FAILED``

    def check(self) -> None:
        """Raise the mark's own failure (503), once the request passed every rule: an invalid one
        has been refused for what it is (422) before this, as it is when Redis answers."""
        if self.unwritten is not None:
            raise self.unwritten

    def release(self) -> None:
        """Take the mark back: its own publish deleted it already, but a request refused, failed,
        given up, or that lost the id to one published after its early check, must leave none. A
        Redis that fails it now is logged, not raised over the answer or the error the request
        gives: the mark lapses by itself (``mark``)."""
        if self.ctx is None:
            return
        step_keeper.KEEPER.let_go(step_keeper.InFlight(self.schedule_id, self.request_id))
        with schedule_context(self.schedule_id):
            try:
                self.ctx.delivery.unmark_planning(self.schedule_id, self.request_id)
            except REDIS_FAILED as error:
                _log.warning("in-flight mark left to lapse", extra={"error": str(error)[:200]})


def mark(ctx: Context, body: ScheduleRequest, schedule_id: str, until: Deadline = NO_DEADLINE) -> Mark:
    """Mark ``schedule_id`` in flight for this request, if it will publish under an id its caller
    chose. The mark lives as long as the request may (the plan queue's timeout, counted from its
    arrival, the request's budget, ``keys.PLANNING_MARGIN_S`` to predict and publish), so the mark
    of a replica that died mid-request lapses by itself. The budget is the one the plan can still be
    given under the caller's deadline ``until`` (``Deadline.capped_s``): the request cannot plan past
    it, and its whole budget (up to 60 s) had kept a dead replica's mark that much longer; a request
    that lives longer has it kept until ``release`` (``step_keeper``). Asks Redis:
    call it off the event loop. A Redis error is kept in the mark, not raised (``Mark.check``)."""
    if not (body.schedule_id and body.publish):
        return Mark(None, schedule_id, "")
    request_id, sent = uuid.uuid4().hex, time.monotonic()
    ttl_s = life_s(ctx, body, until)
    landed = False
    try:
        ctx.delivery.mark_planning(schedule_id, request_id, _answer_window_ms(ctx))
        landed = True  # whatever the extension meets, this entry is there to be taken back
        ctx.delivery.extend_planning(schedule_id, request_id, int(ttl_s * 1000))
    except REDIS_FAILED as error:  # raised once the body is found valid (``Mark.check``)
        # Redis answered the mark with a refusal (out of memory): nothing landed, nothing to take back
        refused = not landed and nothing_ran(error)
        return Mark(None if refused else ctx, schedule_id, request_id, error)
    # kept live while the request lives, however long it overruns, until ``release`` (``step_keeper``)
    left_s = ttl_s - (time.monotonic() - sent)  # counted from before the mark: never later than Redis's
    step_keeper.KEEPER.hold(ctx, step_keeper.InFlight(schedule_id, request_id), left_s)
    return Mark(ctx, schedule_id, request_id)


def life_s(ctx: Context, body: ScheduleRequest, until: Deadline) -> float:
    """How long a request may live, and so its mark and its step's planning entry (``step_part``): the
    plan queue's timeout (counted from its arrival), the budget its plan can still be given under the
    caller's deadline ``until`` (``Deadline.capped_s``) and ``keys.PLANNING_MARGIN_S`` to predict and
    publish. Past it a dead replica's mark and entry lapse by themselves."""
    budget_s = time_budget_s(body, ctx.settings)  # the one the plan is given
    return ctx.settings.plan_queue_timeout_s + until.capped_s(budget_s) + keys.PLANNING_MARGIN_S


def _answer_window_ms(ctx: Context) -> int:
    """How long a mark lives until the request extends it: the service's command timeout, past which
    the request stops waiting for an answer. A mark whose answer was lost lapses at most this long
    after it lands; an extension sent at once after the mark's answer lands well within it, and one
    that lands later was waited for longer than this by a request that may have answered 503 by then,
    so it is refused (``lua/planning.lua``)."""
    return max(1, int(ctx.settings.redis_timeout_s * 1000))
