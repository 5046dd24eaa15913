"""A band round plans a worker that passes its slots at the slowdown its kind's waves showed in the
round before, where its own group ran at once and so showed none (``calibrate.in_waves``)."""

from __future__ import annotations

import pytest

import scheduler.policies.bandsearch as bandsearch
from scheduler import clock
from scheduler.benchgen import bench_request
from scheduler.devices import device_profile, model_preset
from scheduler.planner import plan
from scheduler.policies.bandround import History
from scheduler.policies.calibrate import in_waves
from scheduler.policies.lpt_assign import lpt_assignment
from scheduler.policies.problem import build_problem
from scheduler.types import Inventory, PlanRequest, Trajectory, Worker


def _pool(devices: list[str], slots: int, trajectories: int) -> PlanRequest:
    workers = tuple(
        Worker(f"w{i}", device_profile(device), max_num_seqs=slots, kv_capacity_tokens=400_000)
        for i, device in enumerate(devices)
    )
    batch = tuple(Trajectory(f"p{i}", 0, 100, 4_000, 1_000.0) for i in range(trajectories))
    return PlanRequest(batch, Inventory(workers, model_preset("7b")))


def test_a_group_that_ran_at_once_takes_its_kinds_worst_waves_slowdown_a_waves_group_its_own() -> None:
    problem = build_problem(_pool(["H100"] * 4 + ["A100"] * 2, slots=4, trajectories=30))
    kinds = [[0, 1, 2, 3], [4, 5]]
    tiers = [0, 1, 2, 2, 0, 1]
    assignment = [list(range(6)), list(range(6, 8)), list(range(8, 14)), list(range(14, 16)), [16, 17], [18]]
    scale = [1.08, 1.0, 1.12, 1.12, 1.01, 1.0]  # calibrate's: each (kind, tier) group's worst
    # H100 tier 0 (w0: 6 units on 4 slots) and tier 2 (w2's 6 units; w3 beside it at once) ran in
    # waves, tier 1 (w1, 2 units) at once; no A100 group ran in waves
    assert in_waves(problem, assignment, scale, tiers, kinds) == [1.08, 1.12, 1.12, 1.12, 1.01, 1.0]


def test_a_worker_past_its_slots_is_estimated_at_its_waves_scale() -> None:
    problem = build_problem(_pool(["H100", "H100"], slots=4, trajectories=12))
    tiers, bands, scale = [0, 0], [0] * 12, [1.0, 1.0]
    even = lpt_assignment(problem, tiers, bands, scale)
    assert sorted(len(queue) for queue in even) == [6, 6]
    slower = lpt_assignment(problem, tiers, bands, scale, waves=[2.0, 1.0])  # w0 in waves runs at half speed
    assert len(slower[0]) < len(slower[1])
    assert len(slower[0]) >= 4  # below its slots it is as fast as w1 (its ``scale``)


def test_the_4096_x_32_bench_plan_is_earlier_where_the_at_once_ascends_are_planned_as_waves_past_their_slots(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One batch, picked: seed 7, where round 1 runs the 8,190-step Ascends at once, and the waves scale
    makes the plan 0.1% earlier or more. Not a gain on the bench batches in general: of seeds 0-9 it
    changes 3 plans (seed 7 +0.19%, seed 5 +0.007%, seed 0 -0.002%) and leaves 7 as they were (helper
    tests67, 2026-12-07); a worker past its slots at its waves scale is the rule's own test above."""
    batch = bench_request(4_096, 32, seed=7, time_budget_s=0.25)  # round 1: the 8,190-step Ascends at once
    with clock.frozen():
        kept = plan(batch, "cpsat")
        monkeypatch.setattr(bandsearch, "in_waves", lambda problem, assignment, scale, tiers, kinds: scale)
        unaware = plan(batch, "cpsat")
    assert kept.predicted_makespan_s < 0.999 * unaware.predicted_makespan_s  # 390.71 -> 389.97 s


def test_a_round_repeats_another_only_where_its_scale_past_the_slots_is_the_same_too() -> None:
    """``bandround.History``: a round's plan is a function of its scale, its cap and its ``waves``."""
    history = History()
    scale = [1.0, 1.1]
    assert not history.repeats_calibration(scale, 400.0, [1.1, 1.1])
    assert not history.repeats_calibration(scale, 400.0, [1.2, 1.1])  # the same scale and cap
    assert history.repeats_calibration(scale, 400.0, [1.1, 1.1])
