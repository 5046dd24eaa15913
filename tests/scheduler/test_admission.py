"""Projected-peak KV admission: the peak is what the running set really holds at its fullest step."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.admission import RunningPeak, expected_remaining, peak_fits, projected_peak


def _brute_force(contexts: list[int], remaining: list[int]) -> int:
    horizon = max((max(r, 1) for r in remaining), default=0)
    return max(
        (
            sum(c + t + 1 for c, r in zip(contexts, remaining, strict=True) if max(r, 1) > t)
            for t in range(horizon)
        ),
        default=0,
    )


def test_an_empty_batch_holds_nothing() -> None:
    assert projected_peak([], []) == 0


def test_a_lone_sequence_peaks_at_its_final_length() -> None:
    assert projected_peak([100], [50]) == 150


def test_a_short_sequence_frees_its_room_before_a_long_one_peaks() -> None:
    # reservation would count 100+10 and 100+1000 together (1,210); the short one ends at step 10
    assert projected_peak([100, 100], [10, 1000]) == 1100


def test_an_overdue_sequence_is_counted_as_ending_at_its_next_step() -> None:
    assert projected_peak([500], [-20]) == 501


def test_a_candidate_is_admitted_exactly_when_the_peak_fits() -> None:
    assert peak_fits([100], [10], prompt=100, steps=1000, capacity=1100)
    assert not peak_fits([100], [10], prompt=100, steps=1000, capacity=1099)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 300), st.integers(-5, 60)), max_size=12),
)
def test_the_peak_equals_the_largest_step_by_step_holding(pairs: list[tuple[int, int]]) -> None:
    contexts, remaining = [c for c, _ in pairs], [r for _, r in pairs]
    assert projected_peak(contexts, remaining) == _brute_force(contexts, remaining)


def _tracked(pairs: list[tuple[int, int]]) -> RunningPeak:
    running = RunningPeak()
    for end, offset in pairs:
        running.add(end, offset)
    return running


@settings(max_examples=300, deadline=None)
@given(
    running=st.lists(st.tuples(st.integers(0, 80), st.integers(-60, 300)), max_size=10),
    step=st.integers(0, 60),
    candidate=st.tuples(st.integers(1, 300), st.integers(1, 60)),
    capacity=st.integers(0, 4_000),
)
def test_the_running_set_admits_exactly_what_peak_fits_admits(
    running: list[tuple[int, int]], step: int, candidate: tuple[int, int], capacity: int
) -> None:
    # running: (predicted end step, offset), possibly overdue (end <= step); contexts kept non-negative
    pairs = [(end, max(offset, -step)) for end, offset in running]
    contexts = [offset + step for _, offset in pairs]
    remaining = [end - step for end, _ in pairs]
    prompt, steps = candidate
    want = peak_fits(contexts, remaining, prompt, steps, capacity)
    assert _tracked(pairs).fits(step, prompt - step, step + steps, capacity) == want


def test_a_removed_sequence_no_longer_counts() -> None:
    running = _tracked([(50, 100), (10, 100), (50, 7)])
    running.remove(50, 100)
    assert (running.ends, running.offsets, running.total) == ([10, 50], [100, 7], 107)


def test_a_sequence_within_its_prediction_is_expected_to_run_the_rest_of_it() -> None:
    assert expected_remaining(400, 0) == 400
    assert expected_remaining(400, 399) == 1


def test_a_sequence_past_its_prediction_is_expected_to_run_a_quarter_of_it_again() -> None:
    assert expected_remaining(400, 400) == 100
    assert expected_remaining(400, 499) == 1
    assert expected_remaining(400, 500) == 100  # it outlived the extension too: another quarter
    assert expected_remaining(400, 530) == 70


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 5_000), st.integers(0, 20_000))
def test_the_expected_end_never_passes_and_moves_only_when_reached(planned: int, generated: int) -> None:
    left = expected_remaining(planned, generated)
    assert left >= 1
    if left > 1:  # one step later the same end is expected
        assert expected_remaining(planned, generated + 1) == left - 1


def test_a_set_promised_within_the_cache_is_not_checked_past_the_candidates_end() -> None:
    # one member holds 100 + 2,000 at its end, step 2,000; a candidate of 10 steps ends long before
    pairs = [(2_000, 100)]
    assert _tracked(pairs).overflow(0, 10, 10, 1_500) == (2_000, 600)  # the set alone, checked
    promised = RunningPeak(alone_fits=True)
    promised.add(2_000, 100)
    assert promised.overflow(0, 10, 10, 1_500) is None  # the caller vouches for the set alone


@settings(max_examples=300, deadline=None)
@given(
    arrivals=st.lists(st.tuples(st.integers(0, 40), st.integers(1, 300), st.integers(1, 90)), max_size=14),
    capacity=st.integers(300, 3_000),
)
def test_on_exact_lengths_a_set_admitted_by_the_test_needs_no_check_past_the_candidates_end(
    arrivals: list[tuple[int, int, int]], capacity: int
) -> None:
    """What ``scheduler.finish`` promises (``RunningPeak.alone_fits``): members leave at their ends,
    each was admitted by the test or started alone and fits alone; every test then answers as the
    full check does, refusals included (where they pass the cache, and by how much)."""
    checked, promised = RunningPeak(), RunningPeak(alone_fits=True)
    step = 0
    for wait, prompt, steps in arrivals:
        step += wait
        for end, offset in [(e, o) for e, o in zip(checked.ends, checked.offsets, strict=True) if e <= step]:
            checked.remove(end, offset)
            promised.remove(end, offset)
        if prompt + steps > capacity:
            continue  # could never finish on this worker
        end, offset = step + steps, prompt - step
        over = checked.overflow(step, offset, end, capacity)
        assert promised.overflow(step, offset, end, capacity) == over
        if over is None or not checked.ends:  # admitted, or started alone untested
            checked.add(end, offset)
            promised.add(end, offset)
