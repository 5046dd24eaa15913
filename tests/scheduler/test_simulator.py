"""Behaviour of the rollout simulator: closed-form timing, completion, preemption, stealing, shared queue."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from scheduler.benchgen import heavy_tailed_batch, mixed_inventory
from scheduler.costmodel import worker_cost
from scheduler.devices import device_profile, model_preset
from scheduler.errors import InvalidInputError
from scheduler.planner import plan
from scheduler.simulator import SimOptions, SimResult, simulate, simulate_worker
from scheduler.types import Inventory, Plan, PlanRequest, Trajectory, Worker, WorkerPlan

MODEL = model_preset("7b")


def traj(i: int, prompt: int, tokens: int, predicted: float | None = None) -> Trajectory:
    pred = float(tokens) if predicted is None else predicted
    return Trajectory(f"p{i}", 0, prompt, max(tokens, math.ceil(pred), 1), max(pred, 1.0))


def worker(wid: str, kind: str = "H100", **kw: object) -> Worker:
    return Worker(wid, device_profile(kind), **kw)  # type: ignore[arg-type]


def static_plan(queues: dict[str, list[Trajectory]]) -> Plan:
    wps = tuple(WorkerPlan(w, tuple(t.key for t in q), 0.0) for w, q in queues.items())
    return Plan("test", wps, 0.0, 0.0, "TEST", 0.0)


def shared_plan(workers: list[Worker], keys: list[str]) -> Plan:
    wps = tuple(WorkerPlan(w.worker_id, (), 0.0) for w in workers)
    return Plan("least_loaded", wps, 0.0, 0.0, "TEST", 0.0, dispatch_order=tuple(keys))


def run(
    queues: dict[str, list[Trajectory]],
    workers: list[Worker],
    steal: bool = False,
    kv_admission: bool = False,
) -> SimResult:
    trajs = [t for q in queues.values() for t in q]
    actual = {t.key: t.max_new_tokens for t in trajs}  # test trajectories end at their cap
    options = SimOptions(steal=steal, kv_admission=kv_admission)
    return simulate(static_plan(queues), trajs, actual, Inventory(tuple(workers), MODEL), options)


def test_one_sequence_alone_takes_its_prefill_plus_every_decode_step() -> None:
    w = worker("a")
    cost = worker_cost(w, MODEL)
    prompt, out = 700, 5_000
    expected = cost.prefill_time(prompt) + sum(cost.step_time(1, prompt + k) for k in range(out))
    result = run({"a": [traj(0, prompt, out)]}, [w])
    assert result.makespan_s == pytest.approx(expected, rel=1e-12)
    assert result.items[0].start_s == 0.0
    assert result.items[0].end_s == result.makespan_s


def test_two_identical_sequences_share_one_prefill_and_every_step() -> None:
    w = worker("a")
    cost = worker_cost(w, MODEL)
    prompt, out = 300, 2_000
    expected = cost.prefill_time(2 * prompt) + sum(cost.step_time(2, 2 * (prompt + k)) for k in range(out))
    result = run({"a": [traj(0, prompt, out), traj(1, prompt, out)]}, [w])
    assert [r.end_s for r in result.items] == [pytest.approx(expected, rel=1e-12)] * 2


def test_a_large_batch_crossing_from_compute_to_memory_bound_is_summed_exactly() -> None:
    w = worker("a", max_num_seqs=256)
    cost = worker_cost(w, MODEL)
    prompt, out, n = 64, 3_000, 256
    expected = cost.prefill_time(n * prompt) + sum(cost.step_time(n, n * (prompt + k)) for k in range(out))
    compute_first = cost.step_time(n, n * prompt) != cost.time_scale * (
        cost.mem_base_s + cost.mem_per_token_s * n * prompt + cost.overhead_s
    )
    assert compute_first  # the case really crosses over
    result = run({"a": [traj(i, prompt, out) for i in range(n)]}, [w])
    assert result.makespan_s == pytest.approx(expected, rel=1e-12)


def _mixed_case() -> tuple[dict[str, list[Trajectory]], list[Worker]]:
    workers = [worker(f"w{i}", "H100" if i % 2 else "910B", max_num_seqs=8, kv_capacity_tokens=60_000)
               for i in range(4)]  # fmt: skip
    trajs = [traj(i, 200 + 37 * i % 500, 300 + (7919 * i) % 6_000) for i in range(64)]
    queues: dict[str, list[Trajectory]] = {w.worker_id: [] for w in workers}
    for i, t in enumerate(trajs):
        queues[workers[i % 4].worker_id].append(t)
    return queues, workers


@pytest.mark.parametrize("steal", [False, True])
def test_the_same_input_gives_an_identical_result(steal: bool) -> None:
    queues, workers = _mixed_case()
    assert run(queues, workers, steal=steal) == run(queues, workers, steal=steal)


@pytest.mark.parametrize(("steal", "kv_admission"), [(False, False), (True, False), (True, True)])
def test_every_trajectory_completes_exactly_once_with_its_true_length(
    steal: bool, kv_admission: bool
) -> None:
    queues, workers = _mixed_case()
    result = run(queues, workers, steal=steal, kv_admission=kv_admission)
    trajs = [t for q in queues.values() for t in q]
    assert [r.key for r in result.items] == [t.key for t in trajs]
    assert [r.output_tokens for r in result.items] == [t.max_new_tokens for t in trajs]
    assert all(0.0 <= r.start_s < r.end_s <= result.makespan_s for r in result.items)
    assert result.makespan_s == max(result.worker_finish_s.values())
    assert result.tokens_per_s == pytest.approx(sum(t.max_new_tokens for t in trajs) / result.makespan_s)


def test_oversubscribed_kv_preempts_and_admission_by_reserved_kv_does_not() -> None:
    w = worker("a", max_num_seqs=16, kv_capacity_tokens=40_000)
    queue = [traj(i, 500, 8_000) for i in range(16)]  # 16 x 8,500 tokens at the end: 3.4x the cache
    plain = run({"a": queue}, [w])
    reserved = run({"a": queue}, [w], kv_admission=True)
    assert plain.preemptions > 0
    assert sum(r.preemptions for r in plain.items) == plain.preemptions
    assert reserved.preemptions == 0
    # vLLM restarts an evicted sequence as soon as its prompt fits again, so plain admission keeps
    # the cache full and here loses little time (it finished first: 256.8 s against 258.6 s); what
    # it pays is sequences evicted again and again, progress lost each time
    assert max(r.preemptions for r in plain.items) > 1


def test_an_oversized_trajectory_is_refused_naming_it() -> None:
    w = worker("a", kv_capacity_tokens=5_000)
    with pytest.raises(InvalidInputError) as err:
        run({"a": [traj(0, 1_000, 4_500)]}, [w])
    assert err.value.field == "actual_tokens[p0#0]"


@pytest.mark.timeout(20)  # a negative length never reached its end: the engine loop spun forever
@pytest.mark.parametrize("length", [-5, -1, 2.5, 3.0, True, False, math.nan, "7"])
def test_a_true_length_played_alone_that_is_no_count_of_tokens_is_refused_naming_its_trajectory(
    length: object,
) -> None:
    """simulate_worker took ``int()`` of each true length: -5 hung, 2.5 played as 2, True as 1."""
    items = [traj(0, 100, 50), traj(1, 100, 60)]
    lengths: list[Any] = [50, length]
    with pytest.raises(InvalidInputError) as err:
        simulate_worker(worker("a", max_num_seqs=4), MODEL, items, actual_tokens=lengths)
    assert err.value.field == "actual_tokens[p1#0]"
    assert repr(err.value.value) == repr(length)


def test_a_true_length_played_alone_may_be_zero_or_a_numpy_integer() -> None:
    items = [traj(0, 100, 50), traj(1, 100, 60)]
    lengths: list[Any] = [np.int64(50), 0]  # a trace column's integers are numpy's
    played = simulate_worker(worker("a", max_num_seqs=4), MODEL, items, actual_tokens=lengths)
    assert played.finish_s > 0


def _slow_worker_case() -> tuple[dict[str, list[Trajectory]], list[Worker]]:
    workers = [worker(f"w{i}", max_num_seqs=4, time_scale=10.0 if i == 0 else 1.0) for i in range(4)]
    queues = {w.worker_id: [traj(10 * j + i, 300, 2_000 + 100 * j) for j in range(10)]
              for i, w in enumerate(workers)}  # fmt: skip
    return queues, workers


def test_stealing_rescues_a_ten_times_slower_worker_and_moves_only_queued_tail_items() -> None:
    queues, workers = _slow_worker_case()
    plain = run(queues, workers)
    stolen = run(queues, workers, steal=True)
    assert stolen.makespan_s < 0.5 * plain.makespan_s
    assert stolen.steals == sum(r.stolen for r in stolen.items) > 0
    slow_keys = [t.key for t in queues["w0"]]
    by_key = {r.key: r for r in stolen.items}
    # the head the slow worker started at once stays with it; thieves took from the tail
    assert all(by_key[k].worker_id == "w0" and not by_key[k].stolen for k in slow_keys[:4])
    moved = [k for k in slow_keys if by_key[k].stolen]
    assert moved == slow_keys[len(slow_keys) - len(moved) :]
    assert all(by_key[k].worker_id != "w0" for k in moved)


def test_stealing_is_a_no_op_when_every_queue_drains_together() -> None:
    w = [worker("a"), worker("b")]
    queues = {"a": [traj(0, 100, 1_000)], "b": [traj(1, 100, 1_000)]}
    assert run(queues, w, steal=True) == run(queues, w)


def test_a_shared_queue_feeds_whichever_worker_frees_a_slot_in_dispatch_order() -> None:
    workers = [worker("slow", max_num_seqs=2, time_scale=10.0), worker("fast", max_num_seqs=2)]
    trajs = [traj(i, 100, 1_000) for i in range(20)]
    plan = shared_plan(workers, [t.key for t in reversed(trajs)])
    result = simulate(plan, trajs, {t.key: 1_000 for t in trajs}, Inventory(tuple(workers), MODEL))
    starts = {r.key: r.start_s for r in result.items}
    order = [starts[k] for k in plan.dispatch_order]
    assert order == sorted(order)
    on_fast = sum(r.worker_id == "fast" for r in result.items)
    assert on_fast >= 16  # ten times faster: it takes nearly everything after the first round


def test_the_first_round_of_a_shared_queue_is_dealt_least_loaded_first() -> None:
    workers = [worker(f"w{i}") for i in range(4)]
    trajs = [traj(i, 100, 500) for i in range(4)]
    plan = shared_plan(workers, [t.key for t in trajs])
    result = simulate(plan, trajs, {t.key: 500 for t in trajs}, Inventory(tuple(workers), MODEL))
    assert [r.worker_id for r in result.items] == ["w0", "w1", "w2", "w3"]


def test_a_static_plan_replayed_on_exact_lengths_matches_each_workers_planned_finish() -> None:
    queues, workers = _mixed_case()
    for kv_admission in (False, True):
        result = run(queues, workers, kv_admission=kv_admission)
        for w in workers:
            alone = simulate_worker(w, MODEL, queues[w.worker_id], kv_admission=kv_admission)
            assert alone.finish_s == result.worker_finish_s[w.worker_id]


def test_bubble_ratio_counts_idle_gpu_seconds_up_to_the_makespan() -> None:
    w = [worker("a"), worker("b")]
    result = run({"a": [traj(0, 100, 4_000)], "b": [traj(1, 100, 1_000)]}, w)
    busy = result.worker_busy_s
    assert busy["a"] == pytest.approx(result.makespan_s)
    assert result.bubble_ratio == pytest.approx((result.makespan_s - busy["b"]) / (2 * result.makespan_s))


def test_tail_time_is_what_the_last_tenth_of_trajectories_add() -> None:
    w = [worker("a", max_num_seqs=1)]
    queue = [traj(i, 100, 100) for i in range(9)] + [traj(9, 100, 5_000)]
    result = run({"a": queue}, w)
    ninth_end = sorted(r.end_s for r in result.items)[8]
    assert result.tail_time_s == pytest.approx(result.makespan_s - ninth_end)
    assert result.tail_time_s > 0.5 * result.makespan_s


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        (lambda p, a: (p, {**a, "p0#0": -1}), "actual_tokens[p0#0]"),
        (lambda p, a: (p, {k: v for k, v in a.items() if k != "p1#0"}), "actual_tokens[p1#0]"),
        (lambda p, a: (static_plan({"a": []}), a), "plan"),
        (lambda p, a: (static_plan({"zz": [traj(0, 1, 1)]}), a), "plan.workers[0].worker_id"),
    ],
)
def test_bad_input_is_refused_with_the_offending_field(mutate: object, field: str) -> None:
    trajs = [traj(0, 100, 100), traj(1, 100, 100)]
    plan, actual = mutate(static_plan({"a": trajs}), {t.key: 100 for t in trajs})  # type: ignore[operator]
    with pytest.raises(InvalidInputError) as err:
        simulate(plan, trajs, actual, Inventory((worker("a"),), MODEL))
    assert err.value.field == field


@pytest.mark.parametrize("predicted", [math.nan, math.inf, -5.0, True])
@pytest.mark.parametrize("options", [SimOptions(), SimOptions(kv_admission=True, steal=True)])
def test_a_prediction_that_is_no_length_is_refused_naming_its_trajectory(
    predicted: float, options: SimOptions
) -> None:
    """simulate's callers validate predictions, but it is public: NaN failed in math.ceil with a
    field-less ValueError, infinity with an OverflowError, and -5 was played as a one-token plan."""
    trajs = [traj(0, 100, 100), Trajectory("p1", 0, 100, 100, predicted)]
    plan = static_plan({"a": trajs, "b": []})
    actual = {t.key: 100 for t in trajs}
    with pytest.raises(InvalidInputError) as err:
        simulate(plan, trajs, actual, Inventory((worker("a"), worker("b")), MODEL), options)
    assert (err.value.field, err.value.reason) == (
        "trajectories[1].predicted_tokens",
        "must be a finite number >= 0 (trajectory p1#0)",
    )


def test_items_already_handed_to_an_engine_are_never_stolen_even_while_waiting_for_kv() -> None:
    # w0's KV holds one sequence at a time, but its sidecar keeps max_num_seqs=4 in flight
    victim = worker("w0", "910B", max_num_seqs=4, kv_capacity_tokens=2_500)
    thief = worker("w1", max_num_seqs=4)
    queue = [traj(i, 200, 2_000) for i in range(8)]
    result = run({"w0": queue, "w1": []}, [victim, thief], steal=True)
    by_key = {r.key: r for r in result.items}
    assert all(by_key[t.key].worker_id == "w0" for t in queue[:4])  # in flight: stay
    assert all(by_key[t.key].worker_id == "w1" for t in queue[4:])  # unclaimed: taken at once


def test_with_kv_admission_the_sidecar_claims_only_what_it_can_start_so_the_rest_is_stealable() -> None:
    victim = worker("w0", "910B", max_num_seqs=4, kv_capacity_tokens=2_500)
    thief = worker("w1", max_num_seqs=4)
    queue = [traj(i, 200, 2_000) for i in range(8)]
    result = run({"w0": queue, "w1": []}, [victim, thief], steal=True, kv_admission=True)
    on_victim = [r.key for r in result.items if r.worker_id == "w0"]
    assert on_victim == [queue[0].key]  # only the head ran there; the thief drained the tail
    assert result.preemptions == 0


def test_a_pinned_trajectory_is_never_stolen_and_never_leaves_its_worker_in_a_shared_queue() -> None:
    queues, workers = _slow_worker_case()
    tail = queues["w0"][-1]
    queues["w0"][-1] = Trajectory(
        tail.prompt_id, 0, 300, tail.max_new_tokens, tail.predicted_tokens, pinned_worker="w0"
    )
    stolen = run(queues, workers, steal=True)
    assert next(r for r in stolen.items if r.key == tail.key).worker_id == "w0"
    trajs = [t for q in queues.values() for t in q]
    shared = shared_plan(workers, [t.key for t in reversed(trajs)])
    result = simulate(
        shared, trajs, {t.key: t.max_new_tokens for t in trajs}, Inventory(tuple(workers), MODEL)
    )
    assert next(r for r in result.items if r.key == tail.key).worker_id == "w0"


def test_a_pin_to_a_worker_outside_the_inventory_is_refused() -> None:
    t = Trajectory("p", 0, 10, 10, 10.0, pinned_worker="ghost")
    with pytest.raises(InvalidInputError) as err:
        simulate(static_plan({"a": [t]}), [t], {t.key: 10}, Inventory((worker("a"),), MODEL))
    assert err.value.field == "trajectories[0].pinned_worker"


def test_an_empty_queue_of_a_worker_left_out_of_the_inventory_is_ignored() -> None:
    t = traj(0, 100, 100)
    result = simulate(
        static_plan({"a": [t], "drained": []}), [t], {t.key: 100}, Inventory((worker("a"),), MODEL)
    )
    assert set(result.worker_finish_s) == {"a"}


def _gate_case(thief_kv: int) -> SimResult:
    # the victim runs one sequence at a time, so three of its items wait unclaimed (stealable); the
    # thief has a free slot at once, but its own long sequence reserves 3,200 tokens of KV
    victim = worker("w0", max_num_seqs=1)
    thief = worker("w1", max_num_seqs=4, kv_capacity_tokens=thief_kv)
    queues = {"w0": [traj(i, 200, 2_000) for i in range(4)], "w1": [traj(9, 200, 3_000)]}
    return run(queues, [victim, thief], steal=True)


def test_a_thief_steals_only_what_fits_its_kv_beside_its_in_flight_work_at_predicted_lengths() -> None:
    tight = _gate_case(5_000).items
    own_end = next(r.end_s for r in tight if r.key == traj(9, 200, 3_000).key)
    gated = [r for r in tight if r.stolen]  # 3,200 + 2,200 > 5,000: wait until its own item ends
    assert gated
    assert all(r.worker_id == "w1" and r.start_s >= own_end for r in gated)
    roomy = [r for r in _gate_case(5_400).items if r.stolen]  # 3,200 + 2,200 fits: steal at once
    assert roomy
    assert min(r.start_s for r in roomy) < own_end


def test_stealing_does_not_slow_a_kv_bound_long_cot_rollout_on_a_mixed_inventory() -> None:
    # 768 long chain-of-thought trajectories on one H100 and one slower Ascend 910B: the Ascend's
    # whole planned queue is in flight at once, leaving free slots but an oversubscribed KV cache;
    # stealing the H100's tail there used to evict (1,267 s against 846 s without stealing)
    batch, inventory = heavy_tailed_batch(768, seed=1), mixed_inventory(2)
    actual = {t.key: int(t.predicted_tokens) for t in batch}
    lpt = plan(PlanRequest(batch, inventory), "lpt")
    alone = simulate(lpt, batch, actual, inventory, SimOptions())
    stolen = simulate(lpt, batch, actual, inventory, SimOptions(steal=True))
    assert stolen.makespan_s <= 1.01 * alone.makespan_s  # tolerance: 1%
    assert stolen.preemptions <= alone.preemptions


def _small_and_big(big_seqs: int = 256) -> list[Worker]:
    """A worker whose cache holds only items of ~2k tokens, and one that holds everything."""
    return [
        worker("small", kv_capacity_tokens=2_000),
        worker("big", kv_capacity_tokens=100_000, max_num_seqs=big_seqs),
    ]


SMALL = [traj(i, 100, 500) for i in range(1, 9)]


@pytest.mark.parametrize("kv_admission", [False, True])
def test_the_shared_queue_never_hands_an_item_to_a_worker_that_cannot_hold_it(kv_admission: bool) -> None:
    workers, trajs = _small_and_big(), [traj(0, 100, 5_000), *SMALL]
    plan_ = shared_plan(workers, [t.key for t in trajs])
    actual = {t.key: t.max_new_tokens for t in trajs}
    options = SimOptions(kv_admission=kv_admission)
    result = simulate(plan_, trajs, actual, Inventory(tuple(workers), MODEL), options)
    assert result.items[0].worker_id == "big"
    assert {r.worker_id for r in result.items[1:]} == {"small", "big"}  # the rest is shared as usual


def test_an_idle_worker_does_not_steal_an_item_its_cache_cannot_hold() -> None:
    big = traj(0, 100, 5_000, predicted=500.0)  # predicted to fit the thief: only its cap says it does not
    result = run({"small": SMALL[:1], "big": [*SMALL[1:], big]}, _small_and_big(big_seqs=1), steal=True)
    assert result.items[-1].worker_id == "big"
