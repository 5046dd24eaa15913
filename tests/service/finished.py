"""A worker's report of one finished trajectory, as the delivery, api, client, sidecar and deploy tests
send it.

Most of those tests complete a lease to see what the service does with the completion (accepted,
stale, a duplicate, counted, paged) and read none of the result's fields: ``RESULT`` is that one
report, where each of some forty test modules wrote its own (77 tokens here, 64 or 5 there, none of
it read). A test whose point is a field (an output of a given size, a reward, extras, a length the
trainer reads back) builds its report with ``finished_with``, naming that field, so the value the
test is about stands in the test and the rest is this module's.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from service.api.progress_schemas import ResultEntry
from service.delivery.records import TrajectoryResult


def finished_with(
    *,
    output_tokens: int = 5,
    finish_reason: str = "stop",
    wall_time_s: float = 0.01,
    output: str = "done",
    reward: float | None = None,
    extra: Mapping[str, Any] | None = None,
) -> TrajectoryResult:
    """A finished trajectory of five tokens, "done", in 0.01 s, but for the fields a test names: the
    ones that test is about."""
    return TrajectoryResult(
        output_tokens=output_tokens,
        finish_reason=finish_reason,
        wall_time_s=wall_time_s,
        output=output,
        reward=reward,
        extra={} if extra is None else extra,
    )


RESULT = finished_with()


def stored_entry(finish_reason: str, output_tokens: int) -> ResultEntry:
    """One result as ``GET /schedule/{id}/results`` pages it (``p#0`` of prompt ``p``, 10 prompt tokens),
    for the tests of what the trainer's client makes of a stored result: its finish reason and count
    are what those tests are about."""
    return ResultEntry.model_validate(
        {
            "stream_id": "1-0",
            "key": "p#0",
            "prompt_id": "p",
            "sample_idx": 0,
            "worker_id": "w0",
            "attempt": 1,
            "output_tokens": output_tokens,
            "finish_reason": finish_reason,
            "wall_time_s": 1.0,
            "output": "",
            "reward": None,
            "extra": {"prompt_tokens": 10},
        }
    )
