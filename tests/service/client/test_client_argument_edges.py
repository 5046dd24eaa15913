"""The client's argument checks at their edges (``service/client/args.py``): a boolean is no count nor
a number of seconds, a pydantic report alone or bytes of JSON are refused as what they are, the
arguments ``wait`` and ``report_actuals`` read before sending are checked too, and a body given as a
model is sent without the fields left unset. Found by mutation testing of round 65's code
(docs/experiments.md, "Mutation testing of round 65's new code"): each test states a behaviour no
earlier test reached.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import numpy as np
import pytest

from service.api.learning_schemas import ActualReport
from service.api.schemas import ScheduleRequest
from service.client import SchedulerAPIError, SchedulerClient
from tests.service.api_helpers import actual_report, batch_body
from tests.service.client.refusing import NOTHING, Call

# a call with one argument of the wrong type -> its TypeError's words
WRONG: dict[str, tuple[Call, str]] = {
    "results(count=True)": (lambda c: c.results("s1", count=True), "count: expected an int, got bool"),
    "wait(timeout_s=True)": (
        lambda c: c.wait("s1", timeout_s=True),
        "timeout_s: expected a number of seconds, got bool",
    ),
    "wait(poll_ms='5')": (lambda c: c.wait("s1", poll_ms="5"), "poll_ms: expected an int, got str"),
    "report_actuals(chunk='2')": (
        lambda c: c.report_actuals([actual_report(1, 2, 3)], chunk="2"),
        "chunk: expected an int, got str",
    ),
    "report_actuals(an ActualReport alone)": (
        lambda c: c.report_actuals(ActualReport.model_validate(actual_report(1, 2, 3))),
        "reports: expected a sequence of ActualReport or mappings, got ActualReport",
    ),
    # an int is no flag, 0 and 1 included (nits67; ``partial="no"`` is test_client_arguments.py's)
    "report_results(partial=1)": (
        lambda c: c.report_results(1, NOTHING, partial=1),
        "partial: expected a bool, got int",
    ),
    "schedule(JSON bytes)": (
        lambda c: c.schedule(json.dumps(batch_body()).encode()),
        "request: expected a ScheduleRequest or a mapping, got bytes; decode a JSON text first (json.loads)",
    ),
}


@pytest.mark.parametrize(("call", "words"), WRONG.values(), ids=WRONG.keys())
def test_a_wrong_type_is_a_type_error_naming_it_before_anything_is_sent(
    client: SchedulerClient, sent: list[httpx.Request], call: Call, words: str
) -> None:
    with pytest.raises(TypeError) as refused:
        call(client)
    assert str(refused.value) == words
    assert sent == []


def test_group_sizes_by_prompt_and_no_rewards_are_taken(
    client: SchedulerClient, sent: list[httpx.Request]
) -> None:
    """A mapping of group sizes and ``rewards=None`` are what the signature takes: a step of no
    result sends nothing and answers None."""
    assert client.report_results(1, NOTHING, group_sizes={"p0": 4}, rewards=None, prompt_tokens=None) is None
    assert sent == []


def test_a_model_body_is_sent_without_the_fields_left_unset(
    client: SchedulerClient, sent: list[httpx.Request]
) -> None:
    request = ScheduleRequest.model_validate(batch_body(prompts=1, n=1))
    with pytest.raises(SchedulerAPIError):
        client.schedule(request)
    body = json.loads(sent[0].content)
    assert None not in body.values()
    assert body == request.model_dump(exclude_none=True)


def test_numpys_boolean_is_taken_as_the_flag_it_is(
    client: SchedulerClient, sent: list[httpx.Request]
) -> None:
    """``partial=mask.any()`` is numpy's boolean, no ``bool``: taken, as numpy's integers are."""
    loose: Any = client  # numpy's boolean is no ``bool`` to mypy either
    assert loose.report_results(1, NOTHING, partial=np.True_) is None
    assert sent == []
