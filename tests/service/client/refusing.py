"""A client whose every request is recorded and refused, and a finished step of no result: what the
argument-check tests (user65's, mutants66's) each wrote out. An argument check passes only if nothing
was sent, so each test reads the record."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import httpx

from service.api.progress_schemas import ProgressResponse
from service.client import SchedulerClient
from service.client.scheduler_client import StepResults

COUNTS = {"total": 0, "queued": 0, "running": 0, "done": 0, "failed": 0}
PROGRESS = ProgressResponse.model_validate(
    {**COUNTS, "schedule_id": "s1", "workers": {}, "dead_letter": [], "dead_letters": []}
)
NOTHING = StepResults([], PROGRESS)  # a finished step of no result
Call = Callable[[Any], object]  # a client, called with what its signature refuses


@contextlib.contextmanager
def refusing(sent: list[httpx.Request]) -> Iterator[SchedulerClient]:
    """A client whose every request is appended to ``sent`` and answered 422."""

    def refuse(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return httpx.Response(422, json={"title": "Invalid request", "detail": "refused"})

    with SchedulerClient("http://scheduler:8000", transport=httpx.MockTransport(refuse)) as made:
        yield made
