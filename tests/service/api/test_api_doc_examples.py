"""docs/api.md's examples are bodies the service takes and answers: each JSON example validates
against the model of the body it shows (a request body in full, as ``POST`` would read it; an answer's
fields are the model's), and the field lists it gives for ``/models`` are the models' fields. A
reader copies these into a ``curl -d``; a renamed field left in the docs made that copy a 422."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from service.api.learning_schemas import ActualsRequest, ModelStatus, RetrainResponse
from service.api.progress_schemas import CancelResponse, ProgressResponse, WorkerCounts
from service.api.schemas import ScheduleRequest, ScheduleResponse
from service.problems.table import ProblemBody

API_DOC = Path(__file__).resolve().parents[3] / "docs" / "api.md"
_JSON_BLOCK = re.compile(r"```json\n(.*?)```", re.DOTALL)
_ELISION = re.compile(r",\s*\.\.\.(?=\s*[\]}])")  # "..., ...]" / "{...}, ...}": the docs' "and so on"
REQUESTS: list[type[BaseModel]] = [ScheduleRequest, ActualsRequest]
# each answer example is told apart by a field only its model has
ANSWERS: dict[str, type[BaseModel]] = {
    "assignments": ScheduleResponse,
    "dead_letters": ProgressResponse,
    "cancelled_at_ms": CancelResponse,
    "type": ProblemBody,
}
REQUEST_KEYS: dict[str, type[BaseModel]] = {"batch": ScheduleRequest, "actuals": ActualsRequest}


def _examples() -> list[dict[str, Any]]:
    """Every JSON example of docs/api.md, its elisions dropped."""
    blocks = _JSON_BLOCK.findall(API_DOC.read_text())
    assert blocks, "docs/api.md has no JSON example"
    return [json.loads(_ELISION.sub("", block)) for block in blocks]


def _model_of(example: dict[str, Any]) -> type[BaseModel]:
    for key, model in (*REQUEST_KEYS.items(), *ANSWERS.items()):
        if key in example:
            return model
    raise AssertionError(f"docs/api.md example with fields {sorted(example)} shows no body we know")


@pytest.mark.parametrize("example", _examples(), ids=lambda e: _model_of(e).__name__)
def test_each_json_example_of_the_api_doc_is_a_body_of_its_model(example: dict[str, Any]) -> None:
    model = _model_of(example)
    if model in REQUESTS:
        model.model_validate(example)  # strict, no unknown field: what the service itself would accept
    else:
        assert set(example) <= set(model.model_fields), (
            f"{model.__name__} has no {set(example) - set(model.model_fields)}"
        )


@pytest.mark.parametrize(("route", "model"), [("`GET /models`", ModelStatus), ("answer", RetrainResponse)])
def test_the_models_field_lists_of_the_api_doc_are_the_answers_fields(
    route: str, model: type[BaseModel]
) -> None:
    """``GET /models``: ``{"version", ...}`` and the retrain's "answer ``{...}``" name every field."""
    listed = re.search(route + r":? `\{([^}`]*)\}`", API_DOC.read_text())
    assert listed, f"docs/api.md lists no fields after {route}"
    assert [name.strip(' "') for name in listed.group(1).split(",")] == list(model.model_fields)


def test_each_delete_answer_the_api_doc_shows_has_every_field_of_the_answer() -> None:
    """The DELETE's answers (its 200 and its 202) are small and shown whole: a trainer tells them apart
    by ``status``, so an example without it (the 200's had none) shows an answer the service never sends."""
    shown = [example for example in _examples() if _model_of(example) is CancelResponse]
    assert {example.get("status") for example in shown} == {"cancelled", "withdrawn"}
    assert [sorted(example) for example in shown if set(example) != set(CancelResponse.model_fields)] == []


def test_the_schedule_answer_the_api_doc_shows_has_every_field_of_the_answer() -> None:
    """The ``POST /schedule`` 200 is shown whole, so a field the answer gains (``time_budget_ms``,
    round 46: the budget a caller's deadline left the plan) is one the reader sees there too."""
    (shown,) = [example for example in _examples() if _model_of(example) is ScheduleResponse]
    assert sorted(set(ScheduleResponse.model_fields) - set(shown)) == []


def test_the_progress_answer_the_api_doc_shows_has_every_field_of_the_answer() -> None:
    """``GET /schedule/{id}`` is shown whole, each worker's counts too: its counts add up to ``total``
    only with ``cancelled``, which the example lacked, as it lacked ``cancelled_at_ms``."""
    (shown,) = [example for example in _examples() if _model_of(example) is ProgressResponse]
    assert sorted(set(ProgressResponse.model_fields) - set(shown)) == []
    for counts in shown["workers"].values():
        assert sorted(set(WorkerCounts.model_fields) - set(counts)) == []
        parts = ("queued", "running", "done", "failed", "cancelled")
        assert sum(counts[part] for part in parts) == counts["total"]
    assert sum(shown[part] for part in ("queued", "running", "done", "failed", "cancelled")) == shown["total"]
