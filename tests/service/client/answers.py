"""Server answers for the client's fuzz (``test_client_fuzz``): every route's valid answer, and
hypothesis strategies that break it or replace it, as a proxy, another server or a bug would.

``answers()`` draws a status (success, redirect, refusal, outage), a body (a valid answer of some
route with one element changed, any JSON, a problem document with odd members, bytes that are no
JSON or no UTF-8, JSON nested past any decoder's depth, nothing) and headers (content types, a
``Retry-After`` that is no number of seconds). ``odd_results()`` draws result entries that pass the
results page's schema but carry nonsense a worker or an older sidecar could have stored.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import httpx
from hypothesis import strategies as st

from service.client.scheduler_client import StepResults
from tests.text_alphabet import UTF8

TIMINGS = dict.fromkeys(
    ("queue_ms", "validate_ms", "predict_ms", "plan_ms", "baseline_ms", "publish_ms"), 1.0
)
SCHEDULED = {
    "schedule_id": "s1", "step": 1, "policy": "lpt", "status": "HEURISTIC", "published": True,
    "model_version": "fallback", "prediction_sources": {"global_prior": 1}, "quantile": 0.5,
    "assignments": {"w0": [{"prompt_id": "p0", "sample_idx": 0, "predicted_tokens": 10.0}]},
    "dispatch_order": [], "predicted_makespan_s": 1.0, "lower_bound_s": 1.0, "round_robin_makespan_s": 1.0,
    "speedup_vs_round_robin": 1.0, "time_scales": {"w0": 1.0}, "time_scale_sources": {"w0": "profile"},
    "timings": {**TIMINGS, "total_ms": 6.0}, "replayed": False,
}  # fmt: skip
COUNTS = {"total": 2, "queued": 0, "running": 0, "done": 2, "failed": 0, "cancelled": 0}
PROGRESS = {**COUNTS, "schedule_id": "s1", "workers": {"w0": {**COUNTS, "planned_finish_s": 1.0}},
            "dead_letter": [], "dead_letters": []}  # fmt: skip
RESULT: dict[str, Any] = {
    "stream_id": "1-0", "key": "p0#0", "prompt_id": "p0", "sample_idx": 0, "worker_id": "w0", "attempt": 1,
    "output_tokens": 5, "finish_reason": "stop", "wall_time_s": 1.5, "output": "42", "reward": 1.0,
    "extra": {"prompt_tokens": 100, "max_new_tokens": 2048, "concurrency": 2.0}, "extra_withheld": None,
}  # fmt: skip
SECOND = {**RESULT, "stream_id": "2-0", "key": "p0#1", "sample_idx": 1}
RESULTS = {"schedule_id": "s1", "results": [RESULT, SECOND], "next": "2-0"}
CANCELLED = {"schedule_id": "s1", "cancelled": 1, "queued": 1, "running": 0, "cancelled_at_ms": 1}
ACCEPTED = {
    "accepted": 1,
    "repeated": 0,
    "stream_length": 1,
    "time_scales": {"w0": 1.0},
    "unchecked_schedules": [],
}
MODELS = {"version": "v1", "stored_versions": ["v1"], "history_rows": 5, "retraining": False,
          "retrain_every_steps": 0, "synthetic": False}  # fmt: skip
RETRAINED = {"version": "v2", "history_rows": 5, "seconds": 0.1}
PROBLEM = {"type": "https://rollout-scheduler.dev/problems/conflict", "title": "Conflict", "status": 409,
           "detail": "taken", "instance": "/schedule", "field": "schedule_id", "value": "s1"}  # fmt: skip
VALID: list[dict[str, Any]] = [SCHEDULED, PROGRESS, RESULTS, CANCELLED, ACCEPTED, MODELS, RETRAINED, PROBLEM]

ODD_VALUES = [
    None,
    True,
    0,
    -1,
    2**70,
    -(2**70),
    1.5,
    float("nan"),
    float("inf"),
    "",
    "x",
    "\ud800",
    "p0",
    "1-0",
]
ODD: st.SearchStrategy[Any] = st.sampled_from([*ODD_VALUES, [], {}, [[[[]]]], {"a": 1}, "z" * 1000])
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(UTF8, max_size=10),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(UTF8, max_size=8), inner, max_size=4),
    max_leaves=20,
)
STATUSES = st.sampled_from(
    [200, 200, 200, 201, 204, 301, 302, 307, 400, 401, 404, 409, 413, 422, 429, 500, 502, 503]
)
RETRY_AFTER = st.sampled_from(["1", "0", "-1", "nan", "inf", "-inf", "1e400", "1_0", " 2 ", "x",
                               "Wed, 21 Oct 2015 07:28:00 GMT", "\u00e9", ""])  # fmt: skip
CONTENT_TYPES = st.sampled_from(
    ["application/json", "application/problem+json", "text/html", "text/plain", ""]
)


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    members = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    return [path for key, child in members for path in ((*prefix, key), *_paths(child, (*prefix, key)))]


@st.composite
def one_off(draw: st.DrawFn, valid: dict[str, Any]) -> Any:
    """``valid`` with one element set to an odd value, deleted, or given an unknown member."""
    body = copy.deepcopy(valid)
    *parents, last = draw(st.sampled_from(_paths(body)))
    node: Any = body
    for part in parents:
        node = node[part]
    how = draw(st.sampled_from(["set", "set", "delete", "add"]))
    if how == "delete":
        del node[last]
    elif how == "add" and isinstance(node[last], dict):
        node[last][draw(st.text(UTF8, max_size=6))] = draw(ODD)
    else:
        node[last] = draw(ODD)
    return body


def as_json(value: Any) -> bytes:
    """``value`` as JSON text, NaN and a lone surrogate as Python writes them (escaped, ASCII)."""
    return json.dumps(value).encode("ascii")


BODIES = st.one_of(
    st.sampled_from(VALID).flatmap(one_off).map(as_json),
    st.sampled_from(VALID).map(as_json),
    JSON_VALUES.map(as_json),
    st.binary(max_size=40),
    st.sampled_from(
        [b"", b"[" * 100_000, b'{"a":' * 50_000, b"\xff\xfe{\x00}\x00", b"<html>502</html>", b"null"]
    ),
)


@st.composite
def answers(draw: st.DrawFn, own: dict[str, Any] | None = None) -> httpx.Response:
    """One answer a server could give any request of the client; with ``own`` (the called route's
    valid answer), half of them a 200 of that answer with one element changed.

    Drawn from every route's answers alike, a success of the called route's own answer with one
    element off (the answer that reaches the client's reading of a success, past its status and
    decoding) was 0-2 of a call's 80 examples for every call but schedule: a 200 is 3 of 18
    statuses, and the route's own body 1 of 8, broken in one place 1 of 5 bodies."""
    headers = [(b"content-type", draw(CONTENT_TYPES).encode())]
    if draw(st.booleans()):  # as the bytes a server sends: httpx reads a header's text as Latin-1
        headers.append((b"retry-after", draw(RETRY_AFTER).encode("latin-1")))
    if draw(st.booleans()):
        headers.append((b"location", b"https://elsewhere.test/"))
    if own is not None and draw(st.booleans()):
        return httpx.Response(200, content=as_json(draw(one_off(own))), headers=headers)
    return httpx.Response(draw(STATUSES), content=draw(BODIES), headers=headers)


@st.composite
def odd_results(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Two results of prompt ``p0`` that pass ``ResultEntry``'s schema, one element of one changed to
    what the schema takes but no actual can hold: a key without its sample index (with the parts
    unsplit), NaN or negative figures, an ``extra`` count that is text, a list or no count."""
    results = [copy.deepcopy(RESULT), copy.deepcopy(SECOND)]
    result = results[draw(st.integers(0, 1))]
    name = draw(st.sampled_from(sorted(ODD_FIELDS)))
    value = draw(st.sampled_from(ODD_FIELDS[name]))
    if name in EXTRA:
        result["extra"][name] = value
    elif name == "key":
        result |= {"key": value, "prompt_id": None, "sample_idx": None}
    else:
        result[name] = value
    return results


NUMBERS = [float("nan"), float("inf"), float("-inf"), -1, 0, 2**70, 1e300]
ODD_FIELDS: dict[str, list[Any]] = {
    "key": ["p0", "p0#", "p0#x", "#", "", "p0#-1", "p0#1.5", "p0#99999999999999999999999", "p0#\u0661"],
    "wall_time_s": NUMBERS,
    "output_tokens": [-1, 2**70],
    "reward": NUMBERS,
    "worker_id": ["", "has space", "\ufffd", "x" * 300],
    "sample_idx": [-1, 2**70],
    "prompt_tokens": [*NUMBERS, "100", "x", [100], {"n": 1}, True, None, 1.5],
    "concurrency": [*NUMBERS, "2", "x", [2], {"n": 1}, True, -5],
    "max_new_tokens": [*NUMBERS, "2048", [1], True, 1.5],
}
EXTRA = ("prompt_tokens", "concurrency", "max_new_tokens")  # set in a result's ``extra``


def finished_step(finished: StepResults) -> bool:
    """Whether ``finished`` is the unbroken step: both results, all done."""
    return len(finished.results) == 2 and finished.progress.done == finished.progress.total == 2
