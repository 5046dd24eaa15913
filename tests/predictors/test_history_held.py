"""``History.held``: the rows held when it is called, joined later outside the lock (learn51: a
retrain's snapshot joined 1.2 M rows under the lock every predict takes)."""

from __future__ import annotations

from predictors.history import History
from scheduler.trace import TraceRow


def _rows(step: int) -> list[TraceRow]:
    return [TraceRow(step, f"p{p}", i, 10, 100 + 10 * p + i, 4096) for p in range(3) for i in range(2)]


def test_held_rows_join_to_the_trace_held_when_asked_and_not_to_rows_appended_after() -> None:
    history = History()
    history.append(_rows(0))
    history.append(_rows(1))
    held = history.held()
    expected = history.trace.output_tokens.tolist()
    history.append(_rows(2))
    assert held().output_tokens.tolist() == expected
    assert len(history) == 18  # the later rows are held all the same


def test_an_empty_history_holds_an_empty_trace() -> None:
    assert len(History().held()()) == 0


def test_a_held_join_keeps_the_rows_appended_after_it_in_the_history() -> None:
    """The join replaces the chunks it joined where they are still held: the rows appended since stay
    held, after them, and the snapshot has none of them."""
    history = History()
    for step in range(2):
        history.append(_rows(step))
    held = history.held()
    history.append(_rows(2))
    assert held().step.tolist() == [0] * 6 + [1] * 6
    assert history.trace.step.tolist() == [0] * 6 + [1] * 6 + [2] * 6
