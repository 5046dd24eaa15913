"""The worker model: the closed form for queues admitted at once agrees with the event loop."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler import finish as finish_module
from scheduler.admission import RunningPeak, projected_peak
from scheduler.at_once import all_at_once_finish, all_at_once_finishes
from scheduler.costmodel import WorkerCost, worker_cost
from scheduler.devices import device_profile, model_preset
from scheduler.finish import queue_finishes, worker_finish
from scheduler.types import Worker

QUEUES = st.lists(st.tuples(st.integers(1, 300), st.integers(1, 600)), min_size=1, max_size=12)


@settings(max_examples=200, deadline=None)
@given(
    QUEUES,
    st.sampled_from(["H100", "Ascend910B", "A100-80GB"]),
    st.integers(1, 12),
    st.integers(900, 8_000),
    st.booleans(),
)
def test_the_closed_form_equals_the_event_loop_whenever_it_applies(
    queue: list[tuple[int, int]], kind: str, slots: int, capacity: int, reserve: bool
) -> None:
    cost = worker_cost(
        Worker("w", device_profile(kind), max_num_seqs=slots, kv_capacity_tokens=capacity), model_preset("7b")
    )
    prompts, steps = [p for p, _ in queue], [n for _, n in queue]
    closed = all_at_once_finish(cost, prompts, steps, reserve)
    played = worker_finish(cost, prompts, steps, reserve)
    if closed is not None:
        assert closed == pytest.approx(played, rel=1e-12)
    if len(queue) > slots:
        assert closed is None  # a queue longer than the slots cannot start at once


def test_a_queue_that_outgrows_the_cache_is_left_to_the_event_loop() -> None:
    cost = worker_cost(
        Worker("w", device_profile("H100"), max_num_seqs=8, kv_capacity_tokens=2_000), model_preset("7b")
    )
    prompts, steps = [100] * 4, [400] * 4  # 4 x 500 tokens at the end: exactly the capacity
    assert all_at_once_finish(cost, prompts, steps) == pytest.approx(
        worker_finish(cost, prompts, steps), rel=1e-12
    )
    assert all_at_once_finish(cost, prompts, [401] * 4) is None  # one token more each: preemption


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(QUEUES | st.just([]), st.sampled_from(["H100", "Ascend910B"])), min_size=1, max_size=5
    ),
    st.integers(1, 12),
    st.integers(900, 8_000),
    st.booleans(),
)
def test_many_queues_at_once_give_each_queues_closed_form_to_the_last_bit(
    queues: list[tuple[list[tuple[int, int]], str]], slots: int, capacity: int, reserve: bool
) -> None:
    costs = [
        worker_cost(Worker(f"w{k}", device_profile(kind), max_num_seqs=slots, kv_capacity_tokens=capacity),
                    model_preset("7b"))
        for k, (_, kind) in enumerate(queues)
    ]  # fmt: skip
    ordered = [sorted(queue, key=lambda item: -item[1]) for queue, _ in queues]  # longest first, stable
    flat = [item for queue in ordered for item in queue]
    bounds = [0, *itertools.accumulate(len(queue) for queue in ordered)]
    prompts = np.array([p for p, _ in flat], dtype=np.int64)
    steps = np.array([n for _, n in flat], dtype=np.int64)
    together = all_at_once_finishes(costs, prompts, steps, bounds, reserve)
    for cost, queue, finish in zip(costs, ordered, together, strict=True):
        alone = all_at_once_finish(cost, [p for p, _ in queue], [n for _, n in queue], reserve)
        assert finish == alone  # exactly: the same arithmetic in the same order
    shuffled = [list(reversed(queue)) for queue in ordered]  # any order: the event loop's results
    items = list(range(len(flat)))
    positions = [items[bounds[k] : bounds[k + 1]][::-1] for k in range(len(ordered))]
    finishes = queue_finishes(costs, prompts.tolist(), steps.tolist(), positions, reserve)
    for cost, queue, finish in zip(costs, shuffled, finishes, strict=True):
        assert finish == worker_finish(cost, [p for p, _ in queue], [n for _, n in queue], reserve)


@settings(max_examples=200, deadline=None)
@given(QUEUES, st.integers(1, 12), st.integers(900, 8_000))
def test_under_kv_admission_the_whole_queue_starts_at_once_exactly_when_its_projected_peak_fits(
    queue: list[tuple[int, int]], slots: int, capacity: int
) -> None:
    cost, prompts, steps = _worker_queue("H100", slots, capacity, queue)
    starts_at_once = len(queue) <= slots and projected_peak(prompts, steps) <= capacity
    closed = all_at_once_finish(cost, prompts, steps, reserve=True)
    assert (closed is not None) == starts_at_once
    if closed is not None:
        assert closed == worker_finish(cost, prompts, steps, reserve=True)  # to the last bit


def test_kv_admission_keeps_the_cache_full_where_final_length_reservation_left_it_half_empty() -> None:
    cost = worker_cost(
        Worker("w", device_profile("H100"), max_num_seqs=8, kv_capacity_tokens=1_100), model_preset("7b")
    )
    # finals 1,000 + 110: reserving both would need 1,110; the short one ends long before the long peaks
    assert all_at_once_finish(cost, [100, 100], [900, 10], reserve=True) is not None
    assert all_at_once_finish(cost, [100, 100], [900, 10], reserve=True) == worker_finish(
        cost, [100, 100], [900, 10], reserve=True
    )


@settings(max_examples=150, deadline=None)
@given(QUEUES, st.integers(1, 6), st.integers(900, 4_000), st.booleans(), st.floats(0.0, 1.5))
def test_a_play_stopped_at_a_bound_never_reports_a_finish_below_it(
    queue: list[tuple[int, int]], slots: int, capacity: int, reserve: bool, share: float
) -> None:
    # Candidate orders are played against the best finish so far: a play that reaches it stops,
    # and must then report at least the bound (never a false improvement) and at most the finish.
    cost, prompts, steps = _worker_queue("H100", slots, capacity, queue)
    finish = worker_finish(cost, prompts, steps, reserve)
    bound = share * finish
    stopped = worker_finish(cost, prompts, steps, reserve, stop_at=bound)
    if bound > finish:
        assert stopped == finish  # never reached: the whole play
    else:
        assert bound <= stopped <= finish


class _EveryTest(finish_module._WorkerRun):
    """The worker model with every admission test run in full: what skipping refusals must equal."""

    def _peak_fits(self, item: int) -> bool:
        self.refused = None
        return super()._peak_fits(item)

    def _steps_to_fit(self, run: int) -> int:
        self.refused = None
        return super()._steps_to_fit(run)


def _worker_queue(
    device: str, slots: int, capacity: int, queue: list[tuple[int, int]]
) -> tuple[WorkerCost, list[int], list[int]]:
    """A 7b worker of ``device`` and ``queue``'s prompts and steps, for the worker-model properties."""
    worker = Worker("w", device_profile(device), max_num_seqs=slots, kv_capacity_tokens=capacity)
    return worker_cost(worker, model_preset("7b")), [p for p, _ in queue], [n for _, n in queue]


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.tuples(st.integers(1, 400), st.integers(1, 900)), min_size=1, max_size=60),
    st.integers(1, 16),
    st.integers(1_300, 6_000),  # every item fits alone (the validated case)
)
def test_skipping_admission_tests_that_must_fail_changes_no_finish(
    queue: list[tuple[int, int]], slots: int, capacity: int
) -> None:
    cost, prompts, steps = _worker_queue("Ascend910B", slots, capacity, queue)
    assert worker_finish(cost, prompts, steps, reserve=True) == _EveryTest(cost, prompts, steps, True).run()


def test_a_refused_admission_is_not_tested_again_until_it_could_fit(peak_tests: list[int]) -> None:
    cost = worker_cost(
        Worker("w", device_profile("H100"), max_num_seqs=8, kv_capacity_tokens=2_000), model_preset("7b")
    )
    # the last item (1,200 + 400) cannot run beside the first (100 + 1,500) at any step, so it
    # waits for it; the five short items ending meanwhile change nothing the first one's end needs
    prompts, steps = [100, 10, 10, 10, 10, 10, 1_200], [1_500, 5, 6, 7, 8, 9, 400]
    tests = peak_tests
    skipped = worker_finish(cost, prompts, steps, reserve=True)
    # five admitted beside the first (which starts alone), all untested: their final sizes and the
    # first's sum to 1,685 of 2,000 (``_surely_fits``); the last refused once; waiting cannot let
    # it in while it would end before the first (its final size at its end beside the first's
    # growing context), so it is tested once more, at 1,101, the first step at which its end
    # passes the first's; it starts when the first has ended and nothing runs (untested again)
    assert tests == [0, 1_101]
    assert skipped == _EveryTest(cost, prompts, steps, True).run()
    # in full: refused again at every completion, and the wait searched again after each
    assert tests[2:] == [0, 1, 5, 6, 7, 8, 9, 10, 1_101]


class _FullCheck(finish_module._WorkerRun):
    """The worker model checking the running set alone past every candidate's end, as the
    simulator does (``RunningPeak.alone_fits`` off)."""

    def __init__(self, cost: WorkerCost, prompts: list[int], steps: list[int], reserve: bool) -> None:
        super().__init__(cost, prompts, steps, reserve)
        self.peak = RunningPeak()


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.tuples(st.integers(1, 400), st.integers(1, 900)), min_size=1, max_size=60),
    st.integers(1, 40),
    st.integers(1_300, 6_000),  # every item fits alone (the validated case)
)
def test_trusting_the_running_set_alone_past_a_candidates_end_changes_no_finish(
    queue: list[tuple[int, int]], slots: int, capacity: int
) -> None:
    cost, prompts, steps = _worker_queue("H100", slots, capacity, queue)
    assert worker_finish(cost, prompts, steps, reserve=True) == _FullCheck(cost, prompts, steps, True).run()


class _Projected(finish_module._WorkerRun):
    """The worker model running the projected-peak test for every admission it makes beside others."""

    def _surely_fits(self, item: int, remaining: int) -> bool:
        return False


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.tuples(st.integers(1, 400), st.integers(1, 900)), min_size=1, max_size=60),
    st.integers(1, 40),
    st.integers(1_300, 12_000),  # every item fits alone (the validated case)
)
def test_admitting_by_the_sum_of_final_sizes_changes_no_finish(
    queue: list[tuple[int, int]], slots: int, capacity: int
) -> None:
    cost, prompts, steps = _worker_queue("H100", slots, capacity, queue)
    assert worker_finish(cost, prompts, steps, reserve=True) == _Projected(cost, prompts, steps, True).run()


def test_items_whose_final_sizes_fit_the_cache_together_start_without_the_projected_peak_test(
    peak_tests: list[int],
) -> None:
    # the test costs O(running) a call and ran for every admission: 28% of those that pass in the
    # replay's plays need no test, since the projection never exceeds the sum of final sizes
    cost, prompts, steps = _worker_queue("H100", 16, 20_000, [(500, 900 + 40 * k) for k in range(12)])
    tests = peak_tests
    finish = worker_finish(cost, prompts, steps, reserve=True)
    assert sum(p + n for p, n in zip(prompts, steps, strict=True)) <= 20_000  # the case stated
    assert tests == []
    assert finish == _Projected(cost, prompts, steps, True).run()
    assert len(tests) == len(prompts) - 1  # in full: every admission beside the first


def test_a_head_the_wait_search_finds_fitting_starts_there_without_a_second_test(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # the third item is refused at step 0 and again at 311 (the wait search's jump); the search
    # finds it fits at 711, before the second ends (858): it starts there on that same verdict
    cost, prompts, steps = _worker_queue("H100", 8, 1_504, [(149, 23), (214, 858), (285, 658)])
    tests: list[tuple[int, bool]] = []
    overflow = RunningPeak.overflow

    def counted(self: RunningPeak, *args: int) -> tuple[int, int] | None:
        over = overflow(self, *args)
        tests.append((args[0], over is None))
        return over

    monkeypatch.setattr(RunningPeak, "overflow", counted)
    finish = worker_finish(cost, prompts, steps, reserve=True)
    assert tests == [(0, False), (311, False), (711, True)]
    assert finish == _Projected(cost, prompts, steps, True).run()
    assert tests[3:] == [(0, True), (0, False), (311, False), (711, True), (711, True)]  # in full
