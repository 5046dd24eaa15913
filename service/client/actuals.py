"""The trainer's actuals as the client shapes them: a result turned into the report the predictor
learns from, and the answers of a report sent in chunks summed into one.

Kept apart from ``service/client/scheduler_client.py``, which is the HTTP side (requests, retries,
refusals): what a result says about length (an aborted one says nothing, a result cut at its cap is
a lower bound) is decided here, where it can be read and tested without a service.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from service.api.learning_schemas import ActualReport, ActualsAccepted
from service.api.progress_schemas import ResultEntry


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


def actual_from_result(
    step: int,
    entry: ResultEntry,
    prompt_tokens: Mapping[str, int],
    rewards: Mapping[str, float],
    schedule_id: str | None = None,
) -> ActualReport | None:
    """The actual a worker's accepted result amounts to; None when it says nothing about length.

    ``schedule_id``, the schedule that ran it, lets the service compare its wall time with the
    worker's profile as that schedule planned it, not as a later one (``service/speeds/learner.py``)."""
    if entry.finish_reason not in ("stop", "length") or entry.output_tokens < 1:
        return None
    prompt_id, sample_idx = entry.prompt_id, entry.sample_idx  # the service split the key already
    if prompt_id is None or sample_idx is None:  # a service from before the split: split it here
        head, _, tail = entry.key.rpartition("#")
        prompt_id, sample_idx = head, int(tail)
    tokens = entry.extra.get("prompt_tokens", prompt_tokens.get(prompt_id))
    if tokens is None:
        raise ValueError(f"prompt_tokens of {prompt_id!r} unknown: pass prompt_tokens={{...}}")
    reward = rewards.get(entry.key, entry.reward)
    return ActualReport(
        step=step,
        prompt_id=prompt_id,
        sample_idx=sample_idx,
        worker_id=entry.worker_id,
        prompt_tokens=int(tokens),
        output_tokens=entry.output_tokens,
        finish_reason="stop" if entry.finish_reason == "stop" else "length",  # checked above: one of them
        wall_time_s=max(entry.wall_time_s, 1e-6),
        reward=reward,
        concurrency=_concurrency(entry.extra.get("concurrency")),
        max_new_tokens=_cap(entry.extra.get("max_new_tokens")),
        schedule_id=schedule_id,
    )


def _cap(value: Any) -> int | None:
    """The item's cap as the sidecar recorded it: a ``length`` result is then read as a lower bound
    of a longer length, and a later raise of the cap is not predicted at the old one."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _concurrency(value: Any) -> float | None:
    """The sidecar's mean in-flight count, when it recorded one (speed learning needs it)."""
    return None if value is None else max(1.0, float(value))
