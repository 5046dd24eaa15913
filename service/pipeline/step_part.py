"""A ``POST /schedule`` that will publish, seen as a part of its step from its arrival until it ends
(``keys.step_planning``).

An asked-for retrain fits the history's last step once every part of it is over
(``service.learning.step_over``). It finds the published parts in the step's set and the active
index, which a part enters only at its publish; a part still in line for a planning thread or a plan
slot, predicting or planning, is in neither, and a retrain that fitted the step then would miss it,
where it may hold the step's long tail (stragglers cancelled and sent again). So each such request
holds an entry among its step's planning ones for its whole life:

- written at arrival, on the hop that writes the in-flight mark (``service/api/schedules.py``),
  before any wait in line: the step is the body's own field, parsed already, so nothing needs
  validating first;
- taken back as the request ends, whatever it answers: published (in the set and the active index by
  then, so the part is never in none), refused (it changes no state), failed, given up before its
  thread started, cancelled during the hop, or the loser of its id's race. Each request's entry is its
  own (``<schedule_id> <request id>``), so a loser's take-back leaves the winner's in place. It rides
  on the mark (``Arrived``): every path that takes the mark back takes the entry back too;
- scored by the request's deadline (``in_flight.life_s``, as the mark's), so a replica that dies
  mid-request keeps the step open that long at most, and pushed on while a request that outlives it
  (a plan overrunning its budget on a starved host, a publish Redis holds) still lives
  (``step_keeper``).

Under a caller-chosen id or a drawn one alike; a dry run publishes nothing and writes nothing.

The entry is a condition of the publish, as the mark is: a request whose entry Redis failed to write
(down, out of memory, a slot unserved mid-reshard) is refused 503 once its body is valid
(``in_flight.Mark.check``: an invalid body still hears its 422), its mark and any entry that may have
landed taken back, nothing published. Refused rather than published without it, because nothing else
in Redis names the request's step before its publish (a retrain asked meanwhile would fit the step
without it), and a Redis failing that write is one the publish would likely meet too; the 503's
``Retry-After`` has the trainer's client send it again. A request whose in-flight mark Redis failed
writes no entry: it is refused the mark's 503 the same way. A take-back Redis fails is logged: the
entry lapses at its deadline, keeping the step out until then, never letting it in early.
(What each rule was found by: docs/experiments.md, review46b, retrain47 and retrain48.)
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass

from service.api.schemas import ScheduleRequest
from service.context import Context
from service.delivery.errors import REDIS_FAILED, nothing_ran
from service.pipeline import in_flight, step_keeper
from service.pipeline.deadline import Deadline

_log = logging.getLogger("service.pipeline")


@dataclass(frozen=True)
class Arrived(in_flight.Mark):
    """A request's in-flight mark (``in_flight.Mark``) and its entry among its step's planning
    requests (``entry``: None where none was written), taken back together (``release``)."""

    entry: tuple[Context, int, str] | None = None  # the context, the step, the member

    def release(self) -> None:
        """Take the mark and the entry back; a Redis error is logged, not raised over the request's
        answer or error: each lapses by itself. The entry is let go first and taken back whatever the
        mark's take-back raised (not Redis's failure: redis-py's parser on a pool the stop closed under
        a take-back cut, ``mark_hop``): it stayed held, pushed on every tick for ``LONGEST_S``."""
        if self.entry is not None:
            step_keeper.KEEPER.let_go(step_keeper.Entry(self.entry[1], self.entry[2]))
        try:
            super().release()
        finally:
            if self.entry is not None:
                _left(*self.entry)


def arrive(ctx: Context, body: ScheduleRequest, schedule_id: str, until: Deadline) -> in_flight.Mark:
    """The request's mark (``in_flight.mark``) and, if it will publish, its step's planning entry,
    written as it arrives: before its wait for a planning thread. Asks Redis: call it off the event
    loop. ``until``: the caller's deadline, which caps how long the entry lives. A request whose mark
    Redis failed writes no entry: it answers 503 (``Mark.check``) and never publishes, and the entry's
    write and take-back, each one more command timeout with its retries on a stalled Redis, had held
    the hop's thread and then the 503 twice that long (an entry whose write landed after the answer
    keeping its step out of a retrain its whole life). A Redis failure writing the entry (``REDIS_FAILED``:
    a cluster client's ``SlotNotCoveredError`` too) is kept, as the mark's is, and raised once the body
    is valid (``Mark.check``: 503), the entry taken back with the mark unless Redis refused it; any
    other error fails the request at once, its mark and its entry taken back."""
    marked = in_flight.mark(ctx, body, schedule_id, until)
    if not body.publish or marked.unwritten is not None:  # a mark Redis failed: a 503, never a part
        return marked
    member = f"{schedule_id} {uuid.uuid4().hex}"
    life_s = in_flight.life_s(ctx, body, until)  # as the mark's
    entry: tuple[Context, int, str] | None = (ctx, body.step, member)
    unwritten: Exception | None = None
    try:
        ctx.delivery.enter_planning(body.step, member, int(life_s * 1000))
    except REDIS_FAILED as error:  # a 503 once the body is found valid (``Mark.check``), never a part
        unwritten = error
        if nothing_ran(error):  # answered (out of memory): nothing landed
            entry = None
        _log.warning("step's planning entry not written: %s: %s", type(error).__name__, error)
    except BaseException:  # not Redis's failure (a bug, a parser on a closed pool): both go, the
        # entry too: such an error may come once the write has landed, and it kept the step out
        Arrived(marked.ctx, marked.schedule_id, marked.request_id, None, entry).release()
        raise
    if unwritten is None:  # kept live while the request lives, however long it overruns (``step_keeper``)
        step_keeper.KEEPER.hold(ctx, step_keeper.Entry(body.step, member), life_s)
    return Arrived(marked.ctx, marked.schedule_id, marked.request_id, unwritten, entry)


def _left(ctx: Context, step: int, member: str) -> None:
    """Take the entry back; a Redis error is logged, not raised over the request's answer or error."""
    try:
        ctx.delivery.leave_planning(step, member)
    except REDIS_FAILED as error:
        _log.warning("step's planning entry left to lapse: %s: %s", type(error).__name__, error)
