"""Hypothesis strategies that break a valid request body, each saying which field it broke.

``test_fuzz_bodies`` sets any element to an odd value, which may still be valid (a 200 is allowed
there). These break a body for sure, by docs/api.md's rules: a number out of its range or of the
wrong type (NaN, infinities, huge, negative, a string, a boolean, a list), an id the name rule refuses
(empty, too long, a space, a control character, a lone surrogate), an unknown device, model, policy
or engine, a required field deleted, an unknown field added, a duplicate id, an empty list, an
oversized or deeply nested value where a number belongs. Each draw is the body and the field a 422
must name (``Broken``), so a fuzz test can hold the answer to naming it, not only to refusing.

What breaks where is ``body_rules``' tables. The wire-level breaks (``raw_bodies``) never reach the
schema: bytes that are no JSON, JSON cut short, nested past the decoder's depth, in UTF-16, with a
byte UTF-8 cannot read, or sent as a form, gzipped or as a bare list. Their answer names ``body``
(or the header at fault).
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from typing import Any

import redis
from fastapi.testclient import TestClient
from hypothesis import strategies as st

from tests.service.api.badinput import JSON_HEADERS, refused_unchanged
from tests.service.api.body_rules import BAD_NAMES, NULL, ODD, ODD_NAMES, Body, Path, Rules
from tests.text_alphabet import UTF8

JSON = "application/json"


@dataclass(frozen=True)
class Broken:
    """A body with one rule broken, and the field (dotted, as the problem's ``field``) at fault."""

    body: Body
    field: str


@dataclass(frozen=True)
class Raw:
    """Bytes sent as a body, with the headers they go with and the field the refusal must name."""

    content: bytes
    headers: dict[str, str]
    field: str


def dotted(path: Path) -> str:
    """``("batch", "items", 2, "n")`` as the problem names it: ``batch.items[2].n``; a name past 256
    characters by its first 32 and its size, as docs/api.md cuts a long value."""
    text = ""
    for part in path:
        if isinstance(part, int):
            text += f"[{part}]"
            continue
        name = part if len(part) <= 256 else f"{part[:32]}... ({len(part)} characters)"
        text += f".{name}" if text else name
    return text


def _at(body: Body, path: Path) -> Any:
    node: Any = body
    for part in path:
        node = node[part]
    return node


def _set(body: Body, path: Path, value: Any) -> Body:
    edited = copy.deepcopy(body)
    _at(edited, path[:-1])[path[-1]] = value
    return edited


def _replaced(draw: st.DrawFn, body: Body, fields: list[tuple[Path, list[Any]]]) -> Broken:
    """One of ``fields`` (path, its bad values) set to one of its bad values."""
    path, bad = draw(st.sampled_from(fields))
    return Broken(_set(body, path, draw(st.sampled_from(bad))), dotted(path))


@st.composite
def _number(draw: st.DrawFn, body: Body, rules: Rules) -> Broken:
    return _replaced(draw, body, rules.numbers)


@st.composite
def _name(draw: st.DrawFn, body: Body, rules: Rules) -> Broken:
    path, required = draw(st.sampled_from(rules.names))
    return Broken(_set(body, path, draw(st.sampled_from(BAD_NAMES + NULL * required))), dotted(path))


@st.composite
def _kind(draw: st.DrawFn, body: Body, rules: Rules) -> Broken:
    return _replaced(draw, body, rules.kinds)


@st.composite
def _missing(draw: st.DrawFn, body: Body, rules: Rules) -> Broken:
    path = draw(st.sampled_from(rules.required))
    edited = copy.deepcopy(body)
    del _at(edited, path[:-1])[path[-1]]
    return Broken(edited, dotted(path))


@st.composite
def _unknown(draw: st.DrawFn, body: Body, rules: Rules) -> Broken:
    path = (
        *draw(st.sampled_from(rules.objects)),
        draw(st.sampled_from(ODD_NAMES) | st.text(UTF8, max_size=8).map("zz".__add__)),
    )
    return Broken(_set(body, path, draw(ODD)), dotted(path))


@st.composite
def _duplicate(draw: st.DrawFn, body: Body, rules: Rules) -> Broken:
    where, id_field = draw(st.sampled_from(rules.unique))
    edited = copy.deepcopy(body)
    members = _at(edited, where)
    members.append(copy.deepcopy(members[draw(st.integers(0, len(members) - 1))]))
    return Broken(edited, dotted((*where, len(members) - 1, id_field)))


@st.composite
def _empty(draw: st.DrawFn, body: Body, rules: Rules) -> Broken:
    path = draw(st.sampled_from(rules.nonempty))
    return Broken(_set(body, path, []), dotted(path))


@st.composite
def _other(draw: st.DrawFn, body: Body, rules: Rules) -> Broken:
    path, value, field = draw(st.sampled_from(rules.other))
    return Broken(_set(body, path, value), dotted(field))


def broken(body: Body, rules: Rules) -> st.SearchStrategy[Broken]:
    """``body`` (valid) with one of ``rules``' rules broken, and the field the 422 must name."""
    kinds = [_number, _name, _kind, _missing, _unknown, _other, _empty] + [_duplicate] * bool(rules.unique)
    return st.one_of(*(kind(body, rules) for kind in kinds))


def names(field: str, expected: str) -> bool:
    """``field`` is ``expected`` or a part of it (a feature name's own error is located inside)."""
    return field == expected or field.startswith((f"{expected}.", f"{expected}["))


def refuses_naming_the_break(client: TestClient, store: redis.Redis, url: str, broke: Broken) -> None:
    """``broke``'s body sent to ``url`` is a 422 naming its field, and Redis is as it was."""
    problem = refused_unchanged(client, store, "POST", url, as_json(broke.body), JSON_HEADERS)
    assert (problem["status"], problem["instance"]) == (422, url), problem
    assert names(problem.get("field") or "", broke.field), (broke.field, problem["detail"])


def as_json(body: Any) -> bytes:
    """``body`` as the bytes a client sends: NaN and infinities as JSON's extension, a lone surrogate
    as its escape (``\\ud800``), as Python's and most languages' encoders write them."""
    return json.dumps(body).encode("ascii")


@st.composite
def raw_bodies(draw: st.DrawFn, valid: Body) -> Raw:
    """Bytes that never reach the body's schema, each refused naming ``body`` or a header: the JSON
    of ``valid`` cut short, spliced with a byte UTF-8 cannot read, in UTF-16 or UTF-32, sent as a
    form or text, compressed, or wrapped in a list; JSON nested past the decoder's depth, a number
    past Python's 4,300 digits, or a few bytes that are no JSON at all."""
    text = json.dumps(valid)
    head, tail = text[: draw(st.integers(1, len(text) - 1))].encode(), text.encode()
    coding, wide, form = (draw(st.sampled_from(values)) for values in (CODINGS, WIDE, NOT_JSON))
    choices = {
        "cut": lambda: Raw(head, PLAIN, "body"),
        "not utf-8": lambda: Raw(head + draw(st.sampled_from(NOT_UTF8)) + tail[len(head) :], PLAIN, "body"),
        "utf-16/32": lambda: Raw(text.encode(wide), PLAIN, "body"),
        "deep": lambda: Raw(b"[" * 5_000 + b"]" * 5_000, PLAIN, "body"),
        "digits": lambda: Raw(b'{"step": ' + b"9" * 5_000 + b"}", PLAIN, "body"),
        "no json": lambda: Raw(draw(st.binary(max_size=32)).replace(b"{", b"") + b"}", PLAIN, "body"),
        "not json": lambda: Raw(tail, {"Content-Type": form}, "body"),
        "coded": lambda: Raw(tail, {**PLAIN, "Content-Encoding": coding}, "Content-Encoding"),
        "no object": lambda: Raw(
            as_json(draw(st.sampled_from([[valid], "x", 5, None, True]))), PLAIN, "body"
        ),
    }
    return choices[draw(st.sampled_from(sorted(choices)))]()


NOT_UTF8 = [b"\xff", b"\xc3", b"\xed\xa0\x80", b"\xf8\x88\x80\x80\x80"]
WIDE = ["utf-16", "utf-16-le", "utf-16-be", "utf-32", "utf-32-le"]
NOT_JSON = ["application/x-www-form-urlencoded", "text/plain", "multipart/form-data", "application/xml"]
CODINGS = ["gzip", "br", "deflate", "x-unknown"]
PLAIN = {"Content-Type": JSON}
