"""Queues laid out longest first (``at_once.longest_first_layout``): the three-key sort's order."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.at_once import longest_first_layout


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 40), st.integers(0, 5_000)), max_size=300),
    st.integers(0, 2**40),
)
def test_the_layout_is_queue_by_queue_longest_first_ties_by_index_as_the_lexsort_orders(
    items: list[tuple[int, int]], base: int
) -> None:
    # the planner's band rounds lay their queues out this way: any lengths, ties in either order,
    # and where the key would be too wide for int64 (ties up to 2**61) the lexsort itself
    queue = np.array([q for q, _ in items], dtype=np.int64)
    steps = np.array([base + n for _, n in items], dtype=np.int64)
    ties = np.arange(len(items), dtype=np.int64)
    for tie, below in ((ties, len(items)), (ties[::-1].copy(), len(items)), (ties, 2**61)):
        expected = np.lexsort((tie, -steps, queue))
        assert longest_first_layout(queue, steps, tie, below).tolist() == expected.tolist()


def test_items_of_equal_length_keep_their_index_order_within_their_queue() -> None:
    queue = np.array([1, 0, 1, 0, 1], dtype=np.int64)
    steps = np.array([7, 3, 7, 9, 8], dtype=np.int64)
    ties = np.array([4, 3, 2, 1, 0], dtype=np.int64)
    # queue 0: 9 (item 3) then 3 (item 1); queue 1: 8 (item 4), then the two 7s by tie: 2 before 4
    assert longest_first_layout(queue, steps, ties, 5).tolist() == [3, 1, 4, 2, 0]


def test_no_items_lay_out_to_an_empty_permutation_that_indexes_as_the_lexsorts_does() -> None:
    empty = np.zeros(0, dtype=np.int64)
    layout = longest_first_layout(empty, empty, empty, 0)
    assert layout.dtype == np.lexsort((empty, -empty, empty)).dtype
    assert empty[layout].tolist() == []  # a float array of no items is no index
