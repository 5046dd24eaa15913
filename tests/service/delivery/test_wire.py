"""The stored form of an item: the JSON a claimer decodes is exactly the item's own."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from service.delivery import DeliveryItem, InvalidInputError
from service.delivery.wire import item_json, publish_args, stored_items
from tests.service.delivery.conftest import schedule
from tests.text_alphabet import UTF8

texts = st.text(UTF8, min_size=1, max_size=20)  # any code point: quotes, backslashes, controls, emoji
optional_ms = st.none() | st.integers(min_value=0, max_value=10**12)
items = st.builds(
    DeliveryItem,
    key=texts,
    prompt_id=texts,
    sample_idx=st.integers(min_value=0, max_value=10**6),
    prompt_tokens=st.integers(min_value=1, max_value=10**7),
    max_new_tokens=st.integers(min_value=1, max_value=10**7),
    predicted_tokens=st.floats(min_value=0.0, max_value=1e12, allow_nan=False, allow_infinity=False),
    payload=st.dictionaries(texts, texts, max_size=2),
    group_id=st.text(UTF8, max_size=10),
    pinned=st.booleans(),
    planned_start_ms=optional_ms,
    deadline_ms=optional_ms,
)


@given(items)
def test_an_items_stored_json_decodes_to_its_own_fields_without_the_payload(one: DeliveryItem) -> None:
    expected = one.to_json()
    del expected["payload"]
    assert json.loads(item_json(one)) == expected


@given(st.lists(items, max_size=6))
def test_every_stored_value_names_its_payload_and_equal_payloads_are_stored_once(
    batch: list[DeliveryItem],
) -> None:
    stored, joined = stored_items(batch)
    payloads = joined.split("\n") if joined else []
    assert len(payloads) == len(set(payloads))
    for one, value in zip(batch, stored, strict=True):
        ref, _, body = value.partition("\t")
        whole = json.loads(body)
        whole["payload"] = json.loads(payloads[int(ref) - 1]) if ref else {}
        assert whole == one.to_json()


def test_a_non_finite_prediction_is_refused_by_name() -> None:
    bad = DeliveryItem("k#0", "k", 0, 1, 8, float("inf"))
    with pytest.raises(InvalidInputError, match=r"items\[k#0\]\.predicted_tokens"):
        item_json(bad)


def test_a_schedule_without_capacities_keeps_the_fingerprint_earlier_versions_stored() -> None:
    # a replay across an upgrade must still be recognised as one, not refused as a conflict
    digest = publish_args(schedule("s", {"a": 2, "b": 1}), 5, nonce="n")[0]
    assert digest == "6e2c78bf63c023187d9de0f8f872d470b76d4bc1ad81f551398aacecd1ac5fc0"  # as of 69d845f
