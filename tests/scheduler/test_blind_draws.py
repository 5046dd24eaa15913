"""The length-blind bar on the draws (``scheduler.policies.blind_draws``): its floors are lower
bounds of the plays, its choice is the one every play gives, and it is asked only where the draws
outlive the plan's predictions."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler import clock
from scheduler.devices import device_profile, model_preset
from scheduler.finish_draws import draw_finishes, longest_alone
from scheduler.planner import plan
from scheduler.policies.blind_draws import least_drawn, outlived, work_floors
from scheduler.policies.problem import Problem, build_problem
from scheduler.policies.robust import SAMPLES, draw_matrix, least_mean, makespans, spreads
from scheduler.types import Inventory, PlanRequest, Trajectory, Worker

Queues = list[list[int]]


@st.composite
def small_plans(draw: st.DrawFn) -> tuple[PlanRequest, Queues, list[Queues]]:
    """One to three H100 or Ascend 910B workers of few slots (queues in waves or at once), a few
    prompts of a few samples with p90 one to ten times the p50, and three arbitrary placements in
    arbitrary orders: the plan judged and two blind plans."""
    workers = tuple(
        Worker(
            f"w{k}",
            device_profile(draw(st.sampled_from(("H100", "Ascend910B")))),
            max_num_seqs=draw(st.sampled_from((2, 4, 8, 64))),
        )
        for k in range(draw(st.integers(1, 3)))
    )
    batch = []
    for g in range(draw(st.integers(1, 4))):
        p50 = draw(st.floats(20.0, 1_500.0))
        p90 = min(4_096.0, p50 * draw(st.floats(1.0, 10.0)))
        for s in range(draw(st.integers(1, 12))):
            batch.append(Trajectory(f"p{g}", s, draw(st.integers(10, 600)), 4_096, p50, {0.5: p50, 0.9: p90}))
    request = PlanRequest(
        tuple(batch),
        Inventory(workers, model_preset("7b")),
        kv_admission=draw(st.booleans()),
        seed=draw(st.integers(0, 3)),
    )

    def placement() -> Queues:
        queues: Queues = [[] for _ in workers]
        for i in draw(st.permutations(range(len(batch)))):
            queues[draw(st.integers(0, len(workers) - 1))].append(i)
        return queues

    return request, placement(), [placement(), placement()]


def _draws(request: PlanRequest) -> tuple[Problem, np.ndarray]:
    spread = spreads(request.trajectories)
    assert spread is not None
    return build_problem(request), draw_matrix(spread, np.random.default_rng(request.seed), SAMPLES)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(small_plans())
def test_the_floors_never_exceed_a_play(case: tuple[PlanRequest, Queues, list[Queues]]) -> None:
    request, queues, _ = case
    problem, draws = _draws(request)
    played = draw_finishes(problem.costs, problem.prompts, queues, draws, request.kv_admission)
    every = range(len(queues))
    assert (work_floors(problem, queues, draws, every) <= played * (1 + 1e-9)).all()
    assert (longest_alone(problem.costs, problem.prompts, queues, draws, every) <= played * (1 + 1e-9)).all()


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(small_plans())
def test_the_choice_is_the_one_every_play_gives(case: tuple[PlanRequest, Queues, list[Queues]]) -> None:
    request, queues, blinds = case
    problem, draws = _draws(request)
    reserve = request.kv_admission
    points = problem.finishes(queues, reserve)
    every = [makespans(problem, q, draws, reserve) for q in (queues, *blinds)]
    chosen = least_drawn(problem, queues, points, blinds, draws, reserve, float("inf"))
    assert chosen == least_mean(every), [float(m.mean()) for m in every]


def _batch(spread_of: dict[int, float]) -> tuple[Trajectory, ...]:
    """32 prompts x 16 samples of tight predictions (p90 1.25x the p50) but for the prompts in
    ``spread_of``, whose p90 is that many times their p50."""
    return tuple(
        Trajectory(f"p{g}", s, 40, 4_096, p50, {0.5: p50, 0.9: min(4_096.0, spread_of.get(g, 1.25) * p50)})
        for g in range(32)
        for p50 in [250.0 + 10 * g]
        for s in range(16)
    )


def test_only_a_plan_whose_single_drawn_items_outlast_its_predictions_goes_to_the_draws() -> None:
    # the screen that keeps the bar's plays off the long chain-of-thought headline (queues in waves,
    # set by their work: 6-step replay 40.6 -> 175.9 s when every plan was played) and on the
    # short-cot replay's plans, where one prompt's samples run to the cap on a slow card
    workers = (
        Worker("h100-0", device_profile("H100"), max_num_seqs=64),
        Worker("ascend-0", device_profile("Ascend910B"), max_num_seqs=64),
    )
    inventory = Inventory(workers, model_preset("7b"))
    verdicts = []
    for batch in (_batch({}), _batch({0: 10.0})):
        request = PlanRequest(batch, inventory, time_budget_s=0.25, kv_admission=True)
        with clock.frozen():
            result = plan(request, "lpt")
        index = {t.key: i for i, t in enumerate(batch)}
        queues = [[index[k] for k in w.items] for w in result.workers]
        problem, draws = _draws(request)
        verdicts.append(outlived(problem, queues, [w.predicted_finish_s for w in result.workers], draws))
    assert verdicts == [False, True]
