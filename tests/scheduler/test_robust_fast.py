"""A batch that runs at once on a mixed pool: the tail risk is kept on the fastest kind.

Every trajectory starts at step 0 and the makespan is one trajectory's time on the worker it
landed on. A trajectory predicted short that runs long (math100: 554 tokens predicted, p90 589,
2,107 true) costs about twice as much on an Ascend 910B as on an H100.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler import clock
from scheduler.devices import device_profile, model_preset
from scheduler.finish import queue_finishes
from scheduler.planner import plan
from scheduler.policies import fastest_plain, robust_fast
from scheduler.policies import lpt as lpt_module
from scheduler.policies.base import Placement
from scheduler.policies.outlier_draws import outlier_draws, outlier_means
from scheduler.policies.problem import Problem, build_problem
from scheduler.policies.robust import SAMPLES, Z90, Spread, draw_steps, spreads
from scheduler.policies.robust_fast import at_once_hedge, fastest_first
from scheduler.simulator import SimOptions, simulate
from scheduler.stepsum import planned_steps_array
from scheduler.types import Inventory, Plan, PlanRequest, Trajectory, Worker
from tests.scheduler.fake_clock import ManualClock, SteppingClock, count_calls, slow_lpt_phase
from tests.scheduler.mixed_requests import LATER, grouped_request


def _medians(request: PlanRequest) -> tuple[Trajectory, ...]:
    """The batch without its quantiles: what a plan balanced on the predictions alone sees."""
    return tuple(dataclasses.replace(t, quantiles={}) for t in request.trajectories)


def _mean_with_one_long(request: PlanRequest, planned: Plan, long_tokens: int) -> float:
    """Mean simulated makespan over which one trajectory runs ``long_tokens`` (each equally likely),
    every other one its median: the risk the predictions' narrow p90 does not show."""
    makespans = []
    for long in request.trajectories:
        actual = {t.key: int(t.predicted_tokens) for t in request.trajectories}
        actual[long.key] = long_tokens
        options = SimOptions(steal=True, kv_admission=planned.kv_admission)
        makespans.append(
            simulate(planned, request.trajectories, actual, request.inventory, options).makespan_s
        )
    return float(np.mean(makespans))


def test_a_batch_that_runs_at_once_stays_on_the_fastest_kind_and_is_expected_to_end_soonest() -> None:
    request = grouped_request()
    longest = 2 * int(max(t.quantiles[0.9] for t in request.trajectories))
    blind = _mean_with_one_long(request, plan(request, "round_robin"), longest)
    balanced = _mean_with_one_long(
        request, plan(dataclasses.replace(request, trajectories=_medians(request)), "lpt"), longest
    )
    for policy in ("lpt", "cpsat"):
        planned = plan(request, policy)
        assert [len(w.items) for w in planned.workers[2:]] == [0, 0]  # nothing on the Ascends
        # one sample running twice the batch's longest p90, any one: sooner than length-blind and
        # than the plan balanced on the predictions (which gives the Ascends a third of the batch)
        expected = _mean_with_one_long(request, planned, longest)
        assert expected < blind
        assert expected < 0.9 * balanced


def test_the_fastest_kind_takes_the_longest_units_up_to_its_slots_and_the_next_kind_the_rest() -> None:
    problem = build_problem(grouped_request(slots=24))  # 48 slots on the H100s for 64 trajectories
    placed = fastest_first(problem)
    assert placed is not None
    assert [len(q) for q in placed[:2]] == [24, 24]
    assert sum(len(q) for q in placed[2:]) == 16
    on_h100 = [problem.steps[i] for q in placed[:2] for i in q]
    on_ascend = [problem.steps[i] for q in placed[2:] for i in q]
    assert min(on_h100) >= max(on_ascend)  # the slow kind gets the shortest predictions


def test_there_is_no_candidate_where_the_batch_does_not_run_at_once_or_the_pool_has_one_kind() -> None:
    assert fastest_first(build_problem(grouped_request(slots=15))) is None  # 64 trajectories, 60 slots
    assert fastest_first(build_problem(grouped_request(ascends=0))) is None


def test_without_quantiles_or_past_the_deadline_the_plan_is_returned_as_it_is() -> None:
    request = grouped_request()
    problem = build_problem(request)
    queues = tuple(tuple(range(w, 64, 4)) for w in range(4))  # dealt in turn, Ascends included
    placement = Placement(queues, "HEURISTIC", finish_s=tuple(problem.finishes(queues, True)))
    later = time.perf_counter() + LATER
    assert at_once_hedge(problem, request, placement, None, later) is placement
    spread = spreads(request.trajectories)
    late = at_once_hedge(problem, request, placement, spread, time.perf_counter() - 1.0)
    assert _unjudged(late, placement)
    assert at_once_hedge(problem, request, placement, spread, later) is not placement


def test_a_batch_with_a_slot_for_each_trajectory_but_queues_past_their_caches_plays_no_draws(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Long chain-of-thought: 256 trajectories on 4 x 64 slots, each queue's KV at once past its
    cache, so the queues run in waves and the batch is not one this hedge is for. Its draws would
    be played by the event loop (~10 ms a queue a draw): a 4,096-trajectory long-CoT step spent
    0.85 s of an 80 ms plan on them before finding no candidate to build."""
    request = grouped_request(slots=64, long_cot=True)
    problem = build_problem(request)
    queues = tuple(tuple(range(w, 256, 4)) for w in range(4))
    placement = Placement(queues, "HEURISTIC", finish_s=tuple(problem.finishes(queues, True)))

    def played(*_: object) -> None:
        raise AssertionError("draws played for a batch that does not run at once")

    monkeypatch.setattr(robust_fast, "outlier_means", played)
    later = time.perf_counter() + LATER
    assert at_once_hedge(problem, request, placement, spreads(request.trajectories), later) is placement


@pytest.mark.parametrize(("seconds_left", "built"), [(5.0, False), (6.0, True)])
def test_the_comparison_starts_only_if_its_first_draws_project_it_before_the_deadline(
    monkeypatch: pytest.MonkeyPatch, seconds_left: float, built: bool
) -> None:
    """The first ``TIMED`` (4) draws of the plan seem to take a second: the plays a verdict needs
    at the least (``CLEAR``, 8 draws of both plans, those 4 aside) then end 3 s after them, 6 s
    from the deadline's reference (the hedge first reads the clock once, to see that its deadline
    has not passed). Under the service's 80 ms default that projection is what kept the candidate
    from being built at 1,024 trajectories (building it and playing a first draw cost 14-16 ms)."""
    request = grouped_request()
    problem = build_problem(request)
    queues = tuple(tuple(range(w, 64, 4)) for w in range(4))
    placement = Placement(queues, "HEURISTIC", finish_s=tuple(problem.finishes(queues, True)))
    spread = spreads(request.trajectories)
    clock = SteppingClock()  # read at the start, then once before the timed draws and once after them
    monkeypatch.setattr(time, "perf_counter", clock.now)
    calls: list[int] = []

    def candidate(*_: object) -> None:
        calls.append(1)  # built: no candidate after all, so the plan is returned, judged

    monkeypatch.setattr(robust_fast, "_fastest", candidate)
    hedged = at_once_hedge(problem, request, placement, spread, clock.seconds + seconds_left)
    assert hedged.queues == placement.queues
    assert bool(calls) == built
    assert hedged.at_once == (robust_fast.KEPT if built else robust_fast.UNJUDGED)


def _per_draw(
    problem: Problem, queues: Sequence[Sequence[int]], spread: Spread, reserve: bool, seed: int
) -> list[float]:
    """``outlier_means`` the way the hedge played it first, one draw at a time: the draw and its
    copy with every queue's longest trajectory stretched (``queue_finishes`` each), the makespan
    with the outlier on each worker weighed by its share of the batch."""
    medians, sigmas, caps = spread
    longest = int(planned_steps_array(np.minimum(caps, medians * np.exp(sigmas * Z90))).max(initial=1))
    limits = planned_steps_array(caps).tolist()
    rng, means = np.random.default_rng(seed), []
    for _ in range(SAMPLES):
        steps = draw_steps(spread, rng)
        stretched = list(steps)
        for queue in queues:
            if queue:
                i = max(queue, key=lambda j: steps[j])
                stretched[i] = max(steps[i], min(longest, limits[i]))
        drawn = queue_finishes(problem.costs, problem.prompts, steps, queues, reserve)
        outlier = queue_finishes(problem.costs, problem.prompts, stretched, queues, reserve)
        last = max(range(len(drawn)), key=lambda w: drawn[w])
        first, second = drawn[last], max((f for w, f in enumerate(drawn) if w != last), default=0.0)
        weighed = sum(len(q) * max(outlier[w], second if w == last else first) for w, q in enumerate(queues))
        means.append(weighed / sum(len(q) for q in queues))
    return means


@settings(max_examples=60, deadline=None)
@given(
    st.integers(1, 3),
    st.integers(1, 3),
    st.sampled_from([8, 64, 256]),
    st.integers(1, 120),
    st.floats(1.0, 3.0),
    st.booleans(),
    st.integers(0, 2**32 - 1),
)
def test_all_draws_in_one_pass_give_each_draws_mean_of_playing_it_alone_to_the_last_bit(
    h100s: int, ascends: int, slots: int, size: int, spread_ratio: float, reserve: bool, seed: int
) -> None:
    """Random batches that run at once (or nearly: a queue past its slots goes to the event loop),
    the trajectories dealt at random, some workers left empty: every draw's mean is the same float,
    so the sums, and the choice between candidates, are the same as the per-draw comparison's."""
    rng = np.random.default_rng(seed)
    batch = []
    for i in range(size):
        p50 = float(rng.uniform(50.0, 3_000.0))
        quantiles = {0.5: p50, 0.9: p50 * spread_ratio}
        batch.append(
            Trajectory(
                f"q{i // 4}",
                i % 4,
                int(rng.integers(10, 800)),
                int(rng.choice([1_024, 8_192])),
                p50,
                quantiles,
            )
        )
    h100, ascend = device_profile("H100"), device_profile("Ascend910B")
    workers = [Worker(f"h100-{j}", h100, max_num_seqs=slots) for j in range(h100s)]
    workers += [Worker(f"a910b-{j}", ascend, max_num_seqs=slots) for j in range(ascends)]
    request = PlanRequest(
        tuple(batch), Inventory(tuple(workers), model_preset("7b")), kv_admission=reserve, seed=seed
    )
    problem, spread = build_problem(request), spreads(request.trajectories)
    assert spread is not None
    owner = rng.integers(0, len(workers), size)
    queues = [np.flatnonzero(owner == w).tolist() for w in range(len(workers))]
    means = outlier_means(problem, queues, outlier_draws(spread, seed), reserve)
    assert means.tolist() == _per_draw(problem, queues, spread, reserve, seed)


def test_requests_without_quantiles_are_planned_as_before() -> None:
    request = grouped_request(quantiles=False)
    planned = plan(request, "lpt")
    assert any(w.items for w in planned.workers[2:])  # balanced on the predictions, Ascends included
    assert planned == dataclasses.replace(plan(request, "lpt"), wall_time_s=planned.wall_time_s)


def test_a_plan_already_at_its_deadline_is_returned_without_checking_whether_it_runs_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No draw can be played once the deadline has passed, so the at-once check would be spent for
    nothing: it cost 3 ms of a 4,096-trajectory long chain-of-thought plan already at its 80 ms
    budget, and 130 ms at 16,384 trajectories on 1,024 workers (a 200 ms budget)."""
    request = grouped_request()
    problem = build_problem(request)
    queues = tuple(tuple(range(w, 64, 4)) for w in range(4))
    placement = Placement(queues, "HEURISTIC", finish_s=tuple(problem.finishes(queues, True)))

    def checked(*_: object) -> bool:
        raise AssertionError("the at-once check ran past the deadline")

    monkeypatch.setattr(robust_fast, "_runs_at_once", checked)
    monkeypatch.setattr(robust_fast, "clock", SteppingClock(start=10.0))  # reads 11.0 first
    assert _unjudged(
        at_once_hedge(problem, request, placement, spreads(request.trajectories), 11.0), placement
    )


def test_the_candidate_is_not_built_when_building_it_would_leave_no_time_for_the_draws(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each unit the candidate places seems to take a second and the draws none: 64 units would
    end 64 s in, past a 40 s deadline, so building gives up at its own pace after 32 of them and
    the plan is returned within the deadline. Only the draws used to be projected: at 4,096 x 32
    building (31 ms) and the draws (95 ms) took a 250 ms plan 52 ms past its budget."""
    request = grouped_request()
    problem = build_problem(request)
    queues = tuple(tuple(range(w, 64, 4)) for w in range(4))
    placement = Placement(queues, "HEURISTIC", finish_s=tuple(problem.finishes(queues, True)))
    fake = ManualClock()
    monkeypatch.setattr(clock, "now", fake.now)
    for owner, name in ((robust_fast, "_take_fitting"), (fastest_plain, "_take")):  # general, written out
        monkeypatch.setattr(owner, name, _taking_a_second(getattr(owner, name), fake))
    assert _unjudged(
        at_once_hedge(problem, request, placement, spreads(request.trajectories), 40.0), placement
    )
    assert fake.seconds <= 40.0
    assert fastest_first(problem) is not None  # with time for it, there is a candidate


def _taking_a_second(take: Any, fake: ManualClock) -> Any:
    """``take`` (a worker search of the candidate's loop), each call a second on ``fake`` first."""

    def slow(*args: Any) -> Any:
        fake.seconds += 1.0
        return take(*args)

    return slow


@pytest.mark.parametrize(("budget_s", "checked"), [(1.9, False), (2.1, True)])
def test_the_at_once_check_is_not_started_with_less_than_its_price_in_lpt_phases_left(
    monkeypatch: pytest.MonkeyPatch, budget_s: float, checked: bool
) -> None:
    """The lpt phase seems to take a second and nothing else any time: the at-once check and the
    first draws are priced at ``CHECK_COST`` (1) lpt phase, so with 0.9 s left after the lpt phase
    they are not started, with 1.1 s they are. Started whenever the deadline had not passed, they
    took 100-200 ms on a loaded host and ended 16,384 x 128 plans up to 90 ms past 1 s."""
    request = dataclasses.replace(grouped_request(), time_budget_s=budget_s)
    slow_lpt_phase(monkeypatch, lpt_module)
    calls = count_calls(monkeypatch, robust_fast, "_runs_at_once")
    lpt_module.LptPolicy().plan(request, build_problem(request))
    assert bool(calls) == checked


def _unjudged(hedged: Placement, placement: Placement) -> bool:
    """Whether ``hedged`` is ``placement``'s plan, saying the hedge ran out of time on it."""
    return hedged.queues == placement.queues and hedged.at_once == robust_fast.UNJUDGED
