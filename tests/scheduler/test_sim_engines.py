"""The simulator's named engines: vLLM V1 keeps an evicted sequence's output and no watermark.

``vllm-v0`` (the default) restarts an evicted sequence and keeps 1% of KV free at admission;
``vllm-v1`` resumes it with its output, re-prefilled with the prompt, and admits what fits exactly.
"""

from __future__ import annotations

import dataclasses
import random

import pytest

from scheduler import sim_alone
from scheduler.costmodel import WorkerCost, worker_cost
from scheduler.devices import device_profile, model_preset
from scheduler.errors import InvalidInputError, UnknownNameError
from scheduler.planner import plan
from scheduler.sim_engine import WorkerEngine
from scheduler.sim_ledger import Ledger
from scheduler.sim_rules import DEFAULT_ENGINE, ENGINES, engine_rules
from scheduler.simulator import SimOptions, simulate, simulate_worker, with_engine
from scheduler.types import Inventory, PlanRequest, Trajectory, Worker

MODEL = model_preset("7b")


class _Recorded(WorkerEngine):
    """The engine played method by method, recording what each item decoded and what was prefilled."""

    def __init__(self, cost: WorkerCost, ledger: Ledger, engine: str) -> None:
        rules = engine_rules(engine)
        super().__init__(0, cost, ledger, watermark=rules.watermark, kv_admission=False,
                         resume=rules.resume_preempted)  # fmt: skip
        self.decoded = [0] * len(ledger.keys)  # decode tokens each item was given, over all its runs
        self.prefilled: list[tuple[int, float]] = []  # (tokens, seconds) of each prefill, in order
        self.resumed: list[int] = []  # prompt + kept output of each evicted item, at its eviction
        self.evicted_at: list[tuple[int, int]] = []  # (item, step) of each eviction

    def process(self) -> None:
        if self.pending_run > 0:  # every running sequence appends one token a step until the event
            for item in self.alive:
                self.decoded[item] += self.pending_run
        super().process()

    def commit(self) -> float | None:
        tokens, before = self.prefill_tokens, self.clock
        pending = super().commit()  # the prefill moves ``clock``; the decode run, ``event_clock``
        if tokens:
            self.prefilled.append((tokens, self.clock - before))
        return pending

    def _preempt_newest(self) -> None:
        super()._preempt_newest()
        item = self.waiting[0]
        self.resumed.append(self.ledger.prompts[item] + self.ledger.kept[item])
        self.evicted_at.append((item, self.step))


def _cost(capacity: int, slots: int = 8) -> WorkerCost:
    worker = Worker("w", device_profile("H100"), max_num_seqs=slots, kv_capacity_tokens=capacity)
    return worker_cost(worker, MODEL)


def _tight_queue() -> tuple[WorkerCost, Ledger]:
    """Eight long sequences on a cache that holds about three at their ends: many evictions."""
    rng = random.Random(3)
    prompts = [rng.randint(50, 300) for _ in range(8)]
    steps = [rng.randint(600, 1_500) for _ in range(8)]
    ledger = Ledger([f"t{i}" for i in range(8)], prompts, steps, list(steps))
    return _cost(capacity=max(p + s for p, s in zip(prompts, steps, strict=True)) + 2_000), ledger


def _played(engine: str) -> _Recorded:
    cost, ledger = _tight_queue()
    played = _Recorded(cost, ledger, engine)
    played.enqueue(list(range(len(ledger.keys))))
    sim_alone.run_alone(played)
    return played


def test_the_engines_are_v0_by_default_and_v1_by_name() -> None:
    assert DEFAULT_ENGINE == "vllm-v0"
    assert (SimOptions().watermark, SimOptions().resume_preempted) == (0.01, False)
    v1 = with_engine(SimOptions(steal=True), "vllm-v1")
    assert (v1.watermark, v1.resume_preempted, v1.steal) == (0.0, True, True)
    assert with_engine(v1, "vllm-v0") == SimOptions(steal=True)


def test_an_unknown_engine_is_refused_by_name_with_the_known_ones() -> None:
    with pytest.raises(UnknownNameError) as refused:
        with_engine(SimOptions(), "vllm-v2")
    assert str(refused.value) == "engine='vllm-v2': unknown; expected one of vllm-v0, vllm-v1"


def test_in_v1_an_evicted_sequence_resumes_with_its_output_decoding_each_token_once() -> None:
    played = _played("vllm-v1")
    assert played.preempted >= 5
    assert played.decoded == played.ledger.steps
    assert all(end > 0.0 for end in played.ledger.end)


def test_in_v0_an_evicted_sequence_decodes_again_what_it_lost() -> None:
    played = _played("vllm-v0")
    evicted = [i for i, n in enumerate(played.ledger.preemptions) if n]
    assert evicted
    assert all(played.decoded[i] > played.ledger.steps[i] for i in evicted)
    assert all(played.decoded[i] == played.ledger.steps[i] for i in range(8) if i not in evicted)


def test_in_v1_resuming_prefills_the_prompt_and_the_kept_output_at_prefill_cost() -> None:
    played = _played("vllm-v1")
    ledger = played.ledger
    assert any(n > min(ledger.prompts) for n in played.resumed)  # some kept output to prefill again
    # every prompt once, and each eviction's prompt plus the output it kept once more
    assert sum(n for n, _ in played.prefilled) == sum(ledger.prompts) + sum(played.resumed)
    # each prefill stalls the worker for the cost model's prefill time of what it holds
    for tokens, seconds in played.prefilled:
        assert seconds == pytest.approx(played.cost.prefill_time(tokens), rel=1e-9)


def test_with_no_watermark_a_prompt_that_fills_the_cache_exactly_starts_beside_the_running_one() -> None:
    cost = _cost(capacity=1_000)
    for engine, extra, starts_at_once in (
        ("vllm-v1", 0, True),  # 400 + 600 = 1,000 tokens: the whole cache
        ("vllm-v1", 1, False),  # one token more waits for the first to end
        ("vllm-v0", 0, False),  # V0 keeps 1% (10 tokens) free
    ):
        ledger = Ledger(["a", "b"], [400, 600 + extra], [3, 3], [3, 3])
        rules = engine_rules(engine)
        played = sim_alone.play_queue(cost, ledger, watermark=rules.watermark, kv_admission=False,
                                      resume=rules.resume_preempted)  # fmt: skip
        assert (ledger.start[1] == ledger.start[0]) is starts_at_once, (engine, extra)
        assert played.batch == 0


def test_a_v1_play_is_deterministic_and_differs_from_v0_s_where_sequences_are_evicted() -> None:
    trajectories = tuple(Trajectory(f"q{i // 4}", i % 4, 200, 1_500, 1_000.0) for i in range(40))
    rng = random.Random(5)
    actual = {t.key: rng.randint(200, 1_500) for t in trajectories}
    workers = tuple(Worker(f"w{i}", device_profile("H100"), kv_capacity_tokens=8_000) for i in range(2))
    inventory = Inventory(workers, MODEL)
    the_plan = plan(PlanRequest(trajectories, inventory, time_budget_s=0.1), "round_robin")
    v1 = with_engine(SimOptions(steal=True), "vllm-v1")
    first = simulate(the_plan, trajectories, actual, inventory, v1)
    assert first == simulate(the_plan, trajectories, actual, inventory, v1)
    assert first.preemptions > 0
    v0 = simulate(the_plan, trajectories, actual, inventory, SimOptions(steal=True))
    assert first.makespan_s != v0.makespan_s
    assert [r.output_tokens for r in first.items] == [actual[t.key] for t in trajectories]


@pytest.mark.parametrize("policy", ["lpt", "cpsat"])
def test_under_projected_peak_admission_a_v1_play_of_exact_lengths_reproduces_the_plan(policy: str) -> None:
    """Projected-peak admission never evicts on exact lengths, so what V1 changes never happens and
    the plan, made on the V0 model, holds to the last bit (the watermark only gates vLLM admission)."""
    rng = random.Random(11)
    trajectories = tuple(
        Trajectory(f"q{i // 4}", i % 4, rng.randint(16, 1_500), n, float(n))
        for i, n in enumerate(min(12_000, max(1, int(rng.lognormvariate(6.5, 1.0)))) for _ in range(300))
    )
    kinds = ("H100", "910B", "A100")
    workers = tuple(Worker(f"w{i}", device_profile(kinds[i % 3]), max_num_seqs=32, kv_capacity_tokens=60_000)
                    for i in range(4))  # fmt: skip
    inventory = Inventory(workers, MODEL)
    planned = plan(PlanRequest(trajectories, inventory, time_budget_s=0.2, kv_admission=True), policy)
    static = dataclasses.replace(planned, dispatch_order=())
    actual = {t.key: int(t.predicted_tokens) for t in trajectories}
    options = with_engine(SimOptions(kv_admission=True), "vllm-v1")
    result = simulate(static, trajectories, actual, inventory, options)
    assert result.preemptions == 0
    for wp in planned.workers:
        assert result.worker_finish_s[wp.worker_id] == pytest.approx(wp.predicted_finish_s, rel=1e-9)


def test_in_v1_a_sequence_evicted_into_a_full_cache_again_and_again_still_lets_the_rest_progress() -> None:
    """Without a watermark an evicted sequence re-enters as soon as its prompt and output fit, which
    may leave no room for the batch's next tokens: it is evicted again before it decodes. Each such
    round runs a decode step of the others first, so the play ends, every token decoded once."""
    # three sequences of 100-token prompts hold 300 + 3s at step s: at step 100 the step's 3 tokens
    # overflow 602 and the newest is evicted with its 100 tokens of output; at step 101 its 200 fit
    # exactly (402 + 200 = 602), and the next step's tokens do not: evicted again, having decoded none
    cost = _cost(capacity=602)
    ledger = Ledger(["a", "b", "c"], [100, 100, 100], [220, 220, 200], [220, 220, 200])
    played = _Recorded(cost, ledger, "vllm-v1")
    played.enqueue([0, 1, 2])
    sim_alone.run_alone(played)
    assert played.evicted_at[:2] == [(2, 100), (2, 101)]
    assert played.prefilled[1][0] == 200  # the re-entry, prompt and kept output, charged all the same
    assert played.decoded == ledger.steps
    assert all(end > 0.0 for end in ledger.end)


@pytest.mark.parametrize("engine", list(ENGINES))
def test_a_sequence_its_worker_cannot_hold_alone_fails_by_name_in_every_engine(engine: str) -> None:
    rules = engine_rules(engine)
    items = [Trajectory("q0", 0, 100, 50, 50.0), Trajectory("q1", 0, 1_000, 1_000, 200.0)]
    worker = Worker("w", device_profile("H100"), kv_capacity_tokens=1_500)
    with pytest.raises(InvalidInputError) as refused:
        simulate_worker(worker, MODEL, items, actual_tokens=[50, 1_000], watermark=rules.watermark,
                        resume_preempted=rules.resume_preempted)  # fmt: skip
    assert refused.value.field == f"actual_tokens[{items[1].key}]"
