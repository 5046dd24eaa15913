"""The ranges docs/api.md gives the request's fields are the ones the schema checks: a trainer writes
its inventory and sampling from the page, and a value past a bound it does not give is a 422.

Until 2026-12-04 the page gave ``temperature`` (>= 0), refused past 100, and no bound at all for
``min_p``, the penalties, ``seed``, a stop string, ``num_gpus``, ``max_num_seqs`` or
``kv_capacity_tokens``."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from service.api.schemas import BatchItem, Sampling, ScheduleRequest, WorkerSpec

PAGE = Path(__file__).resolve().parents[3] / "docs" / "api.md"
_NUMBER = r"-?[0-9][0-9,]*(?:\.[0-9]+)?(?:\^[0-9]+)?(?:-1)?"
# `name` (..., LOW..HIGH ...): the range inside the parenthesis that follows the name; ``(0..1]``
# (a closing bracket) writes an excluded low end, as top_p's
_RANGE = re.compile(rf"`(\w+)`\s\((?:[^()`]*? )?({_NUMBER})\.\.({_NUMBER})(\]?)")
_COUNT = re.compile(r"`(\w+)` \(up to ([0-9]+) ")

Claim = tuple[str, float, float, bool]


def bound(text: str) -> float:
    """A bound as the docs write it: ``-2``, ``65,536``, ``0.01``, ``10^6``, ``2^31-1`` (whole ones as
    ints, so ``2^63-1`` stays exact)."""
    text = text.rstrip(",").replace(",", "")
    base, _, power_less_one = text.partition("^")
    if not power_less_one:
        return float(base) if "." in base else int(base)
    power, _, less = power_less_one.partition("-")
    return int(int(base) ** int(power)) - int(less or 0)


def range_claims(text: str) -> list[Claim]:
    """Each ``name`` and the range its parenthesis gives: (name, low, high, whether low is excluded);
    ``(up to N strings of LOW..HIGH characters)`` bounds each element."""
    return [(name, bound(low), bound(high), bool(shut)) for name, low, high, shut in _RANGE.findall(text)]


def paragraph(starting: str) -> str:
    """The page's paragraph that begins with ``starting``."""
    text = PAGE.read_text()
    start = text.index(starting)
    return text[text.rfind("\n\n", 0, start) + 2 :].split("\n\n", 1)[0]


def checked(model: type[BaseModel]) -> dict[str, dict[str, Any]]:
    """Each bounded field's JSON schema (an optional field's non-null branch; a list's, its elements')."""
    found = {}
    for name, spec in model.model_json_schema()["properties"].items():
        branch = next((b for b in spec.get("anyOf", [spec]) if b.get("type") != "null"), spec)
        found[name] = {**branch, **branch.get("items", {})}
    return found


def schema_claim(name: str, schema: dict[str, Any]) -> Claim:
    """What ``schema`` checks, as a claim: a number's bounds, or a string's length."""
    if schema.get("type") == "string":
        return name, schema["minLength"], schema["maxLength"], False
    if "exclusiveMinimum" in schema and schema.get("type") == "integer":  # > 0 is 1.., as the page writes it
        return name, schema["exclusiveMinimum"] + 1, schema["maximum"], False
    if "exclusiveMinimum" in schema:
        return name, schema["exclusiveMinimum"], schema["maximum"], True
    return name, schema["minimum"], schema["maximum"], False


def test_every_range_of_a_sampling_field_is_the_one_it_is_checked_against() -> None:
    text = paragraph("`sampling` (top level: every sample")
    schemas = checked(Sampling)
    claims = range_claims(text)
    assert {name for name, *_ in claims} == set(schemas) - {"top_k", "extra"}  # top_k's -1 is a word
    assert [claim for claim in claims if claim != schema_claim(claim[0], schemas[claim[0]])] == []
    counts = {name: int(count) for name, count in _COUNT.findall(text)}
    assert counts == {name: schema["maxItems"] for name, schema in schemas.items() if "maxItems" in schema}


def test_every_range_of_a_worker_field_is_the_one_it_is_checked_against() -> None:
    """``decode_tokens_per_s``'s range is the time scale's it must imply ("the same 0.001..1000")."""
    schemas = checked(WorkerSpec)
    claims = range_claims(paragraph("Worker fields: `worker_id`"))
    against = {name: "time_scale" if name == "decode_tokens_per_s" else name for name, *_ in claims}
    assert set(against) == {name for name, schema in schemas.items() if "maximum" in schema}
    wrong = [claim for claim in claims if claim[1:] != schema_claim(claim[0], schemas[against[claim[0]]])[1:]]
    assert wrong == []


def test_every_range_of_an_item_or_top_level_field_is_the_one_it_is_checked_against() -> None:
    for starting, model in (("Batch item fields:", BatchItem), ("Top level: `model`", ScheduleRequest)):
        schemas = checked(model)
        claims = range_claims(paragraph(starting))
        assert len(claims) >= 2, starting
        assert [claim for claim in claims if claim != schema_claim(claim[0], schemas[claim[0]])] == []


def test_a_range_is_read_as_the_docs_write_it() -> None:
    written = "`top_p` (0..1], `seed` (0..2^62), `stop_token_ids` (up to 256 ids, each 0..2^31-1)"
    assert range_claims(written) == [
        ("top_p", 0, 1, True),
        ("seed", 0, 2**62, False),
        ("stop_token_ids", 0, 2**31 - 1, False),
    ]
    written = "`max_num_seqs` (1..65,536, default 256), `hbm_bandwidth_gbs`\n(1..10^6 GB/s), `x` (0.01..1)"
    assert range_claims(written) == [
        ("max_num_seqs", 1, 65_536, False),
        ("hbm_bandwidth_gbs", 1, 10**6, False),
        ("x", 0.01, 1, False),
    ]
    assert range_claims("`temperature` (>= 0), `top_k` (-1: no limit; at most 2^31-1)") == []
