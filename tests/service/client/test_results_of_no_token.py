"""A stored result that stopped or hit its cap says a length from its first token: one token out is
reported as an actual of 1, none is reported by no client (an entry of no token teaches nothing), so
a retrain asked for takes that trajectory as settled without one (``scheduler.trace.result_says_length``,
the one rule the client and ``service.learning.step_over`` read; mutants60)."""

from __future__ import annotations

import pytest

from scheduler.trace import result_says_length
from service.client.actuals import actual_from_result
from tests.service.finished import stored_entry


@pytest.mark.parametrize("finish", ["stop", "length"])
def test_a_result_of_one_token_is_reported_as_an_actual_of_one(finish: str) -> None:
    report = actual_from_result(0, stored_entry(finish, 1), {}, {})
    assert report is not None
    assert (report.output_tokens, report.finish_reason) == (1, finish)
    assert result_says_length(finish, 1)


@pytest.mark.parametrize("finish", ["stop", "length"])
def test_a_result_of_no_token_is_reported_by_no_client_and_says_no_length(finish: str) -> None:
    assert actual_from_result(0, stored_entry(finish, 0), {}, {}) is None
    assert not result_says_length(finish, 0)
