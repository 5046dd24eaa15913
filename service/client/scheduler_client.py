"""A small Python client for trainers: submit a step's batch, wait for its results, report actuals.

One ``SchedulerClient`` per trainer process; it keeps a connection pool. Every method returns the
API's typed response models (``service.api.schemas``), and every refusal raises ``SchedulerAPIError``
carrying the problem document (status, detail, offending field), so a training loop can tell a bad
batch (4xx: fix the request) from an outage (503: retry). A service that cannot be reached at all
(refused, reset, timed out) is ``ServiceUnreachableError``, a retryable ``SchedulerAPIError`` too, so
one ``except`` serves the loop. docs/client.md shows it in a veRL-style loop.
"""

from __future__ import annotations

import functools
import math
import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import httpx
from pydantic import BaseModel, TypeAdapter, ValidationError

from service.api.learning_schemas import ActualReport, ActualsAccepted, ModelStatus, RetrainResponse
from service.api.progress_schemas import (
    RESULTS_MAX_WAIT_MS,
    CancelResponse,
    ProgressResponse,
    ResultEntry,
    ResultsPage,
)
from service.api.schemas import ScheduleId, ScheduleRequest, ScheduleResponse
from service.auth.tokens import check_token
from service.client.actuals import actual_from_result, summed
from service.client.args import (
    bodies_of,
    body_of,
    flag,
    http_timeout,
    mapping,
    per_request,
    refused,
    seconds,
    sizes,
    text,
    whole,
)
from service.client.steps import check_whole, whole_groups
from service.client.tls import verified_context
from service.client.wire import (
    DEADLINE_HEADER,
    SchedulerAPIError,
    ServiceUnreachableError,
    encoded,
    first_fault,
    foreign,
    refusal,
)
from service.problems.details import clipped, error_words

T = TypeVar("T")
M = TypeVar("M", bound=BaseModel)
OUTAGE_PAUSE_S = 0.5  # the first retry's pause, before jitter; each next one doubles, to the cap
MAX_BACKOFF_S = 8.0  # the longest pause the client chooses itself: a service back is found within it
DEADLINE_GRACE_S = 1.0  # a request of ``wait`` may run past its deadline by this much, no more
MAX_PAUSE_S = 30.0  # the longest a Retry-After is waited out before the next try
RESULTS_PAGE = 1_000  # results per GET .../results page, the service's default
ACTUALS_CHUNK = 1_000  # reports per POST /actuals: a step's results stay well under a proxy's body limit


def check_url(url: str) -> str:
    """``url`` if it names an HTTP service; ``ValueError`` saying why not. Checked when the client is
    built: a URL without its scheme (``scheduler:8000``) or with a bad port otherwise failed only at
    the first request, as a retryable ``ServiceUnreachableError``, so a typo was retried as an outage
    (``wait`` for 60 s, a trainer's retry loop for as long as it backs off)."""
    try:
        parsed = httpx.URL(url)
    except httpx.InvalidURL as error:
        raise ValueError(f"url={url!r}: {error}") from None
    if parsed.scheme not in ("http", "https") or not parsed.host or (parsed.port or 0) > 65535:
        raise ValueError(f"url={url!r}: expected http://HOST[:PORT] or https://HOST[:PORT]")
    return url


@dataclass(frozen=True)
class StepResults:
    """Everything a finished schedule produced."""

    results: list[ResultEntry]  # one per accepted trajectory, in completion order
    progress: ProgressResponse  # final counts, including dead-lettered items


class SchedulerClient:
    """Client of one rollout-scheduler service."""

    def __init__(
        self,
        url: str,
        token: str | None = None,
        timeout_s: float = 60.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        token = text("token", "" if token is None else token)
        token = check_token(token.strip())  # read from a file, a token often ends in a newline
        check_url(url)
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._timeout_s = timeout_s = http_timeout("timeout_s", timeout_s)
        self._http = httpx.Client(  # the process's one TLS context: building one is ~34 ms of CPU
            base_url=url, headers=headers, timeout=timeout_s, transport=transport, verify=verified_context()
        )

    def __enter__(self) -> SchedulerClient:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the connection pool."""
        self._http.close()

    def schedule(
        self, request: ScheduleRequest | Mapping[str, Any], outage_s: float = 60.0
    ) -> ScheduleResponse:
        """Plan (and publish) one step; ``request`` is the ``POST /schedule`` body.

        A body that names its ``schedule_id`` is retried through retryable failures (a lost reply, a
        restart, a 503) for up to ``outage_s``: the service publishes an id once, so a retry whose
        first attempt got through returns that attempt's plan (``replayed`` true) rather than
        publishing the step twice; an older service answers it 409, raised as ``AlreadyPublishedError``.
        An id a DELETE withdrew before it was published raises ``WithdrawnError``: nothing to follow.
        A body without one is sent once, as a retry would publish a second copy of the work.

        Each attempt tells the service how long this client waits for it (``DEADLINE_HEADER``: its
        ``timeout_s``), so the service caps the plan's budget to answer within it, and refuses (504,
        retried as above) a plan it cannot publish by then rather than publish one nobody reads."""
        body = body_of("request", request, ScheduleRequest)  # a TypeError, before anything is sent
        seconds("outage_s", outage_s)  # a body without an id is sent once: a text passed unseen (user66)
        waits = {DEADLINE_HEADER: str(max(0, int(self._timeout_s * 1000)))}
        send = functools.partial(self._call, ScheduleResponse, "POST", "/schedule", json=body, headers=waits)
        return self._outlasting(send, None, outage_s) if body.get("schedule_id") else send()

    def progress(self, schedule_id: str, outage_s: float = 60.0) -> ProgressResponse:
        """Counts by state, overall and per worker. Only a read, so a retryable failure (a lost reply,
        a restart, Redis down) is retried for up to ``outage_s``, as ``wait`` retries it; a refusal
        (404: an unknown or expired step) is raised at once."""
        return self._outlasting(functools.partial(self._progress, schedule_id), None, outage_s)

    def _progress(self, schedule_id: str, deadline: float | None = None) -> ProgressResponse:
        """One ``GET /schedule/{id}``, not retried (``wait`` retries it within its own deadline)."""
        timeout = self._timeout_until(deadline)
        return self._call(ProgressResponse, "GET", _schedule_path(schedule_id), timeout=timeout)

    def results(
        self,
        schedule_id: str,
        after: str = "0-0",
        count: int = RESULTS_PAGE,
        wait_ms: int = 0,
        outage_s: float = 60.0,
    ) -> ResultsPage:
        """One page of accepted results after stream id ``after``, long-polling up to ``wait_ms``
        (the HTTP timeout is stretched by as much, so a long poll is never cut short as a timeout).
        Only a read, so a retryable failure is retried for up to ``outage_s``, as ``progress`` is:
        it was sent once, and a trainer paging results itself met a restart as an error."""
        after, count, wait_ms = text("after", after), whole("count", count), whole("wait_ms", wait_ms)
        read = functools.partial(self._results, schedule_id, after, count, wait_ms)
        return self._outlasting(read, None, outage_s)

    def _results(
        self, schedule_id: str, after: str, count: int, wait_ms: int, deadline: float | None = None
    ) -> ResultsPage:
        """One ``GET /schedule/{id}/results``, not retried (``wait`` retries it within its deadline)."""
        params = {"after": after, "count": count, "wait_ms": wait_ms}
        timeout = self._timeout_until(deadline, wait_ms / 1000.0)
        path = _schedule_path(schedule_id) + "/results"
        return self._call(ResultsPage, "GET", path, params=params, timeout=timeout)

    def cancel(self, schedule_id: str, outage_s: float = 60.0) -> CancelResponse:
        """Cancel a published step (``DELETE /schedule/{id}``): its queued and running items end, so
        the fleet moves on to the next step; results accepted before stay readable. The service
        answers a repeat with the first cancel's counts and changes nothing, so a retryable failure
        (a lost reply, a restart, Redis down) is retried for up to ``outage_s``, and a retry whose
        first attempt got through returns what that attempt answered. A step not published yet but
        in flight (a restarted trainer's, whose ``schedule`` is still in line or planning) is withdrawn:
        ``status == "withdrawn"`` (202), never published, and ended nothing. Unknown ids raise
        ``SchedulerAPIError`` (404) at once."""
        return self._outlasting(functools.partial(self._cancel, schedule_id), None, outage_s)

    def _cancel(self, schedule_id: str) -> CancelResponse:
        """One ``DELETE /schedule/{id}``."""
        return self._call(CancelResponse, "DELETE", _schedule_path(schedule_id))

    def wait(
        self, schedule_id: str, timeout_s: float | None = None, poll_ms: int = 1000, outage_s: float = 60.0
    ) -> StepResults:
        """Collect results until every trajectory is done, dead-lettered or cancelled (``TimeoutError``
        past the limit).

        Results are read while the step runs (long-polling the results stream), so the trainer can
        also consume them incrementally with ``results``; this call returns them all at the end. The
        progress is read first, so a finished step returns at once, and no long poll outlasts
        ``timeout_s`` or the service's longest (``RESULTS_MAX_WAIT_MS``, whatever ``poll_ms``: a
        longer one was refused, 422). Waiting only reads, and the step runs on without the service,
        so a retryable failure (a restart, Redis down) is retried for up to ``outage_s`` before it
        is raised. A ``timeout_s`` of ``math.inf`` waits as None does (it was an ``OverflowError``).
        """
        poll_ms = whole("poll_ms", poll_ms)
        limit_s = math.inf if timeout_s is None else seconds("timeout_s", timeout_s)
        deadline = None if limit_s == math.inf else time.monotonic() + limit_s  # inf: an OverflowError
        collected: list[ResultEntry] = []
        cursor = "0-0"
        while True:
            read_progress = functools.partial(self._progress, schedule_id, deadline)
            progress = self._outlasting(read_progress, deadline, outage_s)
            finished = progress.done + progress.failed + progress.cancelled >= progress.total
            left_ms = poll_ms if deadline is None else int(max(0.0, deadline - time.monotonic()) * 1000)
            wait_ms = 0 if finished else min(poll_ms, left_ms, RESULTS_MAX_WAIT_MS)  # longer: a 422
            read = functools.partial(self._results, schedule_id, cursor, RESULTS_PAGE, wait_ms, deadline)
            page = self._outlasting(read, deadline, outage_s)
            collected += page.results
            cursor = page.next
            if finished and len(collected) >= progress.done:
                return StepResults(results=collected, progress=progress)
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(
                    f"schedule {schedule_id}: {progress.done}/{progress.total} done after {timeout_s}s"
                )

    def _timeout_until(self, deadline: float | None, long_poll_s: float = 0.0) -> float:
        """One request's HTTP timeout: the client's (and the long poll it asks for), but not past
        ``wait``'s deadline by more than ``DEADLINE_GRACE_S``: a service that took the connection and
        never answered held each request for the whole ``timeout_s`` (60 s) before ``wait`` looked at
        its own, so ``wait(timeout_s=1)`` raised after a minute. The grace lets a long poll that
        ends at the deadline be answered rather than cut as a timeout."""
        full = self._timeout_s + long_poll_s
        if deadline is None:
            return full
        return min(full, max(0.0, deadline - time.monotonic()) + DEADLINE_GRACE_S)

    @staticmethod
    def _outlasting(call: Callable[[], T], deadline: float | None, outage_s: float) -> T:
        """``call()``, retried every ``OUTAGE_PAUSE_S`` while it fails retryably, for up to ``outage_s``;
        then its error is raised. Past ``deadline`` it is ``wait``'s own ``TimeoutError``, as promised."""
        seconds("outage_s", outage_s)  # compared only once a try failed: a text was a TypeError then
        failing_since: float | None = None
        tries = 0
        while True:
            try:
                return call()
            except SchedulerAPIError as error:
                tries += 1
                now = time.monotonic()
                failing_since = now if failing_since is None else failing_since
                if deadline is not None and now >= deadline and error.retryable:
                    raise TimeoutError(
                        f"the step's results were still unreadable at the deadline: {error}"
                    ) from error
                if not error.retryable or now - failing_since >= outage_s:
                    raise
                time.sleep(_pause(error, tries, now, failing_since + outage_s, deadline))

    def report_actuals(
        self,
        reports: Sequence[ActualReport | Mapping[str, Any]],
        chunk: int = ACTUALS_CHUNK,
        outage_s: float = 60.0,
        partial: bool = False,
    ) -> ActualsAccepted:
        """Report finished trajectories (actual lengths, finish reason, reward, wall time, worker).

        Sent ``chunk`` reports per request: a whole step's (up to 65,536) in one body could exceed
        the service's ``ROLLOUT_MAX_BODY_BYTES`` or a proxy's limit, a 413 no retry can cure. Each
        chunk that fails retryably (a lost reply, a restart, Redis down) is sent again for up to
        ``outage_s``: the service stores a report it already holds once, answering it as
        ``repeated``, so a retry of a chunk whose first reply was lost stores nothing twice. The
        answer sums the chunks' counts; ``stream_length`` and ``time_scales`` are the latest.
        Reports of a step cancelled before it finished are refused (409 ``step-cut-short``, nothing
        of that chunk stored) unless ``partial``: they are its short trajectories alone."""
        chunk, partial = per_request("chunk", chunk), flag("partial", partial)
        body = bodies_of("reports", reports, ActualReport)  # one report alone, not in a list: a TypeError
        answers = [
            self._outlasting(
                functools.partial(self._post_actuals, body[start : start + chunk], partial), None, outage_s
            )
            for start in range(0, max(len(body), 1), chunk)  # none: one empty request, refused as such
        ]
        return summed(answers)

    def _post_actuals(self, chunk: list[dict[str, Any]], partial: bool) -> ActualsAccepted:
        body = {"actuals": chunk, "partial": True} if partial else {"actuals": chunk}  # as older clients
        return self._call(ActualsAccepted, "POST", "/actuals", json=body)

    def report_results(
        self,
        step: int,
        finished: StepResults,
        prompt_tokens: Mapping[str, int] | None = None,
        rewards: Mapping[str, float] | None = None,
        chunk: int = ACTUALS_CHUNK,
        partial: bool = False,
        group_sizes: int | Mapping[str, int] | None = None,
    ) -> ActualsAccepted | None:
        """Report a finished step's results as actuals (the predictor's next training rows).

        ``prompt_tokens`` maps prompt id to prompt length where the sidecar did not record it;
        ``rewards`` maps trajectory key (``prompt_id#sample_idx``) to the reward the trainer computed.
        Results an engine aborted (neither ``stop`` nor ``length``) say nothing about length: skipped.
        Sent ``chunk`` reports a request, each retried through an outage (``report_actuals``).
        A step cancelled before it finished, or not finished, raises ``PartialStepError`` and sends
        nothing: its results are its short trajectories alone (``service/client/steps.py``);
        ``partial=True`` reports them anyway (and tells the service so). ``group_sizes`` (samples per
        prompt: one ``n`` for all, or per prompt id) leaves out the prompts with fewer results than
        that, a group cut by the cancel (or a dead letter), whose finished samples are its short ones.
        Returns the service's answer, or None when nothing was left to send (no group whole, every
        result aborted): no request is made then.
        """
        if not isinstance(finished, StepResults):  # its progress, say: an AttributeError of .progress
            raise refused("finished", "the StepResults of wait()", finished)
        step, group_sizes = whole("step", step), sizes("group_sizes", group_sizes)
        chunk = per_request("chunk", chunk)  # here: a step with nothing to send returns before its use
        partial = flag("partial", partial)
        known, scored = mapping("prompt_tokens", prompt_tokens), mapping("rewards", rewards)
        if not partial:
            check_whole(finished.progress)
        sid = finished.progress.schedule_id  # tells the service the profiles the step was planned with
        kept = finished.results if group_sizes is None else whole_groups(finished.results, group_sizes)
        reports = [
            report
            for entry in kept
            if (report := actual_from_result(step, entry, known, scored, sid)) is not None
        ]
        return self.report_actuals(reports, chunk=chunk, partial=partial) if reports else None

    def models(self, outage_s: float = 60.0) -> ModelStatus:
        """The predictor serving now (``v<N>`` or ``fallback``), the stored versions, the history.
        Only a read, so a retryable failure is retried for up to ``outage_s``, as ``progress`` is."""
        return self._outlasting(functools.partial(self._call, ModelStatus, "GET", "/models"), None, outage_s)

    def retrain(self) -> RetrainResponse:
        """Fit a new predictor version on the actuals history (the newest ``ROLLOUT_ACTUALS_MAXLEN``),
        and swap it in. Sent once, never retried, unlike the reads: each call that gets through
        trains and stores a new version, so a retry of one whose reply was lost would store a second;
        a failure is raised for the caller to decide (``models()`` shows whether it got through)."""
        return self._call(RetrainResponse, "POST", "/models/retrain")

    def _call(self, model: type[M], method: str, path: str, **kwargs: Any) -> M:
        """Send one request; its answer as ``model``, or ``SchedulerAPIError``: for a refusal, and for
        any answer that is not the service's (a redirect, another server's page; ``foreign``)."""
        if "json" in kwargs:
            kwargs["content"] = encoded(kwargs.pop("json"))
            kwargs["headers"] = {**kwargs.get("headers", {}), "content-type": "application/json"}
        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.TransportError as error:
            raise ServiceUnreachableError(error) from error
        if response.status_code >= 400:
            raise refusal(response)
        if not response.is_success:  # a 3xx: httpx follows none, and its empty body is no answer
            raise foreign(response, f"redirected to {response.headers.get('location', 'nowhere')!r}")
        try:
            return model.model_validate_json(response.content)
        except ValidationError as error:
            raise foreign(response, f"not the scheduler's {model.__name__}: {first_fault(error)}") from None


def _schedule_path(schedule_id: str) -> str:
    """``/schedule/{id}``, for an id the service takes (``ScheduleId``: docs/api.md); ``ValueError``
    naming ``schedule_id`` for any other, before a request is sent. Sent as is, an id holding ``#``,
    ``?`` or ``/`` named another path (``step#1`` read step's progress or results, or cancelled it),
    and ``/`` stays one even percent-encoded: the server decodes the path before it routes."""
    text("schedule_id", schedule_id)  # None or a number: a TypeError, not a ValueError quoting 'None'
    try:
        return f"/schedule/{_SCHEDULE_ID.validate_python(schedule_id)}"
    except ValidationError as error:
        why = error_words(error.errors()[0])  # the characters an id holds, in words (user67)
        raise ValueError(f"schedule_id={clipped(str(schedule_id))!r}: {why}") from None


_SCHEDULE_ID: TypeAdapter[str] = TypeAdapter(ScheduleId)


def _pause(
    error: SchedulerAPIError, tries: int, now: float, give_up_at: float, deadline: float | None
) -> float:
    """How long to wait before try ``tries + 1``: an exponential backoff (``OUTAGE_PAUSE_S`` doubled
    each try, to ``MAX_BACKOFF_S``) with equal jitter (half of it drawn at random), or the service's
    ``Retry-After`` when it asks for longer (at most ``MAX_PAUSE_S``); never past the outage
    allowance or the caller's deadline, so a retried call stays bounded whatever the header says.
    A fixed 0.5 s sent 120 tries a minute per call at a service on its way back up, and every
    trainer cut off by the same restart retried on the same beat."""
    backoff = min(MAX_BACKOFF_S, OUTAGE_PAUSE_S * 2.0 ** min(tries - 1, 16))
    jittered = backoff / 2 + random.uniform(0.0, backoff / 2)
    wanted = min(MAX_PAUSE_S, max(jittered, error.retry_after_s or 0.0))
    limit = give_up_at if deadline is None else min(give_up_at, deadline)
    return max(0.0, min(wanted, limit - now))
