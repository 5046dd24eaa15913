"""engine-sim plays a named engine's rules (``scheduler.sim_rules``): what a preempted sequence keeps
and what admission leaves free. ``vllm-v1`` by default, the engine ``POST /schedule`` plans for when a
request names none: until 2026-12-05 engine-sim kept no watermark, as V1, but restarted an evicted
sequence from nothing, as ``vllm-v0``, so a step on it that evicted ended later than its plan said."""

from __future__ import annotations

import asyncio
import inspect
import random
import socket

import pytest
import typer
from typer.testing import CliRunner

from scheduler.devices import device_profile, model_preset
from scheduler.sim_rules import engine_rules
from scheduler.simulator import simulate_worker
from scheduler.types import Trajectory, Worker
from service.commands.engine_sim import engine_sim
from service.engine_sim.app import build_config, create_app
from service.engine_sim.batch import EngineStats, SimulatedEngine
from service.engines import SERVICE_ENGINE
from tests.service.engine_sim.costs import sim_cost


def _overload(engine: str) -> tuple[list[int], EngineStats]:
    """Four sequences of 100 + 600 tokens on a 2,000-token cache: their 2,800 tokens cannot all stay,
    so the newest ones are evicted and come back. Submitted together, so the engine is busy from the
    first prefill to the last token and its modelled seconds are the batch's makespan in model time
    (counted, not timed: a loaded host makes the sleeps late, not the modelled steps more)."""
    cost = sim_cost(kv_capacity_tokens=2_000)

    async def run() -> tuple[list[int], EngineStats]:
        sim = SimulatedEngine(cost, rules=engine_rules(engine))
        done = await asyncio.gather(*(sim.generate(100, 600) for _ in range(4)))
        stats = sim.stats()
        await sim.close()
        return [g.tokens for g in done], stats

    return asyncio.run(run())


def test_under_vllm_v1_a_preempted_sequence_keeps_its_output_and_the_overload_ends_sooner_than_under_v0() -> (
    None
):
    v1_tokens, v1 = _overload("vllm-v1")
    v0_tokens, v0 = _overload("vllm-v0")
    assert v1_tokens == v0_tokens == [600] * 4
    assert v1.preemptions > 0  # the same overload evicts under both
    assert v0.preemptions > 0
    assert v1.tokens_lost == 0  # resumed with its output: prompt plus output prefilled again
    assert v0.tokens_lost > 0  # restarted from nothing: its output generated twice
    assert v1.modelled_s < v0.modelled_s


@pytest.mark.parametrize("engine", ["vllm-v0", "vllm-v1"])
def test_an_overload_takes_engine_sim_the_model_time_the_simulator_plays_for_the_same_engine(
    engine: str,
) -> None:
    """Sixteen sequences of 500-1,000 + 1,000-3,000 tokens on a 12,000-token cache, 16 slots: dozens of
    evictions. The simulator's ``vllm-v1`` ends 12% sooner than its ``vllm-v0``. engine-sim before
    2026-12-05 (restart, no watermark, whatever it was told) took 17% longer than the ``vllm-v1`` play
    and 2.5% longer than the ``vllm-v0`` one; now each engine's two plays differ by 0.1%, where
    engine-sim's admission counts the next step's token. A V1 resume admitted on its prompt alone
    rather than prompt plus output took 3.3x longer (evicted again at once, hundreds of times)."""
    rng = random.Random(0)
    items = [(500 + rng.randrange(500), 1000 + rng.randrange(2000)) for _ in range(16)]
    rules = engine_rules(engine)
    cost = sim_cost(kv_capacity_tokens=12_000, max_num_seqs=16, time_scale=0.001)

    async def play() -> float:
        sim = SimulatedEngine(cost, rules=rules)
        await asyncio.gather(*(sim.generate(prompt, tokens) for prompt, tokens in items))
        await sim.close()
        return sim.stats().modelled_s / 0.001

    worker = Worker("w", device_profile("H100"), max_num_seqs=16, kv_capacity_tokens=12_000)
    queue = [
        Trajectory(f"p{i}", 0, prompt, tokens, float(tokens)) for i, (prompt, tokens) in enumerate(items)
    ]
    lengths = [tokens for _, tokens in items]
    simulated = simulate_worker(
        worker,
        model_preset("7b"),
        queue,
        actual_tokens=lengths,
        watermark=rules.watermark,
        resume_preempted=rules.resume_preempted,
    )
    assert asyncio.run(play()) == pytest.approx(simulated.finish_s, rel=0.01)


def test_under_vllm_v0_admission_keeps_the_one_percent_watermark_free_and_under_v1_none() -> None:
    """A 9,850-token prompt beside a running 100-token one needs 9,952 tokens with the next step: under
    the 10,000-token cache, over the 9,900 that V0's 1% watermark leaves."""
    assert asyncio.run(_waiting_beside_a_running_sequence("vllm-v0", 9_850)) == 1
    assert asyncio.run(_waiting_beside_a_running_sequence("vllm-v1", 9_850)) == 0


@pytest.mark.parametrize(("prompt", "left"), [(9_898, 0), (9_899, 1)])
def test_under_vllm_v1_a_prompt_that_fills_the_cache_to_its_last_token_with_the_next_step_is_admitted(
    prompt: int, left: int
) -> None:
    """Beside a running 100-token sequence (101 with its next step), 9,898 tokens and their next step
    fill the 10,000-token cache exactly: admitted; one token more waits."""
    assert asyncio.run(_waiting_beside_a_running_sequence("vllm-v1", prompt)) == left


async def _waiting_beside_a_running_sequence(engine: str, prompt: int) -> int:
    """How many requests wait once a ``prompt``-token request arrives beside a running 100-token one,
    on a 10,000-token cache whose first chunk lasts seconds (so nothing finishes meanwhile)."""
    sim = SimulatedEngine(sim_cost(kv_capacity_tokens=10_000, time_scale=1.0), rules=engine_rules(engine))
    tasks = [asyncio.create_task(sim.generate(100, 5_000)), asyncio.create_task(sim.generate(prompt, 10))]
    for _ in range(5):  # the requests queue, then the batch loop admits before its first sleep
        await asyncio.sleep(0)
    waiting = sim.stats().waiting
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    await sim.close()
    return waiting


def test_an_engine_alone_admits_its_head_even_where_the_watermark_would_refuse_it() -> None:
    """vLLM V0 would refuse such a sequence; the simulator admits an empty worker's head, and so
    does engine-sim, whose ``generate`` refused whatever the whole cache cannot hold."""

    async def run() -> int:
        sim = SimulatedEngine(sim_cost(kv_capacity_tokens=1_000), rules=engine_rules("vllm-v0"))
        generation = await asyncio.wait_for(sim.generate(995, 5), timeout=60)
        await sim.close()
        return generation.tokens

    assert asyncio.run(run()) == 5


def test_engine_sim_plays_the_engine_the_service_plans_for_unless_told_otherwise() -> None:
    assert build_config("H100").engine == SERVICE_ENGINE
    assert build_config("H100", engine="vllm-v0").engine == "vllm-v0"
    assert SimulatedEngine(sim_cost()).rules == engine_rules(SERVICE_ENGINE)
    assert inspect.signature(engine_sim).parameters["engine"].default == SERVICE_ENGINE
    app = create_app(build_config("H100", engine="vllm-v0"))
    assert app.state.engine.rules == engine_rules("vllm-v0")


def test_an_unknown_engine_is_refused_by_name_in_one_line_with_exit_2(cli: typer.Typer) -> None:
    with socket.socket() as taken:  # were the flag ignored, this port would stop it, not a server
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        result = CliRunner().invoke(
            cli, ["engine-sim", "--device", "H100", "--port", port, "--engine", "vllm-v9"]
        )
    assert result.exit_code == 2
    assert result.stderr.strip().splitlines() == [
        "engine-sim: engine='vllm-v9': unknown; expected one of vllm-v0, vllm-v1"
    ]


def test_build_config_takes_the_known_engines_and_names_an_unknown_one() -> None:
    assert [build_config("H100", engine=name).engine for name in ("vllm-v0", "vllm-v1")] == [
        "vllm-v0",
        "vllm-v1",
    ]
    with pytest.raises(ValueError, match="engine='V1': unknown; expected one of vllm-v0, vllm-v1"):
        build_config("H100", engine="V1")
