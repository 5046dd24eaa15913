"""The sidecar's local pull mode: a worker process that drives its engine itself asks for work here.

Some rollout workers cannot be fed over HTTP (the engine runs in-process, as in veRL's hybrid
engine or an SGLang ``Engine`` object). For them the sidecar serves on loopback:

* ``GET /next`` -> 200 with one item and its lease (``schedule_id``, ``key``, ``token``, ``item``,
  and ``params``: the sampling fields to generate this sample with, its seed offset as the push
  mode's), or 204 when there is nothing to do now (``?wait_s=`` long-polls up to 30 s);
* ``POST /done`` with ``schedule_id``, ``key``, ``token``, ``output_tokens`` (and optionally
  ``finish_reason``, ``output``, ``wall_time_s``, ``reward``, ``extra``) -> 200 ``{"outcome":
  "accepted"|"duplicate"}``, or 409 ``{"outcome": "stale"}`` when the lease was lost and 404
  ``{"outcome": "unknown_schedule"}`` when the schedule is gone (drop the result either way);
  repeating a ``/done`` whose reply was lost is safe;
* ``POST /fail`` with ``schedule_id``, ``key``, ``token``, ``reason`` -> the item is retried or
  dead-lettered (a killed predecessor's lease too, while Redis holds its token), else ``stale``;
* ``GET /leases`` -> the leases handed to the worker and those lost since the last call (stop them);
* ``GET /metrics`` -> its counters for Prometheus, live (``service.sidecar.metrics``);
* ``POST /reset`` -> ``{"released", "dead_lettered"}``: hand back every lease held, attempts refunded
  (an item the worker was handed only its first time back so: one that kills the worker at every
  run is dead-lettered after ``max_attempts``): a worker process calls it when it starts, so what its
  previous incarnation held (it crashed and was restarted) goes back to the queue at once instead of
  being kept alive by the new process's calls (one process a sidecar).

What a killed predecessor of the sidecar itself held (SIGKILL, an OOM kill) is handed back by the
sidecar at its own start, as a push sidecar does (``takeover``; ``pull_state``): ``/next`` hands out
nothing and ``/ready`` answers 503 ``taking over`` until then (at most the presence TTL, 5 s).

The sidecar claims, steals, heartbeats and completes on the worker's behalf, within the same slot and
KV admission limits as the push mode. It keeps leases alive only while the worker shows signs of
life: if it calls none of these endpoints for ``idle_timeout_s``, heartbeats stop and its leases
lapse, so a dead worker process is noticed even though the sidecar lives on; an item one that lives
on holds unreported past its bound (``holds``) is reported failed and requeued. Once SIGTERM arrives
nothing more is claimed (a long-poll in flight answers 204), requests in flight get the drain timeout
(``launch.run_pull``), and what is held is handed back within ``release_within_s``, Redis down or not.

It serves from before it reaches Redis (``Connecting``): a Redis or Redis Cluster down at start-up is
waited for (``launch.connect``) while ``GET /health`` answers ``connecting`` (an outage a restart
cannot fix must not fail a liveness probe), ``GET /ready`` answers 503 and every other endpoint 503
``{"error"}`` with ``Retry-After`` (retry: a ``/done`` dropped on it was run again after the takeover).

Here are the routes the worker calls (``pull_probes`` has the probes' and the scraper's, which are no
sign of its life); how their errors are answered is ``pull_problems``'s, and the bookkeeping behind
them (the worker's signs of life, what it lost, the hold bound, the session while it connects)
``pull_state``'s, with ``connecting``'s before Redis first answers.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Annotated, Any

import redis
from fastapi import APIRouter, Depends, FastAPI, Query, Request, Response
from fastapi.responses import JSONResponse

from service.body_encoding import Utf8BodyRoute
from service.delivery.errors import REDIS_FAILED
from service.delivery.outcomes import CompletionOutcome, ReleaseOutcome
from service.delivery.records import DeliveryItem, TrajectoryResult
from service.hosts.allow_list import HostAllowList
from service.limits import BodyLimitMiddleware
from service.problems.details import clipped
from service.sidecar.connecting import Connecting
from service.sidecar.hand_backs import say_handed_back
from service.sidecar.hang_up import hang_up
from service.sidecar.holdings import lease_id
from service.sidecar.holds import DEFAULT_HOLD_TIMEOUT_S
from service.sidecar.hurry import Hurry
from service.sidecar.pull_bodies import AboveCapError, DoneBody, FailBody
from service.sidecar.pull_drain import DrainBoundMiddleware, InFlightRequests
from service.sidecar.pull_probes import add_probes
from service.sidecar.pull_problems import PROBLEMS, cut_short, misdirected, problem, too_large
from service.sidecar.pull_state import MAX_WAIT_S, PullState, lease_json
from service.sidecar.session import WorkerSession
from service.sidecar.supervision import LoopDiedError

MAX_BODY_BYTES = 16 * 1024 * 1024  # a /done carries one output: far below this; more is a mistake


class ResendsUnansweredError(redis.RedisError):
    """``POST /reset`` found a report still in flight, or a kept ``/done`` or ``/fail`` still
    unanswered, once its bound ran out: Redis is stalled or down. A ``RedisError``: 503 with
    ``Retry-After`` (``pull_problems``), as any report Redis does not answer; the retry sends it again."""

    def __init__(self, unsent: int, within_s: float) -> None:
        super().__init__(
            f"{unsent} report(s) Redis has not answered after {within_s:.1f}s;"
            " nothing handed back: retry POST /reset"
        )


async def pull_state(request: Request) -> PullState:
    """The app's ``PullState`` (a dependency: every route below is a sign of the worker's life).

    A worker back from a quiet spell may have lost leases meanwhile: they are heartbeated before it
    is answered, so ``/leases`` lists them lost (not held) and ``/next`` sees their slots free, instead
    of until the next heartbeat a third of a lease TTL later."""
    state: PullState = request.app.state.pull
    resumed = state.idle() and state.connected
    state.touch()
    if resumed:
        await state.beat()
    return state


Pull = Annotated[PullState, Depends(pull_state)]


router = APIRouter(route_class=Utf8BodyRoute)
add_probes(router)  # /health, /ready and /metrics: the probes' and the scraper's (pull_probes)


@router.get("/next", response_model=None)
async def next_item(
    state: Pull, wait_s: Annotated[float, Query(ge=0.0, le=MAX_WAIT_S, allow_inf_nan=False)] = 0.0
) -> dict[str, Any] | Response:
    """One item to generate with its lease, or 204 when there is none now (long-polls ``wait_s``; a
    NaN or infinite one is refused as not finite, where it was told to be at most 30, the wrong cause)."""
    held = await state.next_item(wait_s)
    state.touch()
    return Response(status_code=204) if held is None else lease_json(held)


@router.post("/done")
async def done(body: DoneBody, state: Pull) -> JSONResponse:
    """Report a finished item: accepted once, ``duplicate`` on a repeat, 409 ``stale`` when lost."""
    async with state.reporting(body.schedule_id, body.key, body.token) as session:
        return await _complete(body, state, session)


async def _complete(body: DoneBody, state: PullState, session: WorkerSession) -> JSONResponse:
    """``/done`` once the session exists: the lease held here, or a killed predecessor's."""
    held = session.holdings.get((body.schedule_id, body.key, body.token))
    item = held.lease.item if held is not None else await _published_item(session, body)
    if item is not None and body.output_tokens > item.max_new_tokens:
        raise AboveCapError(body.output_tokens, item.max_new_tokens)
    extra, wall_time_s = dict(body.extra), body.wall_time_s
    if item is not None:  # what the trainer's actuals need and the worker need not repeat
        extra.setdefault("prompt_tokens", item.prompt_tokens)
        extra.setdefault("max_new_tokens", item.max_new_tokens)
    if held is not None and "concurrency" not in extra:  # what the worker does not say, the sidecar measured
        extra["concurrency"] = round(session.holdings.mean_concurrency(held), 3)
        wall_time_s = session.holdings.held_for(held)  # over the interval the mean is taken
        kept = held.unanswered  # a retry: the span up to the first /done, not the outage after it
        if kept is not None and "concurrency" in kept.extra:
            extra["concurrency"], wall_time_s = kept.extra["concurrency"], kept.wall_time_s
    result = TrajectoryResult(
        output_tokens=body.output_tokens,
        finish_reason=body.finish_reason,
        wall_time_s=wall_time_s,
        output=body.output,
        reward=body.reward,
        extra=extra,
    )
    failed: ReleaseOutcome | None = None  # the answer to its unanswered failure report, sent again
    if held is not None:  # a report Redis does not answer (503) keeps the lease for the retry
        landed = held.unanswered or result  # a duplicate's: what an earlier send of it stored
        outcome, failed = await session.complete_held(held, result, keep_unanswered=True)
        state.landed(held, result if outcome is CompletionOutcome.ACCEPTED else landed, outcome)
    else:
        outcome = await session.complete_key(body.schedule_id, body.key, body.token, result, held=False)
        if outcome is CompletionOutcome.ACCEPTED:  # a killed predecessor's lease: ends here
            state.generation.observe(wall_time_s)
    if outcome is CompletionOutcome.STALE:
        return JSONResponse(await _stale(state, body, held is not None, failed), status_code=409)
    return JSONResponse({"outcome": outcome.value})


async def _published_item(session: WorkerSession, body: DoneBody) -> DeliveryItem | None:
    """The item of a report for a lease this process does not hold: a restarted sidecar takes a
    report of its predecessor's lease that is still current (until its hand-back), and such a result
    went out without the item's ``prompt_tokens`` and cap, which the trainer's actuals need (a
    trainer's ``report_results`` raised on it). None when Redis does not say: the report goes on."""
    try:
        return await asyncio.to_thread(session.delivery.stored_item, body.schedule_id, body.key)
    except REDIS_FAILED:
        return None  # the completion below retries through the outage, as it did


@router.post("/fail")
async def fail(body: FailBody, state: Pull) -> dict[str, Any]:
    """Report an item the worker could not run: retried elsewhere, or dead-lettered by attempts."""
    async with state.reporting(body.schedule_id, body.key, body.token) as session:
        held = session.holdings.get((body.schedule_id, body.key, body.token))
        done: CompletionOutcome | None = None  # the answer to its unanswered /done, sent again
        if held is not None:
            outcome, done = await session.fail_held(held, body.reason, keep_unanswered=True)
        else:  # a killed predecessor's lease still current is failed as a held one: Redis decides
            outcome = await session.fail_key(body.schedule_id, body.key, body.token, body.reason)
        if outcome is ReleaseOutcome.STALE:
            return await _stale(state, body, held is not None, done=done)
        return {"outcome": outcome.value}


async def _stale(
    state: PullState,
    body: DoneBody | FailBody,
    held: bool,
    failed: ReleaseOutcome | None = None,
    done: CompletionOutcome | None = None,
) -> dict[str, str]:
    """A report refused for its lease, saying which lease and why: a worker that reports a key or
    token it was never handed (its bug) is told so, not only that a lease was lost; one whose
    schedule the trainer cancelled is told that (one ``HEXISTS``, remembered once true); one whose
    failure report, sent before it and unanswered then, took the lease (``failed``: answered again,
    DUPLICATE) is told that the item was failed, as it was counted; and one whose ``/done``, sent
    before and unanswered, took it (``done``) that its result was taken."""
    key, schedule_id = clipped(body.key), clipped(body.schedule_id)  # a megabyte of key: its start
    lease = f"key={key!r} (schedule_id={schedule_id!r}, token={body.token})"
    if await state.session.found_cancelled(body.schedule_id):
        why = "its schedule was cancelled by the trainer"
    elif failed is not None and failed is not ReleaseOutcome.STALE:
        why = "its failure report, sent before, took it: the item was failed (retried or dead-lettered)"
    elif done is not None and done is not CompletionOutcome.STALE:
        why = "its result, sent before by /done, took it: the item is done, its result kept"
    elif held:
        why = "its lease was lost before this report (it lapsed, or another worker holds it now)"
    else:
        why = (
            "not a lease this sidecar holds (lost, held past its hold bound, already reported, or never"
            " handed out by /next; GET /leases lists those held)"
        )
    return {"outcome": "stale", "error": f"{lease}: {why}; drop it"}


@router.get("/leases")
async def leases(state: Pull) -> dict[str, Any]:
    """The leases handed to the worker, and those lost since the last call (stop working on them)."""
    lost = list(state.lost)
    state.lost.clear()
    # not those claimed ahead of /next, nor one listed lost whose failure report is sent again
    return {"held": [lease_json(h) for h in state.session.holdings.handed()], "lost": lost}


@router.post("/reset")
async def reset(state: Pull) -> dict[str, int]:
    """Hand back every held lease: a (re)started worker process's first call, for what the previous
    one held and will never report. What it was handed is refunded its attempt only its first time
    back so (``Delivery.release(died=...)``): an item that kills the worker at every run is
    dead-lettered after ``max_attempts``, not handed to each new process first; what was claimed
    ahead of ``/next`` never reached it, and is refunded always.

    A ``/done`` still in flight (its sender died before the answer; Redis may be down) settles first:
    released beside it, a finished result could be thrown away and the item run again; and one
    that fails leaves its lease held, to be handed back here, its result sent once more first (a
    release of it was refused, or requeued a finished item). So does an unanswered failure report
    (a ``/fail``, or the hold bound's): handed back, a landed one's lease was refused and counted
    ``lost``, and one that had not landed was released, its attempt refunded. A ``/next``
    long-polling for the dead process ends first, with 204: an item it took after this would reach
    nobody.

    The wait for those in flight and the resends keep to the shutdown's bound (``release_within_s``),
    together: unbounded, on a stalled Redis the reset waited out an in-flight report's own retry
    window, and a socket timeout per kept result. One still in flight or unanswered then is a 503 to
    retry (``ResendsUnansweredError``), nothing handed back: released, a landed result's lease was
    refused and counted ``lost``, and one that had not landed ran again."""
    await state.reset_polls()
    deadline = time.monotonic() + state.release_within_s  # one bound for the wait and the resends
    if not await _reports_settled(state, deadline):
        in_flight = sum(1 for h in state.session.holdings.all() if h.completing)
        raise ResendsUnansweredError(in_flight, state.release_within_s)
    await state.resend_kept(within_s=max(0.0, deadline - time.monotonic()))  # a result, not a rerun
    if unsent := len(state.unsent()):
        raise ResendsUnansweredError(unsent, state.release_within_s)
    holdings, held = state.session.holdings, state.session.holdings.all()
    ahead = [h for h in held if not h.started]
    await state.session.release(ahead)  # claimed ahead: never reached it
    # one whose /done came in while that hand-back waited on Redis was reported: its report decides
    handed = [h for h in held if h.started and not h.completing and holdings.get(lease_id(h.lease)) is h]
    dead = await state.session.release(handed, died="its worker process")
    return {"released": len(ahead) + len(handed) - dead, "dead_lettered": dead}


async def _reports_settled(state: PullState, deadline: float) -> bool:
    """Wait until no ``/done`` or ``/fail`` is in flight (``completing``), up to ``deadline``
    (``time.monotonic``): False if one still is. Unbounded, a reset on a stalled Redis waited out
    that report's own retry window (``retry_for_s``, 60 s by default), past the release grace that
    bounds the resends after it."""
    while any(h.completing for h in state.session.holdings.all()):
        if time.monotonic() >= deadline:
            return False
        await asyncio.sleep(0.05)
    return True


def create_pull_app(
    session: WorkerSession | Connecting,
    idle_timeout_s: float = 60.0,
    stopping: Callable[[], bool] = lambda: False,
    release_within_s: float = 2.0,
    hold_timeout_s: float = DEFAULT_HOLD_TIMEOUT_S,
    on_failure: Callable[[LoopDiedError], None] = lambda _: None,
    drain_s: float = 20.0,
    hurry: Hurry | None = None,
) -> FastAPI:
    """Build the loopback pull API around ``session`` (or one still ``Connecting``, made while it
    serves); heartbeats run while the server runs, and ``on_failure`` is told if they die (the
    server is to stop: ``launch.run_pull``). Once ``stopping()``, requests still running after
    ``drain_s`` are given up (``pull_drain``); once ``hurry`` is set (a second signal), at once, and
    what is held gets its grace (``hurry.py``)."""
    hurry = hurry or Hurry(grace_s=release_within_s)
    state = PullState(session, idle_timeout_s, stopping, release_within_s, hold_timeout_s)
    state.loops.on_death = on_failure
    pending = session if isinstance(session, Connecting) else None
    requests = InFlightRequests()  # what a shutdown's drain gives up on is a warning, not an error

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        state.begin()  # a session given: the takeover gates /next before the first request
        bound = requests.bound(stopping, drain_s, hurry.is_set)  # the drain's limit on requests in flight
        tasks = [asyncio.create_task(state.run(pending)), asyncio.create_task(bound)]
        yield
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if state.connected:  # whatever the worker held, then the presence key, in one grace
            until = min(requests.ends_by(), time.monotonic()) + release_within_s
            died = "its sidecar" if state.loops.dead is not None else ""  # a bug: refunded once per item
            with contextlib.suppress(TimeoutError):  # a second signal's grace cuts each of them
                await hurry.bound(state.resend_kept(within_s=max(0.0, until - time.monotonic())), until)
            with contextlib.suppress(TimeoutError):  # an unreadable item's report kept at its claim
                await hurry.bound(state.session.resends.settle(until - time.monotonic()), until)
            held = state.session.holdings.all()
            say_handed_back(held, "held")
            await state.session.hand_back(held, until - time.monotonic(), died, hurry)
            with contextlib.suppress(TimeoutError):
                await hurry.bound(state.leave(until - time.monotonic()), until)
            hang_up(state.session.delivery)

    # a trailing slash is a 404 naming the path without it (``_http_error``), not Starlette's 307 to an
    # absolute URL built from the Host header, which a worker's client may not follow for a POST
    app = FastAPI(title="rollout-scheduler sidecar pull API", lifespan=lifespan, redirect_slashes=False)
    app.state.pull = state
    app.include_router(router)
    for kind in PROBLEMS:
        app.add_exception_handler(kind, _problem)
    app.add_middleware(BodyLimitMiddleware, max_bytes=MAX_BODY_BYTES, refusal=too_large)
    app.add_middleware(HostAllowList, allowed=(), refusal=misdirected)  # loopback names only, no auth

    def cut() -> Response:  # at the drain's timeout, or at a second signal
        return cut_short(drain_s, hurry.is_set())

    app.add_middleware(DrainBoundMiddleware, requests=requests, refusal=cut)  # outermost: added last
    return app


async def _problem(request: Request, exc: Exception) -> JSONResponse:
    """The answer ``pull_problems`` gives ``exc`` on this API's routes."""
    return problem(request, exc, router.routes)
