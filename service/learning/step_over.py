"""Whether the history's last step is over: what lets an asked-for retrain fit it.

A retrain leaves out the step whose actuals may still be arriving (``predictors.model.complete_steps``):
its first finishers are the short ones, and a fit on them learned the step short. Without more, the
service takes the step planned last, or the history's later last step, to be that open step, so a
``POST /models/retrain`` between a step's last actual and the next step's plan left the step out: a
trainer retraining on demand between steps fitted one step behind. But where this deployment published
the step, its delivery keys say whether it is over. The history's last step is over when:

1. each of its actuals names a schedule (``schedule_id``): a report naming none may be of a step run
   outside the delivery, whose end the service cannot see;
2. each schedule they name has settled (every trajectory done, dead-lettered or cancelled: ``P:counts``
   against ``P:meta`` ``total``) with an actual of each trajectory done, or its actuals cover each of
   its trajectories (as many distinct prompt/sample pairs as it published); one whose keys are gone
   (the retention passed) is not known to be over. Settled alone is not enough: the last trajectories
   to finish, the long ones, are the last reported, and a fit between the settle and their reports
   learned the step short again;
3. no schedule still unsettled (the active index) is named by no actual yet: it may be a part of the
   step that has reported nothing.

Otherwise the step is left out, as before. Replicas agree: the reads are Redis's, and every replica
folds the same actuals stream. The automatic retrain does not ask: it runs at its own step's first plan,
and fits the steps before it (``service.learning.retrain``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from operator import attrgetter

import numpy as np

from scheduler.trace import TraceRow
from service.delivery import keys as keyspace
from service.delivery.views import DeliveryViews, text


@dataclass(frozen=True)
class LastStep:
    """What the actuals say of the newest step they hold (a copy, taken under the sync lock)."""

    step: int | None  # None: no actual folded yet
    unnamed: int  # its actuals naming no schedule
    covered: dict[str, int]  # schedule id -> distinct trajectories of this step its actuals report
    named: frozenset[str]  # every schedule any actual folded so far named, of any step


@dataclass
class StepReports:
    """The actuals folded so far, kept for ``over``: the newest step's by schedule, and the schedule
    ids any actual named (one per published step: a few thousand ids in a long run). Not thread-safe:
    ``ModelService`` folds and copies it under its sync lock."""

    step: int | None = None
    unnamed: int = 0
    trajectories: dict[str, set[tuple[str, int]]] = field(default_factory=dict)
    named: set[str] = field(default_factory=set)

    def fold(self, rows: Sequence[TraceRow], schedules: Sequence[str | None], restarted: bool) -> None:
        """Count ``rows`` (``schedules``: the schedule each named); ``restarted``: they are the
        stream's whole content, replacing what was folded before. Only the newest step's rows are
        visited one by one: a start-up folds the whole stream (a million rows, 30 steps: 0.2-0.4 s on
        a loaded 2-core host, where a Python pass over every row took 0.5-1.4 s)."""
        if restarted:
            self.step, self.unnamed, self.trajectories, self.named = None, 0, {}, set()
        if not rows:
            return
        self.named.update(filter(None, schedules))
        steps = np.fromiter(map(attrgetter("step"), rows), dtype=np.int64, count=len(rows))
        newest = int(steps.max())
        if self.step is None or newest > self.step:
            self.step, self.unnamed, self.trajectories = newest, 0, {}
        for index in np.flatnonzero(steps == self.step).tolist():  # not a late one of an earlier step
            row, schedule = rows[index], schedules[index]
            if schedule is None:
                self.unnamed += 1
            else:
                self.trajectories.setdefault(schedule, set()).add((row.prompt_id, row.sample_idx))

    def last(self) -> LastStep:
        """A copy of what ``over`` reads."""
        covered = {schedule: len(pairs) for schedule, pairs in self.trajectories.items()}
        return LastStep(self.step, self.unnamed, covered, frozenset(self.named))


def over(last: LastStep, step: int, delivery: DeliveryViews) -> bool:
    """Whether ``step``, the history's last, is over (the rule: module doc); two round trips."""
    if last.step != step or last.unnamed or not last.covered:
        return False
    if any(schedule not in last.named for schedule in delivery.active_schedules()):
        return False  # an unsettled schedule that reported nothing yet: maybe a part of this step
    pipe = delivery.client.pipeline(transaction=False)
    for schedule in last.covered:
        keys = delivery.keys(schedule)
        pipe.hget(keys.meta, "total")
        pipe.hmget(keys.counts, [keyspace.DONE, keyspace.FAILED, keyspace.CANCELLED])
    replies = pipe.execute()
    return all(
        _reported(total, counts, reported)
        for total, counts, reported in zip(replies[::2], replies[1::2], last.covered.values(), strict=True)
    )


def _reported(total: object, counts: Sequence[object], reported: int) -> bool:
    """Whether a schedule of ``total`` trajectories (None: keys gone), whose ``counts`` are done,
    failed, cancelled, has all its actuals in: each trajectory reported, or settled with each one
    done reported."""
    if total is None:
        return False  # keys gone, or never this deployment's: not known to be over
    published = int(text(total))
    done, failed, cancelled = (0 if value is None else int(text(value)) for value in counts)
    return reported >= published or (done + failed + cancelled >= published and reported >= done)
