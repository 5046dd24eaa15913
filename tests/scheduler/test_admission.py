"""Projected-peak KV admission: the peak is what the running set really holds at its fullest step."""

from __future__ import annotations

import bisect
from collections.abc import Iterator
from itertools import accumulate

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler import admission
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


def _held(pairs: list[tuple[int, int]], step: int, candidate: tuple[int, int], v: int) -> int:
    """What the running set and the candidate ``(offset, end)`` hold after the step ending at ``v``
    (``RunningPeak.overflow``'s definition: a member past its end counts at ``step + 1``)."""
    offset, end = candidate
    running = sum(o + v for e, o in pairs if max(e, step + 1) >= v)
    return running + (offset + v if v <= end else 0)


RUNNING_SETS = st.lists(st.tuples(st.integers(0, 90), st.integers(-60, 300)), max_size=14)


@settings(max_examples=400, deadline=None)
@given(
    running=RUNNING_SETS,
    step=st.integers(0, 60),
    candidate=st.tuples(st.integers(0, 300), st.integers(1, 60)),
    capacity=st.integers(0, 4_000),
)
def test_what_the_pieces_cover_is_within_the_cache_at_every_step(
    running: list[tuple[int, int]], step: int, candidate: tuple[int, int], capacity: int
) -> None:
    """``covered`` claims either that every step fits (-1) or that every step up to an end fits;
    counted step by step, neither claim is ever wrong."""
    pairs = [(end, max(offset, -step)) for end, offset in running]  # no context negative at ``step``
    prompt, steps = candidate
    offset, end = prompt - step, step + steps
    covered = _tracked(pairs).covered(step, offset, end, capacity)
    last = max([end, *(e for e, _ in pairs)])
    upto = last if covered < 0 else sorted(e for e, _ in pairs)[covered - 1] if covered else step
    assert all(_held(pairs, step, (offset, end), v) <= capacity for v in range(step + 1, upto + 1))


def _one_pass(peak: RunningPeak, step: int, offset: int, end: int, capacity: int) -> tuple[int, int] | None:
    """``RunningPeak.overflow`` as it was before ``covered``: the whole pass over the running set."""
    ends, offsets, n = peak.ends, peak.offsets, len(peak.ends)
    now = peak.total + offset + (step + 1) * (n + 1)
    if now > capacity:
        return step + 1, now - capacity
    hi = bisect.bisect_right(ends, end)
    above = sum(offsets[hi:])
    if hi < n and not peak.alone_fits:
        totals = [sum(offsets[j:]) + ends[j] * (n - j) for j in range(hi, n)]
        if max(totals) > capacity:
            j = max(j for j in range(hi, n) if totals[j - hi] == max(totals))
            return ends[j], max(totals) - capacity
    lo = bisect.bisect_left(ends, end, 0, hi)
    at_end = above + sum(offsets[lo:hi]) + offset + end * (n - lo + 1)
    if at_end > capacity:
        return end, at_end - capacity
    low = bisect.bisect_right(ends, step + 1, 0, hi)
    held = {j: sum(offsets[j:]) + ends[j] * (n - j + 1) + offset for j in range(low, hi)}
    if not held or max(held.values()) <= capacity:
        return None
    j = max(j for j, h in held.items() if h == max(held.values()))
    return ends[j], held[j] - capacity


@settings(max_examples=400, deadline=None)
@given(
    running=RUNNING_SETS,
    step=st.integers(0, 60),
    candidate=st.tuples(st.integers(0, 300), st.integers(1, 60)),
    capacity=st.integers(0, 4_000),
    alone_fits=st.booleans(),
)
def test_the_overflow_named_is_the_one_the_whole_pass_names(
    running: list[tuple[int, int]], step: int, candidate: tuple[int, int], capacity: int, alone_fits: bool
) -> None:
    """Refusals included: where it passes the cache and by how much (``head_fit`` jumps by them)."""
    peak = RunningPeak(alone_fits=alone_fits)
    for end, offset in running:
        peak.add(end, max(offset, -step))
    prompt, steps = candidate
    args = (step, prompt - step, step + steps, capacity)
    assert peak.overflow(*args) == _one_pass(peak, *args)


def test_a_candidate_with_room_to_spare_is_admitted_without_a_pass_over_the_running_set(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # 100 running, ending at steps 10..109, each holding 50 + its steps so far: the cache of 30,000
    # holds all of them at their final sizes (at most 109 * 100 + 5,000 = 15,900) and the candidate
    peak = _tracked([(10 + i, 50) for i in range(100)])
    passed: list[int] = []

    def counted(values: list[int]) -> Iterator[int]:
        values = list(values)
        passed.append(len(values))
        return accumulate(values)

    monkeypatch.setattr(admission, "accumulate", counted)
    assert peak.overflow(0, 100, 500, 30_000) is None
    assert passed == []
    # at step v the 110 - v still running and the candidate hold (110 - v)(50 + v) + 100 + v, at
    # most 6,530 (v = 30, 31): a cache of 6,500 refuses it there, and the pass runs only over the
    # ends that no piece could cover
    assert peak.overflow(0, 100, 500, 6_500) == (31, 30) == _one_pass(peak, 0, 100, 500, 6_500)
    assert passed
    assert passed[0] < 100


@settings(max_examples=400, deadline=None)
@given(
    running=st.lists(st.tuples(st.integers(1, 400), st.integers(-40, 120)), min_size=1, max_size=60),
    step=st.integers(0, 40),
    candidate=st.tuples(st.integers(0, 120), st.integers(1, 400)),
    margin=st.integers(-40, 40),
    alone_fits=st.booleans(),
)
def test_near_the_cache_limit_the_pieces_decide_as_the_whole_pass_does(
    running: list[tuple[int, int]],
    step: int,
    candidate: tuple[int, int],
    margin: int,
    alone_fits: bool,
) -> None:
    """Where the cache is within a few tokens of the projected peak, the pieces' bounds (their
    finals kept as an upper bound) are tightest: every answer is still the whole pass's, and
    every step ``covered`` vouches for is within the cache, counted step by step."""
    pairs = [(step + 1 + end, max(offset, -step)) for end, offset in running]  # none overdue
    prompt, steps = candidate
    offset, end = prompt - step, step + steps
    last = max(end, *(e for e, _ in pairs))
    peak = max(_held(pairs, step, (offset, end), v) for v in range(step + 1, last + 1))
    capacity = peak + margin
    tracked = RunningPeak(alone_fits=alone_fits)
    for e, o in pairs:
        tracked.add(e, o)
    assert tracked.overflow(step, offset, end, capacity) == _one_pass(tracked, step, offset, end, capacity)
    covered = tracked.covered(step, offset, end, capacity)
    upto = last if covered < 0 else sorted(e for e, _ in pairs)[covered - 1] if covered else step
    assert all(_held(pairs, step, (offset, end), v) <= capacity for v in range(step + 1, upto + 1))


def test_a_piece_sums_its_offsets_only(monkeypatch: pytest.MonkeyPatch) -> None:
    # the final contexts past a piece are bounded, not summed: a piece's members each take at least
    # the piece's first end with them (ends ascend), so one sum a piece instead of two
    peak = _tracked([(10 + i, 50) for i in range(100)])
    summed: list[list[int]] = []

    def counted(values: list[int]) -> int:
        summed.append(list(values))
        return sum(values)

    monkeypatch.setattr(admission, "sum", counted, raising=False)
    assert peak.covered(0, 100, 500, 6_500) > 0  # the case above: pieces, then the pass
    assert summed  # pieces ran
    assert all(set(values) == {50} for values in summed)  # offsets only, never the ends
