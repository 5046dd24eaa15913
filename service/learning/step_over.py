"""Whether the history's last step is over: what lets an asked-for retrain fit it.

A retrain leaves out the step whose actuals may still be arriving (``predictors.model.complete_steps``):
its first finishers are the short ones, and a fit on them learned the step short. Without more, the
service takes the step planned last, or the history's later last step, to be that open step, so a
``POST /models/retrain`` between a step's last actual and the next step's plan left the step out: a
trainer retraining on demand between steps fitted one step behind. But where this deployment published
the step, its delivery keys say whether it is over. The history's last step is over when:

1. each of its actuals names a schedule (``schedule_id``): a report naming none may be of a step run
   outside the delivery, whose end the service cannot see;
2. each schedule they name, and each the step's set lists (``keys.step_schedules``: the pipeline adds
   every schedule of a step to it once published), has each trajectory reported, but those
   that ended with no result (dead-lettered or cancelled) and those whose result says nothing of
   length (``scheduler.trace.result_says_length``: no client reports one). Trajectories, not counts:
   the actuals' keys against the schedule's ``P:st``, so a report of a cancelled trajectory
   (``partial``) does not stand in for a done one. A schedule whose keys are gone (the retention
   passed) is not known to be over; one withdrawn
   before its publish (``P:withdrawn``, no ``P:meta``) published nothing and is no part of the step.
   Settled alone is not enough: the last trajectories to finish, the long ones, are the last
   reported, and a fit between the settle and their reports learned the step short again. A result
   is looked for from the millisecond its ``P:st`` record says it was stamped (``_said_nothing``):
   an old one is not a read of the whole stream;
3. no schedule still unsettled (the active index) is named by no actual yet: it may be a part of the
   step that has reported nothing. The step's set sees such a part too, and one that settled before
   any of its actuals arrived, which left the active index unseen; the active index still catches
   an unsettled part not in the set: one an older release published, one the moment between its
   publish and its entry, and one whose entry Redis failed after the publish (a warning: the step
   was out, ``service.pipeline.post_publish.later``). Such a part that settles before any of its
   actuals arrive is missed: nothing left in Redis names its step (an older release's part is in
   no set and wrote no planning entry, and ``P:meta`` holds no step), and a client that reports
   a step once it has ended (``docs/client.md``) reports none before the settle;
4. no request of the step that will publish is between its arrival and its end
   (``keys.step_planning``, ``service.pipeline.step_part``): a part waiting for a planning thread
   or a plan slot, predicting or planning is in neither index yet, and one asked then published
   after the step was fitted. An entry past its deadline (a replica that died mid-request) is none;
   a live request's is pushed on while it lives, however long it overruns
   (``service.pipeline.step_keeper``).
   A request whose entry Redis failed to write is refused 503 with nothing published, so it is no
   part. Still unseen: an older release's; a part asked for after the retrain read is a part the
   retrain cannot know.

Otherwise the step is left out. Replicas agree: the reads are Redis's, and every replica folds the same
actuals stream. The automatic retrain does not ask: it runs at its own step's first plan, and fits the
steps before it (``service.learning.retrain``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from predictors.tracetable import Trace
from scheduler.trace import result_says_length
from scheduler.types import trajectory_key
from service.delivery import keys as keyspace
from service.delivery.indexes import PLANNING_NOW
from service.delivery.views import DeliveryViews, text

# ``P:st`` states (``keys.py``): done, and the two ends with no result, dead-lettered and cancelled
_DONE, _ENDED = "d", frozenset({"x", "c"})
# results a read for unreported trajectories takes first (newest first), doubled page by page up to the
# last: the unreported are mostly among the newest, and a result holds its output (4 KB of text each)
_FIRST_PAGE, _LAST_PAGE = 16, 1024
# stored result JSON a page after the first takes, by the average so far (1,024 results of 4 KB, as
# before; half a served results page): results with token ids and logprobs in ``extra`` run to tens of
# KB, and 1,024 of them were one reply of tens of MB, which Redis builds whole and a
# ``client-output-buffer-limit`` closes the connection for (``read_results`` is bounded so too)
_PAGE_BYTES = 4 << 20
_ANY = 1 << 63  # a deadline no record states: the read starts at the stream's newest result


@dataclass(frozen=True)
class LastStep:
    """What the actuals say of the newest step they hold (a copy, taken under the sync lock)."""

    step: int | None  # None: no actual folded yet
    unnamed: int  # its actuals naming no schedule
    covered: dict[str, frozenset[str]]  # schedule id -> keys of this step's trajectories its actuals report
    named: frozenset[str]  # every schedule any actual folded so far named, of any step


@dataclass
class StepReports:
    """The actuals folded so far, kept for ``over``: the newest step's by schedule, and the schedule
    ids any actual named (one per published step: a few thousand ids in a long run). Not thread-safe:
    ``ModelService`` folds and copies it under its sync lock."""

    step: int | None = None
    unnamed: int = 0
    trajectories: dict[str, set[str]] = field(default_factory=dict)
    named: set[str] = field(default_factory=set)

    def fold(self, rows: Trace, schedules: Sequence[str | None], restarted: bool) -> None:
        """Count ``rows`` (``schedules``: the schedule each named); ``restarted``: they are the
        stream's whole content, replacing what was folded before. Only the newest step's rows are
        visited one by one: a start-up folds the whole stream (a million rows, 30 steps: 0.2-0.4 s on
        a loaded 2-core host, where a Python pass over every row took 0.5-1.4 s)."""
        if restarted:
            self.step, self.unnamed, self.trajectories, self.named = None, 0, {}, set()
        if not len(rows):
            return
        self.named.update(filter(None, schedules))
        newest = int(rows.step.max())
        if self.step is None or newest > self.step:
            self.step, self.unnamed, self.trajectories = newest, 0, {}
        at = np.flatnonzero(rows.step == self.step)  # not a late one of an earlier step
        prompts, samples = rows.prompt_id[at].tolist(), rows.sample_idx[at].tolist()
        for index, prompt, sample in zip(at.tolist(), prompts, samples, strict=True):
            schedule = schedules[index]
            if schedule is None:
                self.unnamed += 1
            else:
                self.trajectories.setdefault(schedule, set()).add(trajectory_key(prompt, sample))

    def last(self) -> LastStep:
        """A copy of what ``over`` reads."""
        covered = {schedule: frozenset(keys) for schedule, keys in self.trajectories.items()}
        return LastStep(self.step, self.unnamed, covered, frozenset(self.named))


def over(last: LastStep, step: int, delivery: DeliveryViews) -> bool:
    """Whether ``step``, the history's last, is over (the rule: module doc); two round trips, a third
    only where a done trajectory is not reported."""
    if last.step != step or last.unnamed or not last.covered:
        return False
    active, parts, planning = _indexed(delivery, step)
    if planning:
        return False  # a request of this step arrived and not ended: a part that may publish yet
    if any(schedule not in last.named for schedule in active):
        return False  # an unsettled schedule that reported nothing yet: maybe a part of this step
    schedules = sorted(parts | last.covered.keys())
    pipe = delivery.client.pipeline(transaction=False)
    for schedule in schedules:
        keys = delivery.keys(schedule)
        pipe.hget(keys.meta, "total")
        pipe.exists(keys.withdrawn)
        pipe.hgetall(keys.st)
    replies = pipe.execute()
    unreported: dict[str, dict[str, int]] = {}
    for schedule, total, withdrawn, states in zip(schedules, *[replies[i::3] for i in range(3)], strict=True):
        reported = last.covered.get(schedule, frozenset())
        if total is None:  # keys gone or not written yet: not known; withdrawn before its publish: no part
            if withdrawn and not reported:
                continue
            return False
        left = _unreported(states, reported)
        if left is None:
            return False
        if left:
            unreported[schedule] = left
    return all(_said_nothing(delivery, schedule, left) for schedule, left in unreported.items())


def _indexed(delivery: DeliveryViews, step: int) -> tuple[list[str], set[str], int]:
    """The unsettled schedules (the active index), those the step's set lists, and how many of the
    step's requests are planning (before their deadline): one round trip."""
    pipe = delivery.client.pipeline(transaction=False)
    pipe.zrange(keyspace.active_index(delivery.prefix), 0, -1)
    pipe.smembers(keyspace.step_schedules(step, delivery.prefix))
    pipe.execute_command("EVAL", PLANNING_NOW, 1, keyspace.step_planning(step, delivery.prefix))
    active, parts, planning = pipe.execute()
    return [text(schedule) for schedule in active], {text(schedule) for schedule in parts}, int(planning)


def _unreported(states: dict[object, object], reported: frozenset[str]) -> dict[str, int] | None:
    """The done trajectories of a schedule (``states``: its ``P:st``) that no actual reports, each
    with the newest its result's stream id can be (``_deadline``); None where one still queued or
    running is not reported (the schedule is not over)."""
    left = {}
    for key, stored in states.items():
        name, record = text(key), text(stored)
        if record[:1] in _ENDED or name in reported:
            continue
        if record[:1] != _DONE:
            return None
        left[name] = _deadline(record)
    return left


def _deadline(record: str) -> int:
    """A done trajectory's result's newest stream id (ms, Redis's clock; the ``P:st`` record's fourth
    field, ``lua/common.lua``): the id's own millisecond, which ``lua/complete.lua`` writes there as it
    accepts the result; an older release left the lease's deadline, which the id is not past either (a
    lease is completed only before its deadline, judged on the clock that stamps the id). ``_ANY``
    where the record does not say."""
    try:
        return int(record.split("|")[3])
    except (IndexError, ValueError):
        return _ANY


def _said_nothing(delivery: DeliveryViews, schedule: str, left: dict[str, int]) -> bool:
    """Whether each of ``left``, done trajectories of ``schedule`` no actual reports (with their
    ``_deadline``), has a result that says nothing of length, which no client reports
    (``result_says_length``).

    Each is looked for on its own, the newest first, from its ``_deadline`` down to its result: the
    millisecond its result was stamped (what the completion calls of that millisecond accepted: a
    batch reported at once), or for a record an older release wrote, the results of one lease's life.
    Read from the latest deadline down to the oldest result met, one sweep was the whole stream
    between the two where two were far apart (an aborted trajectory at the step's start and one at
    its end: 131,072 results of 4 KB, 19-25 s of reading, nearly all of it parsing them), or the
    whole stream where the lease was as long as the step. The results newer than a deadline are read
    after, only where its trajectory was not met below it (a clock a caller pinned, ``now_ms``). The
    first result met that does say something ends the read (its report may still be on its way)."""
    stream, rest = delivery.keys(schedule).results, set(left)
    for name in sorted(left, key=left.__getitem__, reverse=True):
        if name not in rest:
            continue  # met on an earlier one's read
        met = None
        for ends in _ranges(left[name]):
            met = _read(delivery, stream, rest, ends, name)
            if met is not None:
                break
        if not met:
            return False  # one says a length, or a done trajectory with no result left: not known
    return True


def _ranges(deadline: int) -> list[tuple[str, str]]:
    """Where a result stamped no later than ``deadline`` is read for (newest, oldest: stream ids): that
    deadline down, then what is newer; the whole stream where the record states none."""
    if deadline >= _ANY:
        return [("+", "-")]
    return [(str(deadline), "-"), ("+", str(deadline + 1))]


def _read(
    delivery: DeliveryViews, stream: str, left: set[str], ends: tuple[str, str], target: str
) -> bool | None:
    """``_said_nothing``'s read of the results between ``ends`` (newest, oldest: stream ids), newest
    first, each of ``left`` met taken out of it: False at one that says a length, True once ``target``
    is met, None where the range ends first."""
    before, oldest = ends
    count, taken, size = _FIRST_PAGE, 0, 0  # results read so far, and their stored JSON's length
    while True:
        page = delivery.client.xrevrange(stream, max=before, min=oldest, count=count)
        if not page:
            return None
        for _, fields in page:
            entry = {text(name): value for name, value in (fields or {}).items()}
            name, stored = text(entry.get("key", b"")), entry.get("result")
            size += len(text(stored or ""))
            if name in left:
                if _says_length(stored):
                    return False
                left.discard(name)
                if name == target:
                    return True
        taken += len(page)
        before, count = f"({text(page[-1][0])}", _next_page(count, taken, size)


def _next_page(count: int, taken: int, size: int) -> int:
    """How many results the next page takes: twice the last, up to ``_LAST_PAGE``, but no more than
    the average size so far fits in ``_PAGE_BYTES`` (one at least): a bounded reply each."""
    return max(1, min(2 * count, _LAST_PAGE, _PAGE_BYTES * taken // max(size, 1)))


def _says_length(stored: object) -> bool:
    """Whether a stored result (``TrajectoryResult.to_json``) says something of length; one that cannot
    be read is taken to (a client would report or refuse it, not pass it over)."""
    try:
        data = json.loads(text(stored))
        return result_says_length(str(data.get("finish_reason", "stop")), int(data["output_tokens"]))
    except (ValueError, TypeError, KeyError, AttributeError):
        return True
