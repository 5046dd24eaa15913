"""``report_results`` checks its arguments before it finds it has nothing to send: ``chunk="2"`` or
``group_sizes=0`` with a step of no result (or every result aborted) returned None without a word,
and raised only on a step that had results (user66 noticed ``chunk``; user67 looked for the same shape
and found ``group_sizes``, whose mapping's sizes were checked only for the prompts that had results,
a text among them a ``TypeError`` of ``<`` naming nothing).
"""

from __future__ import annotations

import httpx
import pytest

from service.client import SchedulerClient
from tests.service.client.refusing import NOTHING, Call

# a call of a step with nothing to send -> the error it raises and its words
REFUSED: dict[str, tuple[Call, type[Exception], str]] = {
    "chunk='2'": (
        lambda c: c.report_results(1, NOTHING, chunk="2"),
        TypeError,
        "chunk: expected an int, got str",
    ),
    "chunk=0": (
        lambda c: c.report_results(1, NOTHING, chunk=0),
        ValueError,
        "chunk=0: reports per request must be at least 1",
    ),
    "group_sizes=0": (
        lambda c: c.report_results(1, NOTHING, group_sizes=0),
        ValueError,
        "group_sizes=0: a group holds at least 1 sample",
    ),
    "group_sizes={'p0': '4'}": (
        lambda c: c.report_results(1, NOTHING, group_sizes={"p0": "4"}),
        TypeError,
        "group_sizes['p0']: expected an int, got str",
    ),
    "group_sizes={'p0': 0}": (
        lambda c: c.report_results(1, NOTHING, group_sizes={"p0": 0}),
        ValueError,
        "group_sizes['p0']=0: a group holds at least 1 sample",
    ),
}


@pytest.mark.parametrize(("call", "kind", "words"), REFUSED.values(), ids=REFUSED.keys())
def test_a_bad_argument_is_refused_though_nothing_would_be_sent(
    client: SchedulerClient, sent: list[httpx.Request], call: Call, kind: type[Exception], words: str
) -> None:
    with pytest.raises(kind) as refused:
        call(client)
    assert str(refused.value) == words
    assert sent == []


def test_good_arguments_with_nothing_to_send_answer_none(
    client: SchedulerClient, sent: list[httpx.Request]
) -> None:
    """What the checks take still returns None for a step of no result, sending nothing."""
    assert client.report_results(1, NOTHING, chunk=1, group_sizes={"p0": 4}) is None
    assert client.report_results(1, NOTHING, chunk=500, group_sizes=16) is None
    assert sent == []
