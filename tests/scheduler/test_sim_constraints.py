"""What the request constrains, the simulator's shared queue and stealing honour: exclusions,
pins and prefix affinity; so no play beats the lower bound computed under the same constraints."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import HealthCheck, given, settings

from scheduler.devices import device_profile, model_preset
from scheduler.errors import InvalidInputError
from scheduler.planner import plan
from scheduler.policies import POLICY_NAMES
from scheduler.sim_steal import STEAL_SCAN
from scheduler.simulator import SimOptions, SimResult, simulate
from scheduler.stepsum import planned_steps
from scheduler.types import Inventory, Plan, PlanRequest, Trajectory, Worker, WorkerPlan
from tests.scheduler.plan_strategies import plan_requests

MODEL = model_preset("7b")


def _worker(wid: str, time_scale: float = 1.0) -> Worker:
    return Worker(wid, device_profile("H100"), max_num_seqs=4, time_scale=time_scale)


def _group(prompt: str, samples: int, tokens: int) -> list[Trajectory]:
    return [Trajectory(prompt, s, 300, tokens, float(tokens)) for s in range(samples)]


def _play(plan_: Plan, trajectories: list[Trajectory], workers: list[Worker], **options: object) -> SimResult:
    actual = {t.key: t.max_new_tokens for t in trajectories}
    inventory = Inventory(tuple(workers), MODEL)
    return simulate(plan_, trajectories, actual, inventory, SimOptions(**options))  # type: ignore[arg-type]


def _static(queues: dict[str, list[Trajectory]]) -> Plan:
    workers = tuple(WorkerPlan(w, tuple(t.key for t in q), 0.0) for w, q in queues.items())
    return Plan("test", workers, 0.0, 0.0, "TEST", 0.0)


def _shared(workers: list[Worker], trajectories: list[Trajectory]) -> Plan:
    empty = tuple(WorkerPlan(w.worker_id, (), 0.0) for w in workers)
    return Plan(
        "least_loaded", empty, 0.0, 0.0, "TEST", 0.0, dispatch_order=tuple(t.key for t in trajectories)
    )


def _slow_owner() -> tuple[dict[str, list[Trajectory]], list[Worker]]:
    """Everything planned on a ten times slower worker; two idle workers beside it."""
    work = [t for g in range(6) for t in _group(f"g{g}", 4, 1_000 + 100 * g)]
    workers = [_worker("slow", time_scale=10.0), _worker("idle"), _worker("drain")]
    return {"slow": work, "idle": [], "drain": []}, workers


def test_an_excluded_worker_never_steals() -> None:
    queues, workers = _slow_owner()
    work = queues["slow"]
    free = _play(_static(queues), work, workers, steal=True)
    drained = _play(_static(queues), work, workers, steal=True, excluded_workers=frozenset({"drain"}))
    assert any(r.worker_id == "drain" for r in free.items)  # without the exclusion it would steal
    assert not any(r.worker_id == "drain" for r in drained.items)
    assert drained.steals > 0  # the other idle worker still does


def test_an_excluded_worker_never_pulls_from_a_shared_queue() -> None:
    workers = [_worker("a"), _worker("b"), _worker("drain")]
    work = [t for g in range(8) for t in _group(f"g{g}", 2, 800)]
    result = _play(_shared(workers, work), work, workers, excluded_workers=frozenset({"drain"}))
    assert {r.worker_id for r in result.items} == {"a", "b"}


def test_under_prefix_affinity_stealing_moves_only_whole_unstarted_groups() -> None:
    queues, workers = _slow_owner()
    # thieves of three slots: a steal takes up to a thief's free slots (steal.lua), so without
    # affinity a call of three splits the groups of four; four slots took whole groups by chance
    workers = [w if w.worker_id == "slow" else dataclasses.replace(w, max_num_seqs=3) for w in workers]
    work = queues["slow"]
    split = _play(_static(queues), work, workers, steal=True)
    kept = _play(_static(queues), work, workers, steal=True, prefix_affinity=True)
    assert any(len(ws) > 1 for ws in _workers_per_group(split).values())  # item steals split groups
    assert all(len(ws) == 1 for ws in _workers_per_group(kept).values())
    assert kept.steals > 0
    assert kept.steals % 4 == 0  # whole groups of four moved
    assert kept.makespan_s < _play(_static(queues), work, workers).makespan_s  # and it still rescues


def test_under_prefix_affinity_a_shared_queue_keeps_each_group_on_the_worker_that_took_its_first() -> None:
    workers = [_worker("a"), _worker("b", time_scale=3.0), _worker("c")]
    work = [t for g in range(9) for t in _group(f"g{g}", 3, 600 + 50 * g)]
    result = _play(_shared(workers, work), work, workers, prefix_affinity=True)
    assert all(len(ws) == 1 for ws in _workers_per_group(result).values())
    assert len({r.worker_id for r in result.items}) == 3
    assert sorted(r.key for r in result.items) == sorted(t.key for t in work)


def test_under_prefix_affinity_a_worker_takes_a_shared_group_only_if_it_holds_every_sample() -> None:
    small = Worker("small", device_profile("H100"), max_num_seqs=4, kv_capacity_tokens=3_000)
    workers = [small, _worker("big")]
    work = [Trajectory("g", 0, 100, 500, 400.0), Trajectory("g", 1, 100, 8_000, 4_000.0)]
    # the least loaded worker ("small", first in the inventory) holds the head but not its sibling
    result = _play(_shared(workers, work), work, workers, prefix_affinity=True)
    assert {r.key: r.worker_id for r in result.items} == {"g#0": "big", "g#1": "big"}


def test_a_worker_idle_behind_a_head_it_cannot_hold_takes_the_items_after_it_once_it_is_gone() -> None:
    # a sidecar keeps polling: once the big worker takes the big head, the idle small one takes what
    # follows it, instead of sitting idle for good while the big worker runs everything in turn
    small = Worker("small", device_profile("H100"), max_num_seqs=4, kv_capacity_tokens=3_000)
    big = Worker("big", device_profile("H100"), max_num_seqs=1)
    work = [Trajectory(f"x{i}", 0, 100, 8_000, 4_000.0) for i in range(2)]
    work += [Trajectory(f"s{i}", 0, 100, 500, 400.0) for i in range(4)]
    result = _play(_shared([small, big], work), work, [small, big])
    placed = {r.key: r.worker_id for r in result.items}
    assert [placed[f"x{i}#0"] for i in range(2)] == ["big", "big"]
    assert {placed[f"s{i}#0"] for i in range(4)} == {"small"}
    first_done = min(r.end_s for r in result.items if r.key.startswith("x"))
    assert all(r.start_s == first_done for r in result.items if r.key.startswith("s"))


def test_under_prefix_affinity_a_pin_on_one_sample_sends_its_whole_group_to_the_pinned_worker() -> None:
    workers = [_worker("big"), _worker("pinned")]
    work = [
        Trajectory("a", 0, 100, 500, 400.0),
        Trajectory("g", 0, 100, 500, 400.0, pinned_worker="pinned"),
        Trajectory("g", 1, 100, 500, 400.0),
    ]
    request = PlanRequest(tuple(work), Inventory(tuple(workers), MODEL), prefix_affinity=True)
    planned = plan(request, "least_loaded")
    assert planned.dispatch_order  # a shared-queue play
    forecast = {key: w for w, keys in planned.assignments().items() for key in keys}
    result = _play(planned, work, workers, prefix_affinity=True)
    played = {r.key: r.worker_id for r in result.items}
    assert played["g#0"] == played["g#1"] == "pinned"
    assert played == forecast  # as the planner's own least_loaded forecast deals it


def test_a_string_of_excluded_workers_is_refused() -> None:
    queues, workers = _slow_owner()
    with pytest.raises(InvalidInputError) as caught:
        _play(_static(queues), queues["slow"], workers, steal=True, excluded_workers="drain")
    assert caught.value.field == "options.excluded_workers"


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(plan_requests())
def test_no_play_under_the_requests_constraints_beats_the_bound(request: PlanRequest) -> None:
    _no_play_beats_the_bound(request)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(plan_requests(max_groups=8, max_samples=6, affinity=True))
def test_under_prefix_affinity_no_play_beats_the_bound_that_charges_whole_groups(
    request: PlanRequest,
) -> None:
    # the tail bound's units are then whole groups (each at its longest member): every play keeps a
    # group on one worker, shared queue and stealing included, so none may finish sooner
    _no_play_beats_the_bound(request)


def _no_play_beats_the_bound(request: PlanRequest) -> None:
    actual = {t.key: planned_steps(t.predicted_tokens) for t in request.trajectories}
    options = SimOptions(
        kv_admission=request.kv_admission,
        excluded_workers=request.excluded_workers,
        prefix_affinity=request.prefix_affinity,
    )
    for name in POLICY_NAMES:
        result = plan(request, name)
        for steal in (False, True):
            played = simulate(
                result,
                request.trajectories,
                actual,
                request.inventory,
                dataclasses.replace(options, steal=steal),
            )
            assert result.lower_bound_s <= played.makespan_s * (1 + 1e-9), (name, steal)
            by_key = {r.key: r.worker_id for r in played.items}
            assert not set(by_key.values()) & request.excluded_workers, (name, steal)  # plans put none there
            for t in request.trajectories:
                if t.pinned_worker is not None:
                    assert by_key[t.key] == t.pinned_worker, (name, steal)
            if request.prefix_affinity:
                assert all(len(ws) == 1 for ws in _workers_per_group(played).values()), (name, steal)


def _workers_per_group(result: SimResult) -> dict[str, set[str]]:
    groups: dict[str, set[str]] = {}
    for r in result.items:
        groups.setdefault(r.key.rsplit("#", 1)[0], set()).add(r.worker_id)
    return groups


def test_a_thief_that_cannot_hold_the_busiest_queues_tail_steals_from_the_next_at_once() -> None:
    """Two slow big workers, the busiest holding only items too big for the small one, the other
    items it holds: it steals those at time 0, not once the busiest queue has drained."""
    big = [Trajectory(f"a{i}", 0, 100, 20_000, 5_000.0) for i in range(3)]
    small = [Trajectory(f"b{i}", 0, 100, 1_000, 500.0) for i in range(4)]
    workers = [
        dataclasses.replace(_worker("xbig-0", time_scale=10.0), max_num_seqs=1, kv_capacity_tokens=1_000_000),
        dataclasses.replace(_worker("xbig-1", time_scale=10.0), max_num_seqs=1, kv_capacity_tokens=1_000_000),
        dataclasses.replace(_worker("xsmall-0"), kv_capacity_tokens=16_000),
    ]
    queues = {"xbig-0": big, "xbig-1": small, "xsmall-0": []}
    played = _play(_static(queues), big + small, workers, steal=True)
    stolen = [r for r in played.items if r.worker_id == "xsmall-0"]
    assert {r.key for r in stolen} <= {t.key for t in small}
    assert stolen
    assert min(r.start_s for r in stolen) == 0.0


def _pinned_last(affinity: bool) -> SimResult:
    """A ten times slower owner whose queue ends in a pinned group; an idle worker beside it."""
    queues, workers = _slow_owner()
    pinned = [dataclasses.replace(t, pinned_worker="slow") for t in _group("z", 4, 500)]
    work = [*queues["slow"], *pinned]
    return _play(_static({"slow": work, "idle": []}), work, workers[:2], steal=True, prefix_affinity=affinity)


@pytest.mark.parametrize("affinity", [False, True])
def test_a_pinned_group_at_the_tail_of_a_queue_leaves_the_items_before_it_stealable(affinity: bool) -> None:
    played = {r.key: r.worker_id for r in _pinned_last(affinity).items}
    assert all(played[f"z#{s}"] == "slow" for s in range(4))  # the pins hold
    assert any(w == "idle" for w in played.values())  # was none: the pinned tail shielded the queue
    if affinity:
        assert all(len(ws) == 1 for ws in _workers_per_group(_pinned_last(affinity)).values())


def _unpinned_behind_pins(tail: list[Trajectory], affinity: bool = False) -> str:
    """Who runs the one unpinned item ``u`` of a ten times slower owner, planned right before
    ``tail``; the owner starts four long pinned items first, an idle worker with a 16,000-token cache
    waits beside it."""
    workers = [
        dataclasses.replace(_worker("slow", time_scale=10.0), kv_capacity_tokens=1_000_000),
        dataclasses.replace(_worker("idle"), kv_capacity_tokens=16_000),
    ]
    running = [Trajectory(f"r{i}", 0, 100, 2_000, 2_000.0, pinned_worker="slow") for i in range(4)]
    work = [*running, Trajectory("u", 0, 100, 400, 400.0), *tail]
    played = _play(_static({"slow": work, "idle": []}), work, workers, steal=True, prefix_affinity=affinity)
    return next(r.worker_id for r in played.items if r.key == "u#0")


@pytest.mark.parametrize("affinity", [False, True])
def test_a_thief_passes_any_number_of_pinned_items(affinity: bool) -> None:
    # a user pinning a hundred short prompts to a slow worker, planned last, shielded every unpinned
    # item before them while the thief looked only STEAL_SCAN items from the tail
    for pins in (STEAL_SCAN, 4 * STEAL_SCAN):
        tail = [Trajectory(f"p{i}", 0, 100, 50, 50.0, pinned_worker="slow") for i in range(pins)]
        assert _unpinned_behind_pins(tail, affinity) == "idle"


def test_a_thief_passes_any_number_of_items_too_big_for_it() -> None:
    # long documents with short answers, planned last: a small cache got nothing before them while
    # the thief looked only STEAL_SCAN items from the tail
    for bigs in (STEAL_SCAN, 4 * STEAL_SCAN):
        tail = [Trajectory(f"x{i}", 0, 20_000, 50, 50.0) for i in range(bigs)]  # past the idle cache
        assert _unpinned_behind_pins(tail) == "idle"


def test_under_prefix_affinity_a_thief_passes_any_number_of_groups_too_big_for_it() -> None:
    # as steal.lua, which reads a list of the groups a small cache holds whole (P:gneed): a group walk
    # that counted such groups toward STEAL_SCAN left the thief nothing before 64 of them
    for bigs in (STEAL_SCAN, 4 * STEAL_SCAN):
        tail = [Trajectory(f"x{i}", 0, 20_000, 50, 50.0) for i in range(bigs)]
        assert _unpinned_behind_pins(tail, affinity=True) == "idle"


def _long_prompt_last(affinity: bool) -> SimResult:
    """A ten times slower big worker whose queue ends in a group with one sample too long for the
    small worker idle beside it (a 20,000-token prompt against its 16,000-token cache)."""
    queues, _ = _slow_owner()
    long_last = [*_group("z", 4, 500)[:3], Trajectory("z", 3, 20_000, 500, 500.0)]
    work = [*queues["slow"], *long_last]
    workers = [
        dataclasses.replace(_worker("slow", time_scale=10.0), kv_capacity_tokens=1_000_000),
        dataclasses.replace(_worker("small"), kv_capacity_tokens=16_000),
    ]
    return _play(_static({"slow": work, "small": []}), work, workers, steal=True, prefix_affinity=affinity)


@pytest.mark.parametrize("affinity", [False, True])
def test_an_item_too_big_for_the_thief_at_a_tail_leaves_the_items_before_it_stealable(affinity: bool) -> None:
    played = _long_prompt_last(affinity)
    by_key = {r.key: r.worker_id for r in played.items}
    assert by_key["z#3"] == "slow"  # the small cache never holds it
    assert any(w == "small" for w in by_key.values())  # was none: the long prompt shielded the queue
    if affinity:
        assert all(len(ws) == 1 for ws in _workers_per_group(played).values())
