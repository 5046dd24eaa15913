"""What the simulator starts between completions: the step at which a waiting item first fits.

A polling sidecar re-tests what it could start at every step, and vLLM retries its waiting line
(evicted sequences first) at every step, so an item that comes to fit before the next completion
starts there, not at that completion (docs/simulator.md, "Claiming").
"""

from __future__ import annotations

from scheduler.devices import device_profile, model_preset
from scheduler.simulator import SimOptions, SimResult, simulate
from scheduler.types import Inventory, Plan, Trajectory, Worker, WorkerPlan

MODEL = model_preset("7b")


def _items(spec: list[tuple[int, int, int]]) -> list[Trajectory]:
    """(prompt, predicted tokens, true tokens) -> trajectories (cap: the larger length)."""
    return [Trajectory(f"p{i}", 0, p, max(n, a), float(n)) for i, (p, n, a) in enumerate(spec)]


def _play(spec: list[tuple[int, int, int]], kv_admission: bool, shared: bool = False) -> SimResult:
    w = Worker("a", device_profile("H100"), max_num_seqs=8, kv_capacity_tokens=1_000)
    items = _items(spec)
    keys = tuple(t.key for t in items)
    if shared:
        plan = Plan("least_loaded", (WorkerPlan("a", (), 0.0),), 0.0, 0.0, "T", 0.0, dispatch_order=keys)
    else:
        plan = Plan("t", (WorkerPlan("a", keys, 0.0),), 0.0, 0.0, "T", 0.0)
    actual = {t.key: a for t, (_, _, a) in zip(items, spec, strict=True)}
    return simulate(plan, items, actual, Inventory((w,), MODEL), SimOptions(kv_admission=kv_admission))


def _re_entries_without_a_completion(result: SimResult, n: int) -> int:
    """How many more times item ``n`` was evicted than other items completed before it ended: what
    re-entering only at completions allows is at most 0 (each re-entry then waits for one)."""
    record = result.items[n]
    return record.preemptions - sum(1 for r in result.items if r.end_s < record.end_s)


def test_an_evicted_sequence_re_enters_as_soon_as_its_prompt_fits_not_at_the_next_completion() -> None:
    # three sequences of 10 + 600 tokens on a 1,000-token cache: the third is evicted near step 323,
    # when the other two hold 333 each; its 10-token prompt fits again one step on, so vLLM restarts
    # it there (and evicts it again as the cache refills), long before the first completion at 600
    result = _play([(10, 600, 600)] * 3, kv_admission=False)
    assert _re_entries_without_a_completion(result, 2) > 0


def test_under_kv_admission_an_evicted_sequence_re_enters_at_the_first_step_its_projected_peak_fits() -> None:
    # both sequences outlive their predictions (600 and 376 tokens against 300 and 79); the newest
    # is evicted when the cache fills and re-enters the first time its projected peak fits beside
    # the other, before that one completes (and is evicted again), not once it has completed
    result = _play([(10, 300, 600), (271, 79, 376)], kv_admission=True)
    assert result.items[0].preemptions == 0
    assert _re_entries_without_a_completion(result, 1) > 0


def test_a_shared_queue_head_starts_at_the_same_step_as_the_same_head_in_the_own_queue() -> None:
    # the third item is refused at time 0 and first fits between completions: from the worker's own
    # queue it starts there (the polling sidecar), and so it does from a shared queue
    spec = [(393, 301, 301), (36, 69, 69), (60, 502, 502)]
    own = _play(spec, kv_admission=True)
    shared = _play(spec, kv_admission=True, shared=True)
    ends = {r.end_s for r in own.items}
    assert own.items[2].start_s > 0.0
    assert own.items[2].start_s not in ends
    assert [r.start_s for r in shared.items] == [r.start_s for r in own.items]
    assert [r.end_s for r in shared.items] == [r.end_s for r in own.items]
