"""What the API answers about a published step: progress, dead letters, a cancel, result pages.

Response models only, read by trainers through ``service.client``; what a trainer sends (and the
plan it gets back) is in ``service.api.schemas``. docs/api.md documents every field.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, WithJsonSchema

# The longest ``wait_ms`` of ``GET /schedule/{id}/results`` (a longer one is a 422): the route's bound,
# and the longest long poll ``SchedulerClient.wait`` sends, whatever its ``poll_ms``.
RESULTS_MAX_WAIT_MS = 30_000
# The most bytes of stored result JSON one page of ``GET /schedule/{id}/results`` holds by default
# (``max_bytes``; past its first result, which is always served), and the largest ``max_bytes``: results
# carrying token ids and logprobs run to tens of KB each, and a page bounded by count alone (1,000)
# was tens of MB to read from Redis, render and send (docs/experiments.md, "Delivery protocol review").
RESULTS_PAGE_BYTES = 8 * 1024 * 1024
RESULTS_MAX_BYTES = 64 * 1024 * 1024
STREAM_ID_PATTERN = r"^[0-9]{1,20}-[0-9]{1,20}$"  # a Redis stream id: ``<ms>-<seq>``, ASCII digits
STREAM_ID_PART_BOUND = 2**64  # each part of a stream id Redis takes is below it (20 digits reach past it)


def stream_id(text: str) -> str:
    """``text`` if it is a stream id (``STREAM_ID_PATTERN``), else a ``ValueError`` in words: the
    pattern's own refusal, ``after='0': String should match pattern '^[0-9]{1,20}-[0-9]{1,20}$'``,
    left a trainer sending ``after=0`` to read a regular expression for what ``0-0`` is (user66).
    A part at or past ``STREAM_ID_PART_BOUND`` is refused here too (Redis would refuse it: a 500, not
    a 422), so every reader of a ``StreamId`` gets the bound, not the results route alone (nits67)."""
    if re.fullmatch(STREAM_ID_PATTERN, text) is None:
        raise ValueError(
            "expected a stream id, <ms>-<seq> in digits, as a page's next gives it (0-0: the first)"
        )
    if any(int(part) >= STREAM_ID_PART_BOUND for part in text.split("-")):
        raise ValueError("is past the largest stream id (each part < 2^64)")
    return text


# ``after`` of ``GET /schedule/{id}/results``: checked in words (``stream_id``), documented by its pattern
StreamId = Annotated[
    str, AfterValidator(stream_id), WithJsonSchema({"type": "string", "pattern": STREAM_ID_PATTERN})
]


class Counts(BaseModel):
    """Trajectory counts by state."""

    total: int
    queued: int
    running: int
    done: int
    failed: int
    cancelled: int = 0  # queued or running when the trainer cancelled the schedule (DELETE)


class WorkerCounts(Counts):
    """One worker's counts, and when the plan predicts it finishes its queue."""

    # seconds after ``published_at_ms``; None: the shared FIFO ``*``, or a step published by a
    # release that did not store it
    planned_finish_s: float | None = None


class DeadLetterEntry(BaseModel):
    """An item given up on: a trainer needs the why without reading a sidecar's log."""

    key: str  # trajectory key ``prompt_id#sample_idx``
    worker_id: str  # its last holder
    attempts: int  # leases it consumed
    reason: str  # the engine's refusal, or the lease expiring


class ProgressResponse(Counts):
    """``GET /schedule/{id}``: overall counts, the same per worker, and dead-lettered items; to tell
    a late step from one on plan, how long it has run against what its plan predicted; and the rules
    it was planned by (its engine and admission), to tell a step planned for another engine apart."""

    schedule_id: str
    workers: dict[str, WorkerCounts]
    dead_letter: list[str]  # their keys, in order of death
    dead_letters: list[DeadLetterEntry]  # the same, with who held each last, and why it died
    cancelled_at_ms: int | None = None  # when ``DELETE /schedule/{id}`` cancelled it; None: not cancelled
    published_at_ms: int | None = None  # when it was published (the delivery lease clock, ms)
    elapsed_s: float | None = None  # lease clock now minus published_at_ms (counts on after it ends)
    # the plan's predicted makespan, seconds after publication; None: published by an older release
    predicted_makespan_s: float | None = None
    # the engine whose rules the plan was made for (the request's, else the service's default then);
    # None: published by a release that did not store it, so unknown
    engine: str | None = None
    # the sidecars admit by KV reserved at predicted lengths (the request's ``kv_admission``); None
    # only where a client reads a service from before it was answered
    kv_admission: bool | None = None


class CancelResponse(BaseModel):
    """``DELETE /schedule/{id}``: what the cancel ended; a repeated DELETE answers the same.

    ``status`` tells the two successes apart: ``cancelled`` (200), the published step's items ended;
    ``withdrawn`` (202), the step was still in line or planning, will never be published (its
    ``POST /schedule`` answers 409) and ended nothing. A service before it sends none: ``cancelled``."""

    schedule_id: str
    status: Literal["cancelled", "withdrawn"] = "cancelled"
    cancelled: int  # queued + running: every item the cancel ended (0 when withdrawn)
    queued: int  # taken off the queues unstarted
    running: int  # leases ended: their heartbeats and late completions are refused
    cancelled_at_ms: int  # when the first DELETE ran (the delivery lease clock, ms)


class ResultEntry(BaseModel):
    """One accepted result of a schedule, as its worker completed it."""

    stream_id: str  # pass the last one as ``after`` to read on
    key: str  # trajectory key ``prompt_id#sample_idx``
    prompt_id: str | None = None  # the key's parts, so a trainer can regroup samples without parsing
    sample_idx: int | None = None  # it (None: published outside the API, or a service before them)
    worker_id: str
    attempt: int
    output_tokens: int
    finish_reason: str
    wall_time_s: float
    output: str
    reward: float | None
    extra: dict[str, Any]  # what the sidecar added: prompt_tokens, predicted_tokens, attempt, ...
    # why ``extra`` is left empty: a result stored before extras were bounded, nested too deep to serve
    extra_withheld: str | None = None


class ResultsPage(BaseModel):
    """``GET /schedule/{id}/results``: a page of results and where to continue."""

    schedule_id: str
    results: list[ResultEntry]
    next: str  # stream id to pass as ``after`` for the next page
