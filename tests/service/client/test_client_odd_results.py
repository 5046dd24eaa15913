"""A result the service serves that no actual can be made of raises ``MalformedResultError`` naming the
result and its field, and ``report_results`` sends nothing; a measurement the sidecar adds in
``extra`` that is no number is left out, as a missing one is, and the report goes on.

Each case here is a failing example the client's fuzz found (``test_client_fuzz``): the result passed
the results page's schema (``ResultEntry``: a key, a float wall time, a free-form ``extra``), and
``report_results`` raised a bare ``ValueError`` of ``int()``, a ``TypeError`` or pydantic's
``ValidationError`` of its own report, naming neither the result nor that the server sent it.
"""

from __future__ import annotations

from typing import Any

import pytest

from service.api.progress_schemas import ProgressResponse, ResultEntry
from service.client import MalformedResultError, SchedulerClient, StepResults, actual_from_result

RESULT: dict[str, Any] = {
    "stream_id": "1-0", "key": "p0#0", "prompt_id": "p0", "sample_idx": 0, "worker_id": "w0", "attempt": 1,
    "output_tokens": 5, "finish_reason": "stop", "wall_time_s": 1.5, "output": "42", "reward": 1.0,
    "extra": {"prompt_tokens": 100, "max_new_tokens": 2048, "concurrency": 2.0},
}  # fmt: skip


def _entry(**changes: Any) -> ResultEntry:
    return ResultEntry.model_validate({**RESULT, **changes})


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"key": "p0", "prompt_id": None, "sample_idx": None}, "key"),  # int("p0")
        ({"key": "p0#", "prompt_id": None, "sample_idx": None}, "key"),
        ({"key": "p0#\u0661", "prompt_id": None, "sample_idx": None}, "key"),  # int() reads an Arabic 1
        ({"key": "#0", "prompt_id": None, "sample_idx": None}, "key"),  # no prompt id before the '#'
        ({"wall_time_s": float("nan")}, "wall_time_s"),
        ({"wall_time_s": float("inf")}, "wall_time_s"),
        ({"wall_time_s": float("-inf")}, "wall_time_s"),  # not raised to the 1 us floor a 0 s one gets
        ({"reward": float("nan")}, "reward"),
        ({"output_tokens": 2**70}, "output_tokens"),
        ({"sample_idx": -1}, "sample_idx"),
        ({"worker_id": "has space"}, "worker_id"),
    ],
    ids=[
        "key-no-index",
        "key-empty-index",
        "key-arabic-digit",
        "key-no-prompt",
        "nan-wall",
        "inf-wall",
        "minus-inf-wall",
        "nan-reward",
        "huge-output",
        "negative-index",
        "bad-worker",
    ],
)
def test_a_result_no_actual_can_be_made_of_raises_naming_it(changes: dict[str, Any], field: str) -> None:
    with pytest.raises(MalformedResultError) as malformed:
        actual_from_result(1, _entry(**changes), {"p0": 100}, {})
    assert (malformed.value.key, malformed.value.field) == (changes.get("key", "p0#0"), field)
    assert isinstance(malformed.value, ValueError)  # as PartialStepError: a loop's except ValueError holds


@pytest.mark.parametrize(
    "extra",
    [
        {"prompt_tokens": "x"},
        {"prompt_tokens": [100]},
        {"prompt_tokens": float("inf")},
        {"prompt_tokens": 1.5},
        {"prompt_tokens": None},
        {"prompt_tokens": -1},
        {"prompt_tokens": True},
    ],
    ids=["text", "list", "inf", "fraction", "null", "negative", "boolean"],
)
def test_a_prompt_length_in_extra_that_is_no_count_gives_way_to_the_trainer_s(extra: dict[str, Any]) -> None:
    """The trainer's own ``prompt_tokens`` mapping is used, as for a result without one (``None``
    stood over it: "prompt_tokens of 'p0' unknown" though the trainer had passed it)."""
    report = actual_from_result(1, _entry(extra=extra), {"p0": 123}, {})
    assert report is not None
    assert report.prompt_tokens == 123


@pytest.mark.parametrize(
    "extra",
    [
        {"concurrency": "x"},
        {"concurrency": [2]},
        {"concurrency": float("inf")},
        {"concurrency": float("nan")},
        {"concurrency": True},
        {"max_new_tokens": 2**70},
        {"max_new_tokens": 4},
    ],
    ids=["text", "list", "inf", "nan", "boolean", "huge-cap", "cap-below-output"],
)
def test_a_measurement_in_extra_that_is_none_is_left_out_and_the_report_goes_on(
    extra: dict[str, Any],
) -> None:
    report = actual_from_result(1, _entry(extra={"prompt_tokens": 100, **extra}), {}, {})
    assert report is not None
    assert report.prompt_tokens == 100
    assert (report.concurrency, report.max_new_tokens) == (None, None)


def test_report_results_of_a_step_with_a_malformed_result_sends_nothing() -> None:
    """Raised before the first request: the client's URL answers nothing, and nothing was tried."""
    done = {"total": 2, "queued": 0, "running": 0, "done": 2, "failed": 0}
    lists: dict[str, Any] = {"workers": {}, "dead_letter": [], "dead_letters": []}
    progress = ProgressResponse.model_validate({**done, **lists, "schedule_id": "s1"})
    results = [_entry(), _entry(key="p0#1", sample_idx=1, wall_time_s=float("nan"))]
    finished = StepResults(results=results, progress=progress)
    with SchedulerClient("http://127.0.0.1:9") as client, pytest.raises(MalformedResultError) as malformed:
        client.report_results(1, finished)
    assert (malformed.value.key, malformed.value.field) == ("p0#1", "wall_time_s")
    assert "'p0#1' makes no actual: wall_time_s" in str(malformed.value)
    assert "nothing was reported" in str(malformed.value)


@pytest.mark.parametrize("missing", ["prompt_id", "sample_idx"])
def test_a_result_with_half_the_service_s_split_is_read_from_its_key(missing: str) -> None:
    """Only both parts of the split are taken; with one of them null the key says both."""
    split: dict[str, Any] = {"key": "p7#3", "prompt_id": "p7", "sample_idx": 3}
    report = actual_from_result(1, _entry(**(split | {missing: None})), {}, {})
    assert report is not None
    assert (report.prompt_id, report.sample_idx) == ("p7", 3)


def test_a_cap_the_output_reached_exactly_is_kept_as_the_lower_bound_it_makes() -> None:
    """A ``length`` result cut at its cap: the cap equals the output, and is the report's cap."""
    extra = {"prompt_tokens": 100, "max_new_tokens": 5}
    report = actual_from_result(1, _entry(finish_reason="length", extra=extra), {}, {})
    assert report is not None
    assert report.max_new_tokens == 5


@pytest.mark.parametrize("finish", ["stop", "length"])
def test_a_one_token_result_is_an_actual_and_a_result_of_none_says_no_length(finish: str) -> None:
    """A generation is at least the token it ended on: one token (its EOS, or a cap of 1) is a length
    the predictor learns from; a result of 0 tokens (stored before every entry refused it) is none."""
    extra = {"prompt_tokens": 100, "max_new_tokens": 1}
    report = actual_from_result(1, _entry(output_tokens=1, finish_reason=finish, extra=extra), {}, {})
    assert report is not None
    assert (report.output_tokens, report.finish_reason) == (1, finish)
    assert actual_from_result(1, _entry(output_tokens=0, finish_reason=finish, extra=extra), {}, {}) is None
