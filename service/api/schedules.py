"""``/schedule``: plan a rollout step, then follow its progress and read its results.

Handlers are plain ``def`` functions: planning is CPU-bound and Redis calls are blocking, so
FastAPI runs each request on its worker thread pool and the event loop stays free for probes. Two
kinds of request that may wait long run on pools of their own instead (``Context``): results
long-polls, and ``POST /schedule``, which waits for a plan slot.
"""

from __future__ import annotations

import functools
import re
import threading
import time
import uuid
from typing import Annotated, Any, Literal

import anyio
from anyio import CapacityLimiter
from fastapi import APIRouter, Depends, Path, Query, Request, Response

from service.api import stopping
from service.api.convert import check_unread
from service.api.cut_answer import cut_event
from service.api.mark_hop import marked as marked_on_a_thread
from service.api.plan_thread import run_to_end
from service.api.progress_schemas import (
    RESULTS_MAX_BYTES,
    RESULTS_MAX_WAIT_MS,
    RESULTS_PAGE_BYTES,
    CancelResponse,
    DeadLetterEntry,
    ProgressResponse,
    ResultEntry,
    ResultsPage,
    StreamId,
    WorkerCounts,
)
from service.api.schemas import (
    ScheduleId,
    ScheduleRequest,
    ScheduleResponse,
)
from service.arrival import arrival_of
from service.auth.scopes import AuthFirstRoute, any_client, trainer_only
from service.context import Context, context_of
from service.delivery import DeadLetter, ResultRecord
from service.delivery.records import MAX_EXTRA_DEPTH, json_depth
from service.delivery.stored import utf8
from service.logs import schedule_context
from service.pipeline import deadline, in_flight, post_publish, stages, step_part
from service.problems.table import DeadlineExceededError, documented

router = APIRouter(tags=["schedules"], route_class=AuthFirstRoute)
REPLAYED_HEADER = "Idempotent-Replayed"  # Stripe's name: the answer is a retry's, the first attempt's plan
# The 200's entry in /openapi.json: a generated client sees the header beside the body's ``replayed``.
_REPLAYED_DOC: dict[str, Any] = {
    "description": "The plan; a retry of a published schedule_id gets the first attempt's, replayed",
    "headers": {
        REPLAYED_HEADER: {
            "description": "Only on a replayed answer: the first attempt's plan, sent again",
            "schema": {"type": "string", "enum": ["true"]},
        }
    },
}
# The 202's entry in /openapi.json: a DELETE that met its step in flight, not yet published.
_WITHDRAWN_DOC: dict[str, Any] = {
    "description": 'Withdrawn: the step was in flight and is never published ("status": "withdrawn")',
    "model": CancelResponse,
}


@router.post(
    "/schedule",
    response_model=ScheduleResponse,
    dependencies=[Depends(trainer_only)],
    responses={200: _REPLAYED_DOC, **documented(400, 401, 403, 409, 413, 415, 422, 503, 504)},
)
async def create_schedule(body: ScheduleRequest, request: Request) -> Response:
    """Validate, predict, plan, publish (unless ``publish`` is false) and return the plan.

    A retry under a caller-chosen ``schedule_id`` already published gets the first attempt's answer,
    ``replayed`` and with the header ``Idempotent-Replayed: true`` (``service/pipeline/republish.py``).
    A step past the configured retrain interval then starts a background retrain: the actuals of
    the earlier steps are in by now, and this response is not delayed by it.

    Served on a thread of ``Context.plan_threads``, not the shared pool: a request waits there for a
    plan slot, and a burst of 40 waiting had held every shared thread, so ``/readyz`` (failing the
    replica's readiness), ``/actuals`` and progress reads waited behind them for as long. Its wait
    in line, for a thread and then a slot, is at most ``ROLLOUT_PLAN_QUEUE_TIMEOUT_S`` counted from
    here, and is its ``queue_ms`` (``PlanSlots.hold``). Its in-flight mark is taken before that wait,
    so a DELETE from here on withdraws the step (``service/pipeline/in_flight.py``), and the thread's
    token is held until the thread ends, whatever happens to this handler (``plan_thread``).

    The caller's deadline (``X-Envoy-Expected-Rq-Timeout-Ms``, from the request's arrival, before its
    body was read: ``service/arrival.py``) caps the plan's budget, and a plan that cannot publish
    before it is refused 504 with nothing written (``service/pipeline/deadline.py``); a malformed one
    is a 422 before the mark.
    """
    arrived = time.perf_counter()  # the wait in line, for a thread then a slot, counts from here
    schedule_id = request.state.schedule_id = body.schedule_id or uuid.uuid4().hex  # for every log line
    until = _deadline(request)  # a bad one: 422, nothing marked
    marked = await _marked(body, request, schedule_id, until)
    served: list[bool] = []  # whether a planning thread took the request up: its body was checked there
    cut = cut_event(request.scope)  # set where ``serve`` answers the request's cut: the plan gives up

    def serve() -> Response:
        served.append(True)
        return _schedule(body, request, marked, (arrived, until), cut)

    try:
        return await run_to_end(serve, marked.release, _own_threads(request, "plan_threads"), until)
    except DeadlineExceededError:
        if not served:  # refused in line for a thread (``plan_thread._in_time``): a bad body is its 422
            await anyio.to_thread.run_sync(check_unread, body, request.app.state.context.settings)
        raise


def _deadline(request: Request) -> deadline.Deadline:
    """The caller's deadline, counted from the request's arrival (``service/arrival.py``), before its
    body was read and parsed: that read took part of the time the caller waits."""
    arrival = arrival_of(request.scope)
    return deadline.of(request.headers.get(deadline.HEADER), arrival.at, clock=arrival.clock)


async def _marked(
    body: ScheduleRequest, request: Request, schedule_id: str, until: deadline.Deadline
) -> in_flight.Mark:
    """The request's in-flight mark and its step's planning entry (``step_part.arrive``), taken on a
    thread of the shared pool (Redis calls, and ``context_of`` may ask Redis too): not one of the
    planning threads it is about to wait for. A handler cancelled during the hop leaves neither
    (``service/api/mark_hop.py``). They live as long as the request may under the caller's deadline
    ``until``."""
    if not body.publish:  # a dry run marks nothing: no thread hop
        return in_flight.Mark(None, schedule_id, "")
    take = functools.partial(step_part.arrive, body=body, schedule_id=schedule_id, until=until)
    return await marked_on_a_thread(lambda: take(context_of(request)))


def _own_threads(request: Request, pool: Literal["plan_threads", "long_polls"]) -> CapacityLimiter | None:
    """The route's own thread pool (a field of ``Context``, which says why each exists); None, the
    shared pool, before the context is built, where ``context_of`` on that thread refuses at once (503)."""
    ctx: Context | None = request.app.state.context
    return None if ctx is None else getattr(ctx, pool)


def _schedule(
    body: ScheduleRequest,
    request: Request,
    marked: in_flight.Mark,
    times: tuple[float, deadline.Deadline],
    cut: threading.Event,
) -> Response:
    """``POST /schedule``'s work, on a planning thread (``context_of`` too: it may ask Redis); the
    request's in-flight mark is taken back as it ends, whatever it answers. ``times``: when it
    arrived, and the caller's deadline (``service/pipeline/deadline.py``). A published step's answer
    waits for the bookkeeping after its publish, and that take-back, only until the deadline
    (``service/pipeline/post_publish.py``); a refused or failed request's, in line. ``cut``: set once
    ``serve`` answered the request's cut (``cut_answer``), as the replica's stop is: the plan gives up
    at its next check."""
    schedule_id = marked.schedule_id
    arrived, until = times

    def serve() -> ScheduleResponse:
        ctx = context_of(request)
        response = stages.run(body, ctx, schedule_id, arrived, marked, until)
        if body.publish and not response.replayed:  # a dry run writes nothing, the retrain counter included
            with schedule_context(schedule_id):  # a retrain it starts logs under the step's id
                counted = functools.partial(ctx.retrainer.after_step, body.step)
                post_publish.later("counting the step towards a retrain", counted)
        return response

    # the bookkeeping after the publish, then the mark's take-back: waited for until the deadline only;
    # a plan still running as the replica stops gives up, its take-back on a daemon (``stopping``), and
    # a published one's bookkeeping not begun yet goes on one too (``post_publish``)
    # ... and so does one whose request ``serve`` answered as cut (the stop itself comes just after)
    stop = stopping.Either((request.app.state.stopping, cut))
    bound_s = request.app.state.settings.redis_timeout_s
    with stopping.planner_stops(stop):
        release = stopping.released(marked.release, stop, bound_s)
        response = post_publish.bounded(serve, release, until, stop.is_set)
    headers = {REPLAYED_HEADER: "true"} if response.replayed else None
    # Serialised once here: returning the model would make FastAPI validate 4,096 items again.
    return Response(response.model_dump_json(), media_type="application/json", headers=headers)


@router.get(
    "/schedule/{schedule_id}",
    dependencies=[Depends(any_client)],
    responses=documented(401, 403, 404, 422, 503),
)
def schedule_progress(schedule_id: Annotated[ScheduleId, Path()], request: Request) -> ProgressResponse:
    """Counts by state, overall and per worker, and the dead-lettered items; and whether the step is
    late: time elapsed since the publish against the plan's predicted makespan and worker finishes."""
    progress = context_of(request).delivery.progress(schedule_id)
    workers = {
        wid: WorkerCounts(
            total=w.queued + w.running + w.done + w.failed + w.cancelled,
            queued=w.queued,
            running=w.running,
            done=w.done,
            failed=w.failed,
            cancelled=w.cancelled,
            planned_finish_s=progress.planned_finish_s.get(wid),
        )
        for wid, w in progress.workers.items()
    }
    return ProgressResponse(
        schedule_id=schedule_id,
        total=progress.total,
        queued=progress.queued,
        running=progress.running,
        done=progress.done,
        failed=progress.failed,
        cancelled=progress.cancelled,
        cancelled_at_ms=progress.cancelled_at_ms,
        published_at_ms=progress.published_ms,
        elapsed_s=progress.elapsed_s,
        predicted_makespan_s=progress.predicted_makespan_s,
        engine=progress.engine,
        kv_admission=progress.kv_admission,
        workers=workers,
        dead_letter=[_servable(d.key) for d in progress.dead_letters],
        dead_letters=[_dead_letter(d) for d in progress.dead_letters],
    )


def _dead_letter(d: DeadLetter) -> DeadLetterEntry:
    """One dead letter as served, its text mended (``_servable``) as a result's is: an item whose key
    is not UTF-8 is failed at each claim until it is dead-lettered, and the dead letter keeps the
    key's bytes, which rendered as read failed every poll of the step (500) from then on."""
    return DeadLetterEntry(
        key=_servable(d.key),
        worker_id=_servable(d.worker_id),
        attempts=d.attempts,
        reason=_servable(d.reason),
    )


@router.delete(
    "/schedule/{schedule_id}",
    dependencies=[Depends(trainer_only)],
    responses={202: _WITHDRAWN_DOC, **documented(401, 403, 404, 422, 503)},
)
def cancel_schedule(
    schedule_id: Annotated[ScheduleId, Path()], request: Request, response: Response
) -> CancelResponse:
    """Cancel a step the trainer gave up on: its queued items leave every queue and its running
    leases end (sidecars stop them at their next heartbeat; late completions are refused), so the
    fleet moves on to the next schedule. Results accepted before stay readable. Idempotent: a
    repeated DELETE changes nothing and answers the same counts.

    An id not published yet but in flight (its ``POST /schedule`` in line or planning, on any
    replica: ``service/pipeline/in_flight.py``) is withdrawn for the retention (or while a request
    under it may still publish, if longer: ``lua/cancel.lua``), 202 ``withdrawn``:
    a restarted trainer that gives up on the step it had in flight must keep that request from
    publishing it (409), or the abandoned step occupies the whole fleet before the next one. Any
    other unknown id is a 404 that writes nothing."""
    ctx = context_of(request)
    report = ctx.delivery.cancel(schedule_id, withdraw_s=ctx.settings.retention_s)
    if report.withdrawn:
        response.status_code = 202
    return CancelResponse(
        schedule_id=schedule_id,
        status="withdrawn" if report.withdrawn else "cancelled",
        cancelled=report.cancelled,
        queued=report.queued,
        running=report.running,
        cancelled_at_ms=report.cancelled_at_ms,
    )


@router.get(
    "/schedule/{schedule_id}/results",
    dependencies=[Depends(trainer_only)],
    responses=documented(401, 403, 404, 422, 503),
)
async def schedule_results(
    schedule_id: Annotated[ScheduleId, Path()],
    request: Request,
    after: Annotated[StreamId, Query()] = "0-0",
    count: Annotated[int, Query(ge=1, le=10_000)] = 1000,
    wait_ms: Annotated[int, Query(ge=0, le=RESULTS_MAX_WAIT_MS)] = 0,
    max_bytes: Annotated[int, Query(ge=1, le=RESULTS_MAX_BYTES)] = RESULTS_PAGE_BYTES,
) -> ResultsPage:
    """Accepted results after stream id ``after``, oldest first; waits up to ``wait_ms`` for one.
    At most ``count`` results and ``max_bytes`` of their stored JSON, past the first, which is always
    served: ``next`` moves on whatever the page's size.

    Read on a thread of the long-poll pool (``Context.long_polls``), not the shared one: polls that
    wait their whole ``wait_ms`` must not starve the other routes. ``context_of`` runs there too: it
    asks Redis its version until Redis first answers, and on the event loop a Redis silent since
    start held ``/healthz`` for seconds per poll, so polling trainers failed the liveness probe."""
    read = functools.partial(_page, request, schedule_id, after, (count, max_bytes), wait_ms)
    records = await anyio.to_thread.run_sync(read, limiter=_own_threads(request, "long_polls"))
    entries = [_entry(r) for r in records]
    last = entries[-1].stream_id if entries else after
    return ResultsPage(schedule_id=schedule_id, results=entries, next=last)


def _entry(r: ResultRecord) -> ResultEntry:
    """One result as served. An ``extra`` nested past ``MAX_EXTRA_DEPTH`` (stored before push-mode
    extras were bounded) is withheld and flagged: rendering it failed the whole page (500), every
    time, so the trainer could never read past it; its output and counts are still served. A lone
    surrogate in its text (stored before the pull API refused one) is served as U+FFFD, for the
    same reason (``_servable``); so is each stored byte that is not UTF-8, in its text, key or
    worker id, which the client decodes to one (``service/delivery/stored.py``)."""
    extra = dict(r.result.extra)
    withheld = None
    if json_depth(extra) > MAX_EXTRA_DEPTH:
        extra, withheld = {}, f"nested deeper than {MAX_EXTRA_DEPTH} levels"
    else:
        extra = _servable(extra)
    key = _servable(r.key)
    return ResultEntry(
        stream_id=r.stream_id,
        key=key,
        **_key_parts(key),
        worker_id=_servable(r.worker_id),
        attempt=r.attempt,
        output_tokens=r.result.output_tokens,
        finish_reason=_servable(r.result.finish_reason),
        wall_time_s=r.result.wall_time_s,
        output=_servable(r.result.output),
        reward=r.result.reward,
        extra=extra,
        extra_withheld=withheld,
    )


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")  # in a str every surrogate is lone (JSON joins pairs)


def _servable(value: Any) -> Any:
    """``value`` (text, or JSON of lists and objects) with each lone UTF-16 surrogate replaced by
    U+FFFD: UTF-8 cannot carry one, and one left in failed the whole page. Text without one, all of
    it but a fault's, is passed as is after one check in C (a scan of every non-ASCII text by the
    pattern cost ~0.23 ms a 32 KB output, 0.23 s a page of 1,000)."""
    if isinstance(value, str):
        return value if utf8(value) else _LONE_SURROGATE.sub("\ufffd", value)
    if isinstance(value, list):
        return [_servable(member) for member in value]
    if isinstance(value, dict):
        return {_servable(name): _servable(member) for name, member in value.items()}
    return value


def _key_parts(key: str) -> dict[str, Any]:
    """``{"prompt_id", "sample_idx"}`` of a ``prompt_id#sample_idx`` key (the API's ids have no ``#``)."""
    prompt_id, _, sample = key.rpartition("#")
    if not prompt_id or not sample.isascii() or not sample.isdigit():
        return {"prompt_id": None, "sample_idx": None}
    return {"prompt_id": prompt_id, "sample_idx": int(sample)}


def _page(
    request: Request, schedule_id: str, after: str, bounds: tuple[int, int], wait_ms: int
) -> list[ResultRecord]:
    """``GET /schedule/{id}/results``' read, on a long-poll thread (``context_of`` too: it may ask Redis)."""
    ctx = context_of(request)
    ctx.delivery.info(schedule_id)  # 404 for an unknown schedule rather than an empty page forever
    return _read(ctx, schedule_id, after, bounds, wait_ms)


def _read(
    ctx: Context, schedule_id: str, after: str, bounds: tuple[int, int], wait_ms: int
) -> list[ResultRecord]:
    """Read results, blocking in slices shorter than the Redis socket timeout until one arrives;
    ``bounds``: the page's most results and most bytes of them."""
    deadline = time.monotonic() + wait_ms / 1000.0
    slice_ms = max(1, int(ctx.settings.redis_timeout_s * 500))
    while True:
        remaining_ms = int((deadline - time.monotonic()) * 1000)
        block = min(slice_ms, remaining_ms) if remaining_ms > 0 else None
        records = ctx.delivery.read_results(
            schedule_id, after, bounds[0], block_ms=block, max_bytes=bounds[1]
        )
        if records or block is None:
            return records
