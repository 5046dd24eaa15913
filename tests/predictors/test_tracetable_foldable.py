"""Which rows the trace table holds as the trace format means them (``tracetable.foldable``): a row
read back from a store something else may have written is checked there first, or one bad value
raises out of ``Trace.from_rows`` for every row read with it (poison51). Each refusal names its field."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from predictors.tracetable import FINISH_NAMES, Trace, feature_value, finite_number, foldable
from scheduler.trace import INT64_MAX, TraceRow

ROW = TraceRow(step=3, prompt_id="p7", sample_idx=1, prompt_tokens=12, output_tokens=40, max_new_tokens=64)


def _with(name: str, value: object) -> TraceRow:
    """``ROW`` with ``name`` set to ``value``, whatever its type (a store read back may hold any)."""
    changes: dict[str, Any] = {name: value}
    return dataclasses.replace(ROW, **changes)


@pytest.mark.parametrize(
    "change",
    [
        {},
        {"max_new_tokens": None},
        {"step": 0, "output_tokens": 1},
        {"prompt_tokens": INT64_MAX},
        {"finish_reason": None},
        {"finish_reason": ""},
        *({"finish_reason": name} for name in FINISH_NAMES),
        {"reward": 1},
        {"reward": -0.5},
        {"features": {"topic": "math", "difficulty": 3, "score": 0.25}},
    ],
    ids=repr,
)
def test_a_row_as_the_format_means_it_is_held_as_it_is(change: dict[str, Any]) -> None:
    row = dataclasses.replace(ROW, **change)
    assert foldable(row) is row
    assert len(Trace.from_rows([row])) == 1


@pytest.mark.parametrize("name", ["step", "sample_idx", "prompt_tokens", "output_tokens", "max_new_tokens"])
@pytest.mark.parametrize("value", [-1, INT64_MAX + 1, True, 2.0, "7"], ids=repr)
def test_a_count_that_is_not_a_count_in_int64_is_refused_naming_its_column(name: str, value: object) -> None:
    with pytest.raises(ValueError, match=f"^{name} is not a count"):
        foldable(_with(name, value))


@pytest.mark.parametrize("name", ["prompt_tokens", "output_tokens", "max_new_tokens"])
def test_a_count_of_tokens_is_at_least_one_as_the_api_takes_it(name: str) -> None:
    """An empty prompt no engine takes; an empty generation is its EOS, 1 token (learn53: an output
    of 0 was held, where ``POST /actuals`` refuses it)."""
    with pytest.raises(ValueError, match=rf"^{name} is not a count in \[1, "):
        foldable(_with(name, 0))


@pytest.mark.parametrize("name", ["step", "sample_idx", "prompt_tokens", "output_tokens"])
def test_only_the_cap_may_be_unknown(name: str) -> None:
    with pytest.raises(ValueError, match=f"^{name} is not a count"):
        foldable(_with(name, None))


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"prompt_id": 7}, "prompt_id"),
        ({"finish_reason": "abort"}, "finish_reason"),
        ({"reward": float("nan")}, "reward"),
        ({"reward": float("inf")}, "reward"),
        ({"reward": True}, "reward"),
        ({"reward": "high"}, "reward"),
        ({"reward": 10**400}, "reward"),
        ({"features": [1.0]}, "features"),
        ({"features": {"topic": None}}, "feature 'topic'"),
        ({"features": {"score": float("nan")}}, "feature 'score'"),
        ({"features": {"flag": False}}, "feature 'flag'"),
        ({"features": {7: "seven"}}, "feature '7'"),
    ],
    ids=repr,
)
def test_a_field_the_table_would_not_hold_is_refused_naming_it(change: dict[str, Any], field: str) -> None:
    with pytest.raises(ValueError, match=f"^{field} "):
        foldable(dataclasses.replace(ROW, **change))


@pytest.mark.parametrize(
    ("value", "finite"),
    [
        (0.5, True),
        (-3, True),
        (float("nan"), False),
        (float("-inf"), False),
        (False, False),
        (10**400, False),
    ],
    ids=repr,
)
def test_a_number_is_one_a_float_column_holds_only_where_finite_and_no_bool(
    value: object, finite: bool
) -> None:
    assert finite_number(value) is finite
    assert feature_value(value) is finite
    assert feature_value("text")
