"""An argument of the wrong type is a ``TypeError`` naming the argument and the type it got, raised
before any request is sent (``service/client/args.py``): ``schedule(None)`` was ``AttributeError:
'NoneType' object has no attribute 'get'`` from inside the client, ``report_actuals(one_report)`` a
``ValueError`` of ``dict()``, ``report_results(step, progress)`` an ``AttributeError`` of
``.progress``, and ``progress(None)`` a ``ValueError`` quoting ``'None'`` as if it were an id. A
number of seconds no timer can run out on (a NaN; the client's infinite ``timeout_s``) is a
``ValueError`` naming it, before anything is sent too (review66).
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from types import MappingProxyType
from typing import Any

import httpx
import numpy as np
import pytest

from service.client import SchedulerAPIError, SchedulerClient
from tests.service.api_helpers import actual_report, batch_body
from tests.service.client.refusing import NOTHING, PROGRESS, Call

# a call with one argument of the wrong type -> the start of its TypeError
WRONG: dict[str, tuple[Call, str]] = {
    "schedule(a list)": (
        lambda c: c.schedule([batch_body()]),
        "request: expected a ScheduleRequest or a mapping, got list",
    ),
    "schedule(JSON text)": (
        lambda c: c.schedule(json.dumps(batch_body())),
        "request: expected a ScheduleRequest or a mapping, got str; decode a JSON text first",
    ),
    "schedule(None)": (
        lambda c: c.schedule(None),
        "request: expected a ScheduleRequest or a mapping, got NoneType",
    ),
    "progress(None)": (lambda c: c.progress(None), "schedule_id: expected a str, got NoneType"),
    "cancel(7)": (lambda c: c.cancel(7), "schedule_id: expected a str, got int"),
    "results(wait_ms='5')": (lambda c: c.results("s1", wait_ms="5"), "wait_ms: expected an int, got str"),
    "results(count=1.5)": (lambda c: c.results("s1", count=1.5), "count: expected an int, got float"),
    "wait(timeout_s='60')": (
        lambda c: c.wait("s1", timeout_s="60"),
        "timeout_s: expected a number of seconds, got str",
    ),
    "schedule(outage_s='60')": (  # a body without its schedule_id is sent once: it was never checked
        lambda c: c.schedule(batch_body(), outage_s="60"),
        "outage_s: expected a number of seconds, got str",
    ),
    "progress(outage_s='60')": (
        lambda c: c.progress("s1", outage_s="60"),
        "outage_s: expected a number of seconds",
    ),
    "results(after=0)": (lambda c: c.results("s1", after=0), "after: expected a str, got int"),
    "wait(poll_ms=True)": (lambda c: c.wait("s1", poll_ms=True), "poll_ms: expected an int, got bool"),
    "report_actuals(one report)": (
        lambda c: c.report_actuals(actual_report(1, 2, 3)),
        "reports: expected a sequence of ActualReport or mappings, got dict",
    ),
    "report_actuals([None])": (
        lambda c: c.report_actuals([actual_report(1, 2, 3), None]),
        "reports[1]: expected an ActualReport or a mapping, got NoneType",
    ),
    "report_actuals(None)": (lambda c: c.report_actuals(None), "reports: expected a sequence"),
    "report_results(a dict)": (
        lambda c: c.report_results(1, {"results": []}),
        "finished: expected the StepResults of wait(), got dict",
    ),
    "report_actuals(partial='no')": (  # read by its truth, it reported a cut step (nits67)
        lambda c: c.report_actuals([actual_report(1, 2, 3)], partial="no"),
        "partial: expected a bool, got str",
    ),
    "report_results(rewards=[])": (
        lambda c: c.report_results(1, NOTHING, rewards=[]),
        "rewards: expected a mapping or None, got list",
    ),
    "report_results(group_sizes='4')": (
        lambda c: c.report_results(1, NOTHING, group_sizes="4"),
        "group_sizes: expected an int, got str",
    ),
}


@pytest.mark.parametrize(("call", "words"), WRONG.values(), ids=WRONG.keys())
def test_a_wrong_type_is_a_type_error_naming_it_before_anything_is_sent(
    client: SchedulerClient, sent: list[httpx.Request], call: Call, words: str
) -> None:
    with pytest.raises(TypeError) as refused:
        call(client)
    assert str(refused.value).startswith(words), refused.value
    assert sent == []


@pytest.mark.parametrize(
    ("given", "words"),
    [
        ({"token": 123}, "token: expected a str, got int"),
        ({"timeout_s": "60"}, "timeout_s: expected a number"),
    ],
)
def test_the_client_is_built_with_a_str_token_and_a_number_of_seconds(
    given: dict[str, Any], words: str
) -> None:
    """A ``timeout_s`` of ``"60"`` was multiplied into ``POST /schedule``'s deadline header: 60...60."""
    with pytest.raises(TypeError, match=f"^{words}"):
        SchedulerClient("http://scheduler:8000", **given)


def test_any_mapping_is_sent_as_its_json_object(client: SchedulerClient, sent: list[httpx.Request]) -> None:
    """A read-only mapping (``MappingProxyType``) is a ``Mapping`` as the signature says: it was
    handed to ``json.dumps`` as is, which refused it (``not JSON serializable``)."""
    body = batch_body(prompts=1, n=1)
    with pytest.raises(SchedulerAPIError):
        client.schedule(MappingProxyType(body))
    assert [json.loads(request.content) for request in sent] == [body]


def test_numpy_counts_are_counts(client: SchedulerClient, sent: list[httpx.Request]) -> None:
    """A trainer's counts are often numpy integers: taken as the ints they are, not refused."""
    with pytest.raises(SchedulerAPIError):
        client.results("s1", count=np.int64(5), wait_ms=np.int32(0), outage_s=np.float64(0))  # type: ignore[arg-type]
    assert sent[0].url.params["count"] == "5"


@pytest.mark.parametrize("given", [math.inf, math.nan, 0, -1.0])
def test_the_client_s_timeout_is_a_finite_number_of_seconds_above_0(given: float) -> None:
    """Each ``schedule`` sends it in milliseconds as its deadline: an infinite one was taken here and
    every ``schedule`` raised ``OverflowError`` (a NaN ``ValueError``) converting it to an integer."""
    with pytest.raises(ValueError, match=r"^timeout_s="):
        SchedulerClient("http://scheduler:8000", timeout_s=given)


@pytest.mark.parametrize(
    "call",
    [lambda c: c.wait("s1", timeout_s=math.nan), lambda c: c.progress("s1", outage_s=math.nan)],
    ids=["wait(timeout_s=nan)", "progress(outage_s=nan)"],
)
def test_a_nan_of_seconds_is_refused_before_anything_is_sent(
    client: SchedulerClient, sent: list[httpx.Request], call: Call
) -> None:
    """Every comparison with a NaN is false: a ``wait`` of one never ran out, nor an outage of one."""
    with pytest.raises(ValueError, match="=nan: expected a number of seconds"):
        call(client)
    assert sent == []


def test_an_infinite_wait_waits_as_none_does() -> None:
    """``wait(timeout_s=math.inf)`` turned the time left into milliseconds: an ``OverflowError``."""

    def finished(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/results"):
            return httpx.Response(200, json={"schedule_id": "s1", "results": [], "next": "0-0"})
        return httpx.Response(200, json=PROGRESS.model_dump(mode="json"))

    with SchedulerClient("http://scheduler:8000", transport=httpx.MockTransport(finished)) as client:
        assert client.wait("s1", timeout_s=math.inf) == NOTHING


CLIENT_DOC = Path(__file__).resolve().parents[3] / "docs" / "client.md"
_BUILT = {
    "token: expected a str, got int",
    "timeout_s: expected a number of seconds, got str",
}  # the next test's


def test_each_type_error_docs_client_md_lists_is_one_the_client_raises(
    client: SchedulerClient, sent: list[httpx.Request]
) -> None:
    """docs/client.md's "Arguments it refuses" quotes each ``TypeError``: a reworded one left there
    would send a reader's ``except``/log search after words the client no longer says (user66)."""
    section = CLIENT_DOC.read_text().split("**Arguments it refuses.**")[1].split("\n\n", 2)[1]
    quoted = set(re.findall(r"`([a-z_]+(?:\[\d+\])?: expected [^`]+)`", section))
    raised = set(_BUILT)
    for call, _ in WRONG.values():
        with pytest.raises(TypeError) as refused:
            call(client)
        raised.add(str(refused.value))
    assert len(quoted) >= 12
    assert quoted <= raised, sorted(quoted - raised)
