"""The simulated engine's batch clock: cost-model pacing, slot and KV limits, preemption, cancellation."""

from __future__ import annotations

import asyncio
import time

import pytest

from scheduler.costmodel import WorkerCost
from service.engine_sim.batch import PromptTooLongError, SimulatedEngine
from tests.service.engine_sim.costs import sim_cost


def _modelled_alone(cost: WorkerCost, prompt: int, tokens: int) -> float:
    return cost.prefill_time(prompt) + sum(cost.step_time(1, prompt + i) for i in range(tokens))


def test_a_lone_request_takes_at_least_the_cost_model_time_and_returns_its_length() -> None:
    cost = sim_cost()

    async def run() -> tuple[float, int]:
        engine = SimulatedEngine(cost)
        start = time.monotonic()
        generation = await engine.generate(200, 1500)
        await engine.close()
        return time.monotonic() - start, generation.tokens

    elapsed, tokens = asyncio.run(run())
    modelled = _modelled_alone(cost, 200, 1500)
    assert tokens == 1500
    assert elapsed >= modelled * 0.98


def test_a_lone_request_is_paced_by_its_events_not_by_a_wake_up_per_token() -> None:
    """The batch loop reads its clock a few times per event (here one: the request finishing), so
    its wake-ups do not grow with the tokens generated. A loop that slept once per decode step would
    read it at least once per token (1,500 here), and drift by a scheduler delay per step. Counted,
    not timed: a loaded host makes the sleeps late, which only makes the count smaller."""
    reads = 0

    def counting_clock() -> float:
        nonlocal reads
        reads += 1
        return time.monotonic()

    async def run() -> int:
        engine = SimulatedEngine(sim_cost(), clock=counting_clock)
        generation = await engine.generate(200, 1500)
        await engine.close()
        return generation.tokens

    assert asyncio.run(run()) == 1500
    assert reads < 15  # per event, not per token


def test_concurrent_requests_slow_each_other_down_as_the_batch_grows() -> None:
    # 256 sequences of ~1k tokens read ~6 ms of KV per step on top of the weights: about 1.8x slower.
    cost = sim_cost(max_num_seqs=256, time_scale=0.02)

    async def run() -> float:
        engine = SimulatedEngine(cost)
        start = time.monotonic()
        await asyncio.gather(*(engine.generate(1000, 200) for _ in range(256)))
        await engine.close()
        return time.monotonic() - start

    batch_s = asyncio.run(run())
    batched_model = sum(cost.step_time(256, 256 * (1000 + i)) for i in range(200))
    assert batched_model > 1.5 * _modelled_alone(cost, 1000, 200)
    assert batch_s >= batched_model * 0.98


def test_the_batch_never_exceeds_max_num_seqs_and_every_request_finishes() -> None:
    cost = sim_cost(max_num_seqs=3)

    async def run() -> tuple[list[int], int]:
        engine = SimulatedEngine(cost)
        done = await asyncio.gather(*(engine.generate(50, 100 + 10 * i) for i in range(10)))
        stats = engine.stats()
        await engine.close()
        return [g.tokens for g in done], stats.max_running

    tokens, max_running = asyncio.run(run())
    assert tokens == [100 + 10 * i for i in range(10)]
    assert max_running == 3


def test_a_full_kv_cache_preempts_the_newest_sequence_which_recomputes_and_still_finishes() -> None:
    cost = sim_cost(kv_capacity_tokens=2_000, max_num_seqs=8)

    async def run() -> tuple[list[int], int, int]:
        engine = SimulatedEngine(cost)
        done = await asyncio.gather(*(engine.generate(100, 600) for _ in range(4)))
        stats = engine.stats()
        await engine.close()
        return [g.tokens for g in done], sum(g.preemptions for g in done), stats.preemptions

    tokens, per_request, total = asyncio.run(run())
    assert tokens == [600] * 4
    assert total > 0
    assert per_request == total


def test_a_cancelled_request_leaves_the_batch_and_frees_its_slot() -> None:
    cost = sim_cost(max_num_seqs=1)

    async def run() -> tuple[int, int, int]:
        engine = SimulatedEngine(cost)
        hog = asyncio.create_task(engine.generate(10, 1_000_000))
        await asyncio.sleep(0.05)
        hog.cancel()
        quick = await asyncio.wait_for(engine.generate(10, 20), timeout=5)
        stats = engine.stats()
        await engine.close()
        return quick.tokens, stats.cancelled, stats.finished

    tokens, cancelled, finished = asyncio.run(run())
    assert (tokens, cancelled, finished) == (20, 1, 1)


def test_a_prompt_larger_than_the_kv_cache_is_refused() -> None:
    engine = SimulatedEngine(sim_cost(kv_capacity_tokens=100))
    with pytest.raises(PromptTooLongError, match="exceeds the KV cache of 100"):
        asyncio.run(engine.generate(100, 5))


def test_a_sequence_that_would_outgrow_the_whole_kv_cache_is_refused_not_preempted_forever() -> None:
    engine = SimulatedEngine(sim_cost(kv_capacity_tokens=1_000))
    with pytest.raises(PromptTooLongError, match="plus 1500 to generate exceeds the KV cache of 1000"):
        asyncio.run(engine.generate(100, 1_500))
