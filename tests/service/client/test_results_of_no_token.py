"""A stored result that stopped or hit its cap says a length from its first token: one token out is
reported as an actual of 1, none is reported by no client (an entry of no token teaches nothing), so
a retrain asked for takes that trajectory as settled without one (``scheduler.trace.result_says_length``,
the one rule the client and ``service.learning.step_over`` read; mutants60)."""

from __future__ import annotations

import pytest

from scheduler.trace import result_says_length
from service.api.progress_schemas import ResultEntry
from service.client.actuals import actual_from_result


def _entry(finish: str, tokens: int) -> ResultEntry:
    return ResultEntry.model_validate(
        {
            "stream_id": "1-0",
            "key": "p#0",
            "prompt_id": "p",
            "sample_idx": 0,
            "worker_id": "w0",
            "attempt": 1,
            "output_tokens": tokens,
            "finish_reason": finish,
            "wall_time_s": 1.0,
            "output": "",
            "reward": None,
            "extra": {"prompt_tokens": 10},
        }
    )


@pytest.mark.parametrize("finish", ["stop", "length"])
def test_a_result_of_one_token_is_reported_as_an_actual_of_one(finish: str) -> None:
    report = actual_from_result(0, _entry(finish, 1), {}, {})
    assert report is not None
    assert (report.output_tokens, report.finish_reason) == (1, finish)
    assert result_says_length(finish, 1)


@pytest.mark.parametrize("finish", ["stop", "length"])
def test_a_result_of_no_token_is_reported_by_no_client_and_says_no_length(finish: str) -> None:
    assert actual_from_result(0, _entry(finish, 0), {}, {}) is None
    assert not result_says_length(finish, 0)
