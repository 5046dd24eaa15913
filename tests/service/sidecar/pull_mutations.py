"""Hypothesis strategies of requests the sidecar's pull API must refuse, each with what its answer is.

A report (``/done``, ``/fail``) of a lease the worker holds, broken one way: a field missing, unknown,
of the wrong type, NaN or infinite, out of range, past the item's cap, with a lone surrogate, an
``extra`` the service could not read back; or a lease it does not hold (another token, another key,
a schedule never published). Beside them, bodies that never reach the schema (not JSON, not UTF-8,
a form, gzipped, too deep), ``/next`` with a ``wait_s`` out of range, and methods and paths no route
takes. docs/sidecar.md gives each its answer (``Refusal``): the status, and the start of ``error``
(the field at fault), or the ``outcome`` a lease not held is answered with.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from hypothesis import strategies as st

from tests.service.api.body_rules import NEGATIVE, NON_NUMBERS, NOT_A_NUMBER, NULL, ODD_NAMES, nested
from tests.service.api.mutations import dotted

JSON = {"Content-Type": "application/json"}
Lease = dict[str, Any]


@dataclass(frozen=True)
class Refusal:
    """One request (``method``, ``path``, body bytes and headers) and what its answer must say:
    ``status``, and ``error`` starting ``says`` (a field) or ``outcome`` being ``says`` (a lease not
    held: ``stale``, ``unknown_schedule``)."""

    method: str
    path: str
    status: int
    says: str
    content: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)


def _sent(path: str, body: Any, status: int, says: str) -> Refusal:
    return Refusal("POST", path, status, says, json.dumps(body).encode("ascii"), JSON)


def _report(kind: str, lease: Lease) -> dict[str, Any]:
    """A valid report of ``lease``: a ``/done`` with every field, or a ``/fail``."""
    body = {name: lease[name] for name in ("schedule_id", "key", "token")}
    if kind == "fail":
        return {**body, "reason": "oom"}
    return {**body, "output_tokens": 5, "finish_reason": "stop", "output": "42", "wall_time_s": 1.5,
            "reward": 1.0, "extra": {"concurrency": 2.0, "prompt_tokens": 100}}  # fmt: skip


TEXT_BAD: list[Any] = [None, 7, 1.5, True, [], {}, "\ud800", "ok\udfff"]
DONE_FIELDS: dict[str, list[Any]] = {  # each value breaks the field under docs/sidecar.md's rules
    "output_tokens": NOT_A_NUMBER + NULL + NEGATIVE + [1.5, 2**31, 16_001],  # the item's cap: 16,000
    "wall_time_s": NON_NUMBERS + NEGATIVE,  # no upper bound: 10^30 s is a number
    "reward": NON_NUMBERS,
    "finish_reason": TEXT_BAD,
    "output": TEXT_BAD,
    "extra": [
        None,
        [],
        "x",
        1,
        {"a": float("nan")},
        {"concurrency": "high"},
        {"concurrency": -1},
        {"prompt_tokens": 0},
        {"prompt_tokens": "100"},
        {"max_new_tokens": 2**31},
        {"max_new_tokens": 4},
        {"max_new_tokens": True},
        {"\ud800": 1},
        {"r": ["\ud800"]},
        {"d": nested(40)},
    ],
}
PRINTABLE = st.characters(min_codepoint=0x20, max_codepoint=0x7E)
LEASE_FIELDS: dict[str, list[Any]] = {
    "schedule_id": TEXT_BAD,
    "key": TEXT_BAD,
    "token": [None, "1", 1.5, True, [], float("nan"), "0x10"],
}


@st.composite
def broken_reports(draw: st.DrawFn, lease: Lease) -> Refusal:
    """A ``/done`` or ``/fail`` of ``lease`` with one field broken, missing or unknown: 422 naming it."""
    kind = draw(st.sampled_from(["done", "fail"]))
    body = _report(kind, lease)
    fields = {**LEASE_FIELDS, **(DONE_FIELDS if kind == "done" else {"reason": TEXT_BAD})}
    name = draw(st.sampled_from(sorted(fields)))
    how = draw(st.sampled_from(["set", "set", "delete", "unknown"]))
    if how == "delete" and name in ("schedule_id", "key", "token", "output_tokens"):
        del body[name]
    elif how == "unknown":
        name = draw(st.sampled_from([*ODD_NAMES, "tokens", "max_tokens", "worker_id"]))
        body[name] = 1
        name = dotted((name,))  # a long one cut to its start and size (docs/sidecar.md's field names)
    else:
        body[name] = draw(st.sampled_from(fields[name]))
    return _sent(f"/{kind}", body, 422, name)


@st.composite
def reports_of_leases_not_held(draw: st.DrawFn, lease: Lease) -> Refusal:
    """A well-formed report of a lease the worker was not handed: another token, another key, a
    schedule never published. ``/done`` 409 ``stale``, ``/fail`` 200 ``stale``; 404 for the schedule."""
    kind = draw(st.sampled_from(["done", "fail"]))
    body = _report(kind, lease)
    change = draw(st.sampled_from(["token", "key", "schedule_id"]))
    if change == "token":
        body["token"] = draw(st.integers(-(2**70), 2**70).filter(lambda t: t != lease["token"]))
    elif change == "key":
        body["key"] = draw(st.sampled_from([lease["key"] + "x", "zz#0", "", "k" * 70_000, "a#1"]))
    else:
        body["schedule_id"] = draw(st.sampled_from(["never-published", "", "{tag}", "s" * 70_000]))
        return _sent(f"/{kind}", body, 404, "unknown_schedule")
    return _sent(f"/{kind}", body, 409 if kind == "done" else 200, "stale")


@st.composite
def raw_reports(draw: st.DrawFn, lease: Lease) -> Refusal:
    """Bytes a report route never reads as a report: each answer names ``body`` (415: the coding)."""
    path = draw(st.sampled_from(["/done", "/fail"]))
    text = json.dumps(_report(path[1:], lease))
    cut = draw(st.integers(1, len(text) - 1))
    head, tail = text[:cut].encode(), text[cut:].encode()
    no_json = draw(st.text(PRINTABLE, max_size=32)).replace("{", "").encode() + b"}"  # no object opens
    wide = text.encode(draw(st.sampled_from(["utf-16", "utf-32-le"])))
    form = {"Content-Type": "application/x-www-form-urlencoded"}
    choices = [
        Refusal("POST", path, 422, "body", head, JSON),
        Refusal("POST", path, 422, "body", no_json, JSON),
        Refusal("POST", path, 400, "body", head + b"\xff" + tail, JSON),
        Refusal("POST", path, 400, "body", wide, JSON),
        Refusal("POST", path, 400, "body", b"[" * 5_000 + b"]" * 5_000, JSON),
        Refusal("POST", path, 422, "body", text.encode(), form),
        Refusal("POST", path, 415, "", text.encode(), {**JSON, "Content-Encoding": "gzip"}),
        Refusal("POST", path, 422, "body", json.dumps([json.loads(text)]).encode(), JSON),
    ]
    return draw(st.sampled_from(choices))


@st.composite
def bad_polls(draw: st.DrawFn) -> Refusal:
    """``GET /next`` with a ``wait_s`` out of 0..30 or no number: 422 naming it and its value (as the
    service names a query field: ``wait_s='-1'``, no ``query.``), nothing claimed."""
    wait = draw(st.sampled_from(["-1", "30.5", "31", "nan", "inf", "-inf", "1e400", "x", "1,2", "0x1"]))
    return Refusal("GET", f"/next?wait_s={wait}", 422, "wait_s=")


ROUTES = {"/next": "GET", "/done": "POST", "/fail": "POST", "/leases": "GET", "/reset": "POST"}


@st.composite
def wrong_routes(draw: st.DrawFn) -> Refusal:
    """A method a path does not take (405), or a path no route has (404: a trailing slash, a case
    or a prefix away). Nothing runs: not a claim, not a reset, not a report."""
    path = draw(st.sampled_from(sorted(ROUTES)))
    if draw(st.booleans()):
        method = draw(
            st.sampled_from(["GET", "POST", "PUT", "DELETE", "PATCH"]).filter(lambda m: m != ROUTES[path])
        )
        return Refusal(method, path, 405, method)
    wrong = draw(st.sampled_from([path + "/", path.upper(), "/v1" + path, path + "s", "/" + path]))
    return Refusal(ROUTES[path], wrong, 404, ROUTES[path])


def refusals(lease: Lease) -> st.SearchStrategy[Refusal]:
    """Every kind of request above, for the worker that holds ``lease``."""
    return st.one_of(
        broken_reports(lease),
        reports_of_leases_not_held(lease),
        raw_reports(lease),
        bad_polls(),
        wrong_routes(),
    )
