"""The client's wire: a request body encoded, and an answer that is no plan or count turned into the
error it amounts to (a refusal with its problem document, an outage, another server's page).

Kept apart from ``service/client/scheduler_client.py``, which decides what to send and what to retry: the
exceptions here are what a trainer catches (re-exported there, where they were first defined),
and each says whether a retry can cure it (``retryable``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import httpx
from pydantic import ValidationError

OPERATOR_ONLY = "redis-too-old"  # a 503 problem that no retry cures (service/problems/table.py)
WITHDRAWN = "step-withdrawn"  # the 409 of an id a DELETE withdrew before publish (service/problems/table.py)
# How long the client waits for a POST /schedule, in ms (service/pipeline/deadline.py's HEADER, whose
# module imports the server's problem table: named again here, a test holds the two equal)
DEADLINE_HEADER = "X-Envoy-Expected-Rq-Timeout-Ms"


class SchedulerAPIError(RuntimeError):
    """The service refused a request; ``problem`` is its RFC 9457 body."""

    def __init__(self, status: int, problem: Mapping[str, Any], retry_after_s: float | None = None) -> None:
        self.status = status
        self.problem = dict(problem)
        self.field: str | None = problem.get("field")
        self.retry_after_s = retry_after_s  # the answer's Retry-After, in seconds, when it sent one
        super().__init__(f"{status} {problem.get('title', '')}: {problem.get('detail', '')}".strip())

    @property
    def retryable(self) -> bool:
        """Whether retrying the same request later can succeed (Redis down, overload); not a Redis
        too old for the service, which only an upgrade and a restart of the service fix."""
        if str(self.problem.get("type", "")).endswith(f"/{OPERATOR_ONLY}"):
            return False
        return self.status in (429, 502, 503, 504)


class ServiceUnreachableError(SchedulerAPIError):
    """No answer from the service (connection refused or reset, a timeout): retry later."""

    def __init__(self, error: httpx.TransportError) -> None:
        detail = f"{type(error).__name__}: {error}"
        super().__init__(0, {"title": "Service unreachable", "detail": detail})
        self.args = (f"service unreachable ({detail})",)  # no HTTP status to lead with

    @property
    def retryable(self) -> bool:
        """Always: nothing was refused, nothing is known to be wrong with the request."""
        return True


class AlreadyPublishedError(SchedulerAPIError):
    """409 on ``schedule_id``: a step is out under the id this request chose, and the service cannot
    send its plan again: it was cancelled (the detail says so), or published by a release from before
    answers were stored (an older replica, a mixed-version roll), which answers every retry so.
    Follow it (``wait``); ``progress.cancelled`` of the wait says when it was cancelled, and the step
    must be sent under a new id. A current service answers a retry of a published step with its first
    plan instead (``ScheduleResponse.replayed``). Not a withdrawn id's 409 (``WithdrawnError``)."""

    @property
    def schedule_id(self) -> str:
        """The id the step is out under."""
        return str(self.problem.get("value", ""))


class WithdrawnError(SchedulerAPIError):
    """409 ``step-withdrawn`` on ``schedule_id``: a DELETE withdrew the id while its step was in
    flight, before it was published, so no step is out under it: there is nothing to follow (a
    ``wait`` would get a 404), and the step must be sent under a new id. Apart from
    ``AlreadyPublishedError``, not a kind of it: a loop that follows that error with ``wait`` would
    wait on nothing. Raised to the withdrawn request itself and to every later one under the id."""

    @property
    def schedule_id(self) -> str:
        """The withdrawn id, taken until its retention passes (or the request it met could publish)."""
        return str(self.problem.get("value", ""))


def encoded(body: Any) -> bytes:
    """``body`` as JSON in UTF-8, for the service to judge: what UTF-8 cannot carry (a lone UTF-16
    surrogate, a dataset string cut inside an emoji) is sent escaped (``\\ud83d``), and a NaN or an
    infinity as JSON's extension (``NaN``), so the service refuses it with a 422 naming its field
    (``batch.items[3].prompt``, ``actuals[1].reward``). httpx's own encoding raised a bare
    ``UnicodeEncodeError`` or ``ValueError`` naming nothing. Only such a body is escaped: escaping
    every non-ASCII character would double a Chinese prompt's bytes against the body limit."""
    text = json.dumps(body, ensure_ascii=False, separators=(",", ":"))
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(body, separators=(",", ":")).encode("ascii")


def refusal(response: httpx.Response) -> SchedulerAPIError:
    """The error a 4xx or 5xx answer amounts to, carrying its problem document. A body that is no
    JSON, or JSON nested past the decoder's depth (``RecursionError``, which escaped every call as
    itself, a proxy's or a broken server's page), is read as text."""
    try:
        problem = response.json()
    except (ValueError, RecursionError):
        problem = None
    if not isinstance(problem, dict):  # a proxy's page, or JSON that is no problem document
        problem = {"title": response.reason_phrase, "detail": response.text[:500]}
    kind: type[SchedulerAPIError] = SchedulerAPIError
    if withdrawn(response.status_code, problem):
        kind = WithdrawnError
    elif already_published(response.status_code, problem):
        kind = AlreadyPublishedError
    return kind(response.status_code, problem, retry_after(response))


def foreign(response: httpx.Response, why: str) -> SchedulerAPIError:
    """A success or redirect that is no answer of the service: the URL names something else (an
    ingress sending HTTP to HTTPS, a dashboard on the same host). Raised as a ``SchedulerAPIError``
    that no retry cures (its status is no 429 or 5xx), so the loop's one ``except`` catches it and
    the detail says what answered; it was a ``JSONDecodeError`` or pydantic's ``ValidationError``."""
    request = response.request
    detail = f"{request.method} {request.url} answered {response.status_code}, {why}"
    return SchedulerAPIError(response.status_code, {"title": "Not the scheduler's answer", "detail": detail})


def first_fault(error: ValidationError) -> str:
    """The first of the answer's faults, with its location: enough to tell what answered."""
    first = error.errors()[0]
    where = ".".join(str(part) for part in first["loc"]) or "body"
    return f"{where}: {first['msg']} ({error.error_count()} faults)"


def already_published(status: int, problem: Any) -> bool:
    """The service's answer to a step sent again under an id it already published (or withdrew:
    ``withdrawn`` is asked first)."""
    return status == 409 and isinstance(problem, dict) and problem.get("field") == "schedule_id"


def withdrawn(status: int, problem: Any) -> bool:
    """The service's answer to a step sent under an id a DELETE withdrew before it was published:
    the 409 on ``schedule_id`` whose problem type is ``step-withdrawn``. A release from before that
    type answered it as ``conflict``, read as ``already_published``."""
    kind = problem.get("type", "") if isinstance(problem, dict) else ""
    return already_published(status, problem) and str(kind).endswith(f"/{WITHDRAWN}")


def retry_after(response: httpx.Response) -> float | None:
    """The seconds a ``Retry-After`` header asks for (the HTTP-date form is ignored: None)."""
    try:
        return max(0.0, float(response.headers.get("retry-after", "")))
    except ValueError:
        return None
