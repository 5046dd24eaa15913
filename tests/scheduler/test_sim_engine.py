"""The simulator's worker engine searches a refused head's first fitting step without repeating a test.

An event's admission ends at a refused head; the search for the step at which it fits starts past
what that refusal rules out (``head_fit.search_from``), not at the next step, and the refusal holds
over later events until a sequence whose projection it counted stops: plays must not move.
"""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler import sim_alone, sim_engine, simulator
from scheduler.costmodel import WorkerCost, worker_cost
from scheduler.devices import device_profile, model_preset
from scheduler.planner import plan
from scheduler.sim_ledger import Ledger
from scheduler.simulator import SimOptions, simulate
from scheduler.types import PlanRequest, Worker
from tests.scheduler.plan_strategies import plan_requests


class _EventByEvent(sim_engine.WorkerEngine):
    """The engine played through its own methods, as a pool plays it (``run_alone`` plays the
    exact ``WorkerEngine`` on locals, a copy of the same rules)."""


class _TestedAtEveryEvent(sim_engine.WorkerEngine):
    """The engine testing a refused head again at every event, as it did before (``refused`` off)."""

    def fits(self, item: int) -> bool:
        self.refused = None
        return super().fits(item)


class _SearchFromNextStep(_TestedAtEveryEvent):
    """The engine also searching every refused head from the next step, as it did before that."""

    def _search_from(self, item: int, remaining: int) -> int:
        return self.step + 1


def _played(
    engine_type: type[sim_engine.WorkerEngine],
    cost: WorkerCost,
    prompts: list[int],
    steps: list[int],
    planned: list[int],
) -> tuple[list[float], list[float], list[int]]:
    ledger = Ledger([f"t{i}" for i in range(len(prompts))], prompts, steps, planned)
    engine = engine_type(0, cost, ledger, watermark=0.01, kv_admission=True)
    engine.enqueue(list(range(len(prompts))))
    sim_alone.run_alone(engine)
    return ledger.start, ledger.end, ledger.preemptions


def _cost(slots: int, capacity: int) -> WorkerCost:
    return worker_cost(
        Worker("w", device_profile("H100"), max_num_seqs=slots, kv_capacity_tokens=capacity),
        model_preset("7b"),
    )


def test_a_head_refused_at_an_event_is_not_tested_again_at_the_next_step(
    peak_tests: list[int],
) -> None:
    cost = _cost(8, 2_000)
    # the last item (1,200 + 400) cannot run beside the first (100 + 1,500) while it would end
    # before it; the five short items end at steps 5..9, each an event at which it is refused again
    prompts, steps = [100, 10, 10, 10, 10, 10, 1_200], [1_500, 5, 6, 7, 8, 9, 400]
    tests = peak_tests
    played = _played(sim_engine.WorkerEngine, cost, prompts, steps, steps)
    # five admitted beside the first (which starts alone, untested), the last refused at step 0;
    # the refusal bounds the wait past the short items' completions (their projections end before
    # the overflowing step), so the only other test is at 1,101, the first step at which its end
    # passes the first's
    assert tests == [0] * 6 + [1_101]
    searched = len(tests)
    assert _played(_EventByEvent, cost, prompts, steps, steps) == played
    assert tests[searched:] == [0] * 6 + [1_101]  # the engine's own held-refusal search, too
    searched = len(tests)
    assert _played(_TestedAtEveryEvent, cost, prompts, steps, steps) == played
    # tested at every completion, as before: refused again at 5..9
    assert tests[searched:] == [0] * 6 + [5, 6, 7, 8, 9, 1_101]
    searched = len(tests)
    assert _played(_SearchFromNextStep, cost, prompts, steps, steps) == played
    # searched from the next step and at every completion: tested again at 1, and at 10
    assert tests[searched:] == [0] * 6 + [1, 5, 6, 7, 8, 9, 10, 1_101]


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(1, 400), st.integers(0, 900), st.floats(0.3, 2.0)), min_size=1, max_size=50
    ),
    st.integers(1, 24),
    st.integers(1_300, 6_000),
)
def test_searching_from_the_refusal_moves_no_start_end_or_eviction(
    queue: list[tuple[int, int, float]], slots: int, capacity: int
) -> None:
    """On predicted lengths that are wrong by up to 3x either way, so sequences outlive their ends."""
    cost = _cost(slots, capacity)
    prompts = [p for p, _, _ in queue]
    steps = [min(n, capacity - p) for p, n, _ in queue]  # every item fits alone
    planned = [max(1, round(n * error)) for n, (_, _, error) in zip(steps, queue, strict=True)]
    played = _played(sim_engine.WorkerEngine, cost, prompts, steps, planned)
    assert played == _played(_SearchFromNextStep, cost, prompts, steps, planned)
    assert played == _played(_TestedAtEveryEvent, cost, prompts, steps, planned)


@settings(max_examples=200, deadline=None)
@given(
    plan_requests(max_groups=8, max_samples=6),
    st.sampled_from(["round_robin", "least_loaded"]),  # static queues; one shared queue
    st.booleans(),
    st.booleans(),
    st.randoms(use_true_random=False),
)
def test_a_refusal_held_until_it_may_clear_moves_nothing_in_a_pool(
    request: PlanRequest, policy: str, steal: bool, resume: bool, rng: random.Random
) -> None:
    """Whole simulations (stealing, shared heads, pins, affinity) on true lengths the predictions
    miss both ways: the engine that skips held refusals against the one testing at every event."""
    planned = plan(request, policy)
    actual = {t.key: rng.randint(1, t.max_new_tokens) for t in request.trajectories}
    options = SimOptions(kv_admission=True, steal=steal, resume_preempted=resume,
                         prefix_affinity=request.prefix_affinity,
                         excluded_workers=request.excluded_workers)  # fmt: skip
    played = simulate(planned, request.trajectories, actual, request.inventory, options)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(simulator, "WorkerEngine", _TestedAtEveryEvent)
        reference = simulate(planned, request.trajectories, actual, request.inventory, options)
    assert played == reference
