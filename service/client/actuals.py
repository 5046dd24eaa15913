"""The trainer's actuals as the client shapes them: a result turned into the report the predictor
learns from, and the answers of a report sent in chunks summed into one.

Kept apart from ``service/client/scheduler_client.py``, which is the HTTP side (requests, retries,
refusals): what a result says about length (an aborted one says nothing, a result cut at its cap is
a lower bound) is decided here, where it can be read and tested without a service.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import ValidationError

from scheduler import trace
from service.api.learning_schemas import ActualReport, ActualsAccepted
from service.api.progress_schemas import ResultEntry
from service.api.schemas import MAX_COUNT
from service.problems.details import clipped, error_words


def summed(answers: Sequence[ActualsAccepted]) -> ActualsAccepted:
    """One answer for a batch sent in chunks: counts summed, the stream and speeds as last answered."""
    scales: dict[str, float] = {}
    for answer in answers:
        scales.update(answer.time_scales)
    return ActualsAccepted(
        accepted=sum(a.accepted for a in answers),
        repeated=sum(a.repeated for a in answers),
        stream_length=answers[-1].stream_length,
        time_scales=scales,
        unchecked_schedules=sorted({sid for a in answers for sid in a.unchecked_schedules}),
    )


class MalformedResultError(ValueError):
    """A result the service served that no actual can be made of: a key without its sample index, a
    NaN wall time or reward, a worker id or count the service's actuals refuse. A worker or writer
    that did not check it stored it (the results page's schema takes it); ``report_results`` raises
    it before sending anything, naming the result (``key``) and its ``field``. A ``ValueError``, as
    ``PartialStepError``: it was a bare ``ValueError`` of ``int()`` or pydantic's ``ValidationError``."""

    def __init__(self, key: str, field: str, why: str) -> None:
        self.key = key
        self.field = field
        super().__init__(f"result {clipped(key)!r} makes no actual: {field}: {why}; nothing was reported")


def actual_from_result(
    step: int,
    entry: ResultEntry,
    prompt_tokens: Mapping[str, int],
    rewards: Mapping[str, float],
    schedule_id: str | None = None,
) -> ActualReport | None:
    """The actual a worker's accepted result amounts to; None when it says nothing about length.
    ``MalformedResultError`` when the result says nonsense (``ResultEntry`` takes any figure).

    ``schedule_id``, the schedule that ran it, lets the service compare its wall time with the
    worker's profile as that schedule planned it, not as a later one (``service/speeds/learner.py``)."""
    if not says_length(entry.finish_reason, entry.output_tokens):
        return None
    prompt_id, sample_idx = _parts(entry)
    tokens = _count(entry.extra.get("prompt_tokens")) or prompt_tokens.get(prompt_id)
    if tokens is None:
        raise ValueError(f"prompt_tokens of {prompt_id!r} unknown: pass prompt_tokens={{...}}")
    try:
        return ActualReport(
            step=step,
            prompt_id=prompt_id,
            sample_idx=sample_idx,
            worker_id=entry.worker_id,
            prompt_tokens=int(tokens),
            output_tokens=entry.output_tokens,
            finish_reason="stop" if entry.finish_reason == "stop" else "length",  # checked above: one of them
            wall_time_s=max(entry.wall_time_s, 1e-6)
            if math.isfinite(entry.wall_time_s)
            else entry.wall_time_s,
            reward=rewards.get(entry.key, entry.reward),
            concurrency=_concurrency(entry.extra.get("concurrency")),
            max_new_tokens=_cap(entry.extra.get("max_new_tokens"), entry.output_tokens),
            schedule_id=schedule_id,
        )
    except ValidationError as error:
        fault = error.errors()[0]
        raise MalformedResultError(entry.key, ".".join(map(str, fault["loc"])), error_words(fault)) from None


def says_length(finish_reason: str, output_tokens: int) -> bool:
    """Whether a result says something of length, so a client reports it: it stopped or hit its cap,
    with a token out (``scheduler.trace.result_says_length``, the rule the service's retrain reads
    too). Which reasons say a length is ``scheduler.trace.says_length``'s rule, which the trace format
    and ``POST /actuals`` refuse the others by."""
    return trace.result_says_length(finish_reason, output_tokens)


def _parts(entry: ResultEntry) -> tuple[str, int]:
    """The prompt id and sample index of a result: the service's split, or (a service from before
    the split) the key's parts, ``prompt_id#sample_idx`` with ASCII digits (``int()`` reads others)."""
    if entry.prompt_id is not None and entry.sample_idx is not None:
        return entry.prompt_id, entry.sample_idx
    head, _, tail = entry.key.rpartition("#")
    if not head or not (tail.isascii() and tail.isdigit()):
        raise MalformedResultError(entry.key, "key", "not prompt_id#sample_idx")
    return head, int(tail)


def _count(value: Any) -> int | None:
    """A token count as the sidecar records one (an integer from 1 to 2^31-1), else None: a value
    that is none gives way to the trainer's ``prompt_tokens`` (a null stood over it)."""
    return value if type(value) is int and 1 <= value <= MAX_COUNT else None


def _cap(value: Any, output_tokens: int) -> int | None:
    """The item's cap as the sidecar recorded it: a ``length`` result is then read as a lower bound
    of a longer length, and a later raise of the cap is not predicted at the old one. One that is no
    count, or below the output it capped, is none (the report teaches the length without it)."""
    cap = _count(value)
    return cap if cap is not None and cap >= output_tokens else None


def _concurrency(value: Any) -> float | None:
    """The sidecar's mean in-flight count, when it recorded one as a finite number (speed learning
    needs it); text, a list or a NaN (``float()`` read ``"2"``, failed on ``[2]``) is none recorded."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return max(1.0, float(value))
