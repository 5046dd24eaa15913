"""The answer to ``POST /schedule`` says whether the at-once hedge judged the plan
(``ScheduleResponse.at_once_hedge``, docs/api.md): on the service's batches that decides 1.89x
against 2.5-2.74x the bound over draws, and nothing in the answer used to tell (hedge49)."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace
from typing import Any, cast

from scheduler import clock
from scheduler.planner import plan
from service.pipeline.answer import respond
from tests.scheduler.mixed_requests import grouped_request


def _answer(chosen: Any, request: Any) -> Any:
    body = cast(Any, SimpleNamespace(step=3, publish=False))
    checked = cast(Any, SimpleNamespace(quantile=0.5, time_scale_sources={}))
    predicted = cast(Any, SimpleNamespace(version="v1", sources={}))
    return respond("s-1", body, checked, request, chosen, chosen, predicted)


def test_the_answer_carries_the_at_once_hedges_verdict_and_none_where_it_was_not_asked() -> None:
    request = grouped_request()
    points = dataclasses.replace(
        request, trajectories=tuple(dataclasses.replace(t, quantiles={}) for t in request.trajectories)
    )
    with clock.frozen():
        hedged, unhedged = plan(request, "lpt"), plan(points, "lpt")
    assert _answer(hedged, request).at_once_hedge == "fastest"
    assert _answer(unhedged, points).at_once_hedge is None
    assert _answer(dataclasses.replace(hedged, at_once="unjudged"), request).at_once_hedge == "unjudged"
