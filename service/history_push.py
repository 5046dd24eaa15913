"""Seed a running service's history with a trace, so that it predicts well from its first step.

The service predicts from the history it holds: the actuals stream in Redis, filled by ``POST
/actuals`` as steps finish. A model trained offline on a trace (``predictor train``) and loaded from
the store still sees no history for the trace's prompts there, and every prediction falls back to
the global prior until actuals arrive. ``rollout-scheduler trace push`` posts the trace's rows as
actuals instead, through the public API, so every replica sees them and a retrain fits on them.

Rows become reports as they are (step, prompt, sample, lengths, reward, extra columns as features).
A row without a finish reason is ``length`` when it reached its cap, else ``stop`` (a trace holds no
row of 0 output tokens, as the API takes none: ``scheduler.trace.MINIMUM``). Imported rows carry no
wall time nor concurrency, so they teach lengths, never a worker's speed. Every report is validated
before the first is sent, so a trace with a bad row changes nothing.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from pydantic import ValidationError

from predictors.tracetable import Trace
from scheduler.errors import InvalidInputError
from scheduler.trace import TraceRow
from service.api.learning_schemas import ActualReport
from service.client import SchedulerClient
from service.problems.details import error_words

BATCH = 4_096  # reports per POST /actuals (the API takes up to 100,000; smaller bodies fail faster)


@dataclass(frozen=True, slots=True)
class Pushed:
    """What a push stored."""

    accepted: int  # actuals the service stored
    stream_length: int  # its actuals stream afterwards
    repeated: int = 0  # actuals it held already (a trace pushed twice): not stored again


def actual_reports(trace: Trace, worker_id: str, source: str = "trace") -> list[ActualReport]:
    """The trace's rows as validated reports.

    Raises ``InvalidInputError`` naming the first row the API would refuse in ``source`` (the file):
    its place among the rows, 1-based as they stand in the file, and its key, which a search of the
    file finds in any format. It said ``row 1.prompt_id``, the row's 0-based index in the trace, of
    a row on line 3 of a csv (trace56)."""
    reports: list[ActualReport] = []
    for index, row in enumerate(trace.rows()):
        try:
            reports.append(ActualReport.model_validate(_fields(row, worker_id)))
        except ValidationError as error:
            first = error.errors()[0]
            where = ".".join(str(part) for part in first["loc"])
            key = f"step {row.step}, prompt {row.prompt_id!r}, sample {row.sample_idx}"
            field = f"{source}: row {index + 1} ({key}): {where}"
            raise InvalidInputError(field, first.get("input"), error_words(first)) from None
    return reports


def push(
    client: SchedulerClient, reports: Sequence[ActualReport], batch: int = BATCH, outage_s: float = 60.0
) -> Pushed:
    """Post ``reports`` in batches of ``batch``; the stream length is the last answer's.

    The first report goes alone and is not retried: a service that does not answer it is not
    running or the ``--url`` is wrong, which the user hears of at once, not after ``outage_s`` of
    retries (a minute, for a typo in the port). Once it landed, each later batch rides out an
    outage (a restart mid-push) for up to ``outage_s``: the service stores a resent report once."""
    accepted, repeated, length = 0, 0, 0
    first = [list(reports[:1])] if reports else []
    for k, chunk in enumerate([*first, *_chunks(reports[1:], batch)]):
        answer = client.report_actuals(chunk, outage_s=outage_s if k else 0.0)
        accepted, repeated, length = (
            accepted + answer.accepted,
            repeated + answer.repeated,
            answer.stream_length,
        )
    return Pushed(accepted, length, repeated)


def _fields(row: TraceRow, worker_id: str) -> dict[str, object]:
    finish = row.finish_reason
    if finish is None:
        capped = row.max_new_tokens is not None and row.output_tokens >= row.max_new_tokens
        finish = "length" if capped else "stop"
    return {
        "step": row.step,
        "prompt_id": row.prompt_id,
        "sample_idx": row.sample_idx,
        "worker_id": worker_id,
        "prompt_tokens": row.prompt_tokens,
        "output_tokens": row.output_tokens,
        "finish_reason": finish,
        "reward": row.reward,
        "max_new_tokens": row.max_new_tokens,
        "features": dict(row.features),
    }


def _chunks(reports: Sequence[ActualReport], size: int) -> Iterator[Sequence[ActualReport]]:
    for start in range(0, len(reports), size):
        yield reports[start : start + size]
