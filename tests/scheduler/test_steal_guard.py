"""The steal deadline guard: a thief takes an item only if it would finish it before its planned owner.

Each item's deadline is its end in the plan played statically at predicted lengths
(``scheduler.deadlines``), moved back by how late its owner runs. On exact lengths no owner is late,
so a slow thief leaves the plan alone; when predictions are too short the owner falls behind and is
robbed as before.
"""

from __future__ import annotations

import dataclasses
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.costmodel import worker_cost
from scheduler.deadlines import planned_times
from scheduler.devices import device_profile, model_preset
from scheduler.errors import InvalidInputError
from scheduler.planner import plan
from scheduler.sim_alone import play_queue
from scheduler.sim_ledger import Ledger
from scheduler.sim_rules import ENGINES, engine_rules
from scheduler.simulator import SimOptions, SimResult, simulate, simulate_worker
from scheduler.stealguard import beats_owner, lateness
from scheduler.stepsum import planned_steps
from scheduler.types import Inventory, Plan, PlanRequest, Trajectory, Worker, WorkerPlan
from tests.scheduler.plan_strategies import plan_requests

MODEL = model_preset("7b")
WAVE = 600  # tokens of each of the owner's items: it runs three waves of four
SLOWDOWN = 1.75  # the thief's step time over the owner's
THIEF_OWN = 500  # tokens of each of the four items that fill the thief's slots first


def _traj(i: int, tokens: int, predicted: float) -> Trajectory:
    return Trajectory(f"p{i}", 0, 200, max(tokens, math.ceil(predicted)), predicted)


def _workers(slowdown: float = SLOWDOWN) -> list[Worker]:
    return [
        Worker("owner", device_profile("H100"), max_num_seqs=4),
        Worker("thief", device_profile("H100"), max_num_seqs=4, time_scale=slowdown),
    ]


def _case(first_wave: int, thief_own: int = THIEF_OWN) -> tuple[Plan, list[Trajectory], dict[str, int]]:
    """Owner: three waves of four WAVE-token items, its first wave really ``first_wave`` tokens long.

    The thief's own item keeps it busy for about one and a half waves; then it looks for work: the
    owner's last wave, planned to end at about 3 waves, would take it about 1.75 waves.
    """
    owner = [_traj(i, first_wave if i < 4 else WAVE, WAVE) for i in range(12)]
    thief = [_traj(90 + i, thief_own, float(thief_own)) for i in range(4)]
    plan = Plan(
        "test",
        (
            WorkerPlan("owner", tuple(t.key for t in owner), 0.0),
            WorkerPlan("thief", tuple(t.key for t in thief), 0.0),
        ),
        0.0,
        0.0,
        "TEST",
        0.0,
    )
    return plan, owner + thief, {t.key: t.max_new_tokens for t in owner + thief}


def _play(
    first_wave: int,
    steal: bool,
    kv_admission: bool = False,
    slowdown: float = SLOWDOWN,
    thief_own: int = THIEF_OWN,
) -> SimResult:
    plan, trajs, actual = _case(first_wave, thief_own)
    inventory = Inventory(tuple(_workers(slowdown)), MODEL)
    return simulate(plan, trajs, actual, inventory, SimOptions(steal=steal, kv_admission=kv_admission))


@pytest.mark.parametrize("kv_admission", [False, True])
def test_a_thief_does_not_take_an_item_it_cannot_finish_before_its_deadline(kv_admission: bool) -> None:
    stolen = _play(WAVE, steal=True, kv_admission=kv_admission)
    alone = _play(WAVE, steal=False, kv_admission=kv_admission)
    assert stolen.steals == 0
    assert stolen == alone  # on exact lengths the plan plays out as planned


def test_an_owner_behind_schedule_is_still_robbed() -> None:
    # a thief as fast as the owner comes free after two and a half waves: on plan the owner has
    # claimed its last wave by then; but its first wave runs five times its prediction, so its other
    # two waves still wait, four waves behind schedule, and the thief takes them
    late = {"first_wave": 5 * WAVE, "slowdown": 1.0, "thief_own": 5 * WAVE // 2}
    stolen = _play(steal=True, **late)  # type: ignore[arg-type]
    alone = _play(steal=False, **late)  # type: ignore[arg-type]
    assert stolen.steals == 8
    assert stolen.makespan_s < 0.8 * alone.makespan_s
    assert {r.key for r in stolen.items if r.stolen} == {f"p{i}#0" for i in range(4, 12)}
    assert all(r.worker_id == "thief" for r in stolen.items if r.stolen)
    on_plan = _play(WAVE, steal=True, slowdown=1.0, thief_own=5 * WAVE // 2)
    assert on_plan.steals == 0


def test_a_thief_as_fast_as_the_owner_still_takes_the_last_wave() -> None:
    stolen = _play(WAVE, steal=True, slowdown=1.0)
    alone = _play(WAVE, steal=False, slowdown=1.0)
    assert stolen.steals > 0
    assert stolen.makespan_s < alone.makespan_s


def test_planned_times_are_each_worker_played_alone_at_predicted_lengths() -> None:
    plan, trajs, _ = _case(5 * WAVE)
    inventory = Inventory(tuple(_workers()), MODEL)
    times = planned_times(plan, trajs, inventory, kv_admission=False)
    for n, wp in enumerate(plan.workers):
        items = [t for t in trajs if t.key in wp.items]
        run = simulate_worker(inventory.workers[n], MODEL, items)
        assert [times[k].end_s for k in wp.items] == list(run.ends_s)
        assert [times[k].start_s for k in wp.items] == list(run.starts_s)


def test_planned_times_of_a_shared_queue_plan_are_empty_and_a_foreign_key_is_refused() -> None:
    plan, trajs, _ = _case(WAVE)
    inventory = Inventory(tuple(_workers()), MODEL)
    shared = Plan("least_loaded", plan.workers, 0.0, 0.0, "TEST", 0.0, dispatch_order=("p0#0",))
    assert planned_times(shared, trajs, inventory, kv_admission=False) == {}
    with pytest.raises(InvalidInputError, match="names no trajectory"):
        planned_times(plan, trajs[1:], inventory, kv_admission=False)


def test_a_thief_whose_own_work_ends_last_does_not_steal() -> None:
    # the thief is as fast as the owner and has free slots, but its own long item ends after the
    # owner's last wave: stealing would only slow that item and end the step later
    plan, trajs, actual = _case(WAVE)
    long = Trajectory("long", 0, 200, 5 * WAVE, 5.0 * WAVE)
    owner = next(wp for wp in plan.workers if wp.worker_id == "owner")
    plan = dataclasses.replace(plan, workers=(owner, WorkerPlan("thief", (long.key,), 0.0)))
    trajs = [t for t in trajs if t.key in owner.items] + [long]
    actual = {t.key: t.max_new_tokens for t in trajs}
    inventory = Inventory(tuple(_workers(1.0)), MODEL)
    stolen = simulate(plan, trajs, actual, inventory, SimOptions(steal=True))
    alone = simulate(plan, trajs, actual, inventory, SimOptions(steal=False))
    assert stolen.steals == 0
    assert stolen == alone


def test_a_steal_must_win_at_the_predicted_length_and_at_four_times_it() -> None:
    # the owner would run the item from 10 s to 20 s (40 s at 4x: until 50 s); a thief starts now, at 0 s
    assert not beats_owner(0.0, 21.0, 10.0, 20.0)  # misses the deadline
    assert beats_owner(0.0, 12.0, 10.0, 20.0)  # 48 s at 4x against the owner's 50 s
    assert not beats_owner(0.0, 13.0, 10.0, 20.0)  # in time at the prediction, 52 s > 50 s at 4x
    assert lateness(10.0, 4.0) == 0.0
    assert lateness(10.0, 14.0) == 4.0


@settings(max_examples=60, deadline=None)
@given(plan_requests(max_groups=8, max_workers=3), st.booleans(), st.sampled_from(list(ENGINES)))
def test_planned_times_agree_to_the_bit_with_each_queue_played_whether_or_not_it_runs_at_once(
    request: PlanRequest, kv_admission: bool, engine: str
) -> None:
    """By every engine's rules: V1's (no watermark) take the closed form where V0's would."""
    rules = engine_rules(engine)
    plan_ = plan(request, "lpt")
    times = planned_times(
        plan_,
        request.trajectories,
        request.inventory,
        kv_admission=kv_admission,
        watermark=rules.watermark,
        resume_preempted=rules.resume_preempted,
    )
    by_key = {t.key: t for t in request.trajectories}
    for wp, worker in zip(plan_.workers, request.inventory.workers, strict=True):
        planned = [planned_steps(by_key[k].predicted_tokens) for k in wp.items]
        ledger = Ledger(list(wp.items), [by_key[k].prompt_tokens for k in wp.items], planned, list(planned))
        cost = worker_cost(worker, request.inventory.model)
        play_queue(
            cost, ledger, watermark=rules.watermark, kv_admission=kv_admission, resume=rules.resume_preempted
        )
        assert [tuple(times[k]) for k in wp.items] == list(zip(ledger.start, ledger.end, strict=True))
