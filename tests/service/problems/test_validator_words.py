"""A 422 for a body field one of the project's own validators refused reads as the project's words
alone after the field's path, as every other problem's detail does: pydantic puts ``Value error, ``
(a validator's ``ValueError``) or ``Assertion failed, `` (its ``assert``) before them, and the
service sent that label on (``actuals[0].step: Value error, expected an integer, got 1.5``), in
``detail`` and in each ``errors[]`` message alike; so did the sidecar's pull API in its ``error``.
"""

from __future__ import annotations

from typing import Any

import pytest
import redis
from fastapi.testclient import TestClient
from pydantic import BaseModel, ValidationError, field_validator

from scheduler.trace import NO_LENGTH
from service.problems.details import own_words, validation_details
from tests.service.api_helpers import actual_report, batch_body

PREFIXES = ("Value error", "Assertion failed")


@pytest.fixture
def client(module_app: TestClient, redis_client: redis.Redis) -> TestClient:
    """The module's one app (``module_app``), on a Redis flushed for the test: a refusal is the body's."""
    return module_app


def _report(**fields: Any) -> dict[str, Any]:
    return {"actuals": [{**actual_report(1, 2, 3), **fields}]}


def _item_feature(name: str) -> dict[str, Any]:
    body = batch_body(prompts=1, n=1, workers=1)
    body["batch"]["items"][0]["features"] = {name: 512}
    return body


# a bad body, where it is posted, the field its 422 names, and the words that follow the path
BAD: dict[str, tuple[str, dict[str, Any], str, str]] = {
    "a-fraction-for-a-count": (
        "/actuals",
        _report(step=1.5),
        "actuals[0].step",
        "expected an integer",
    ),
    "an-abort": ("/actuals", _report(finish_reason="abort"), "actuals[0].finish_reason", NO_LENGTH),
    "a-report-feature-named-as-a-column": (
        "/actuals",
        _report(features={"completion_tokens": 7}),
        "actuals[0].features.completion_tokens",
        "'completion_tokens' is vLLM's and OpenAI's name for the output length (usage)",
    ),
    "an-item-feature-named-as-the-cap": (
        "/schedule",
        _item_feature("max_tokens"),
        "batch.items[0].features.max_tokens",
        "'max_tokens' is vLLM's and OpenAI's name for the cap",
    ),
}
# how the detail leads where it names the value too (a feature's refused name is not repeated)
LEADS = {
    "actuals[0].step": "actuals[0].step=1.5",
    "actuals[0].finish_reason": "actuals[0].finish_reason='abort'",
}


@pytest.mark.parametrize(("path", "body", "field", "words"), BAD.values(), ids=BAD.keys())
def test_the_detail_names_the_field_then_the_validator_s_own_words(
    client: TestClient, path: str, body: dict[str, Any], field: str, words: str
) -> None:
    response = client.post(path, json=body)
    assert response.status_code == 422, response.text
    problem = response.json()
    assert problem["field"] == field
    assert problem["detail"].startswith(f"{LEADS.get(field, field)}: {words}"), problem["detail"]
    assert problem["errors"][0]["message"].startswith(words)
    assert not any(prefix in response.text for prefix in PREFIXES), response.text


class _Checked(BaseModel):
    """A model whose validators refuse by ``ValueError`` and by ``assert``, as pydantic labels each."""

    raised: int = 0
    asserted: int = 0

    @field_validator("raised")
    @classmethod
    def _raised(cls, value: int) -> int:
        if value < 0:
            raise ValueError("must be >= 0")
        return value

    @field_validator("asserted")
    @classmethod
    def _asserted(cls, value: int) -> int:
        if value >= 10:  # an ``assert``'s refusal (raised by hand: pytest rewrites this module's asserts)
            raise AssertionError("must be < 10")
        return value


@pytest.mark.parametrize(
    ("given", "field", "words"),
    [({"raised": -1}, "raised", "must be >= 0"), ({"asserted": 10}, "asserted", "must be < 10")],
)
def test_either_label_pydantic_puts_before_a_validator_s_words_is_left_out(
    given: dict[str, int], field: str, words: str
) -> None:
    with pytest.raises(ValidationError) as refused:
        _Checked.model_validate(given)
    labelled = refused.value.errors()[0]["msg"]
    assert labelled.startswith(PREFIXES), labelled  # pydantic's own message still carries the label
    detail, extra = validation_details([{**e, "loc": ("body", *e["loc"])} for e in refused.value.errors()])
    assert (detail, extra["field"], extra["errors"][0]["message"]) == (
        f"{field}={given[field]}: {words}",
        field,
        words,
    )


@pytest.mark.parametrize("words", ["a count, not 'Value error, 3'", "no 'Assertion failed, ' here"])
def test_only_a_label_that_leads_the_message_is_pydantic_s(words: str) -> None:
    """A message of the project's own that quotes the label, past its start, is left whole."""
    assert own_words(words) == words
    assert own_words(f"Value error, {words}") == words
