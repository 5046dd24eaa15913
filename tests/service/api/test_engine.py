"""``POST /schedule``'s ``engine``: the engine the workers run, whose eviction rules the plan's hedges
judge orders by under vLLM admission (``robust_order.draw_rules``) and the published steal deadlines
are played by. The service plans for vLLM V1 unless told otherwise (docs/api.md, "engine")."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
import redis
import typer
from fastapi.testclient import TestClient
from pydantic import ValidationError
from typer.testing import CliRunner

from predictors.synthetic import synthetic_trace
from scheduler.devices import device_profile, model_preset
from scheduler.planner import plan
from scheduler.sim_rules import ENGINES
from scheduler.types import Inventory, Plan, PlanRequest, Trajectory, Worker
from service.api.schemas import ScheduleRequest
from service.commands import serve as serve_command
from service.engines import SERVICE_ENGINE
from service.pipeline import stages
from service.pipeline.served import StageClock
from service.replay.harness import ReplayConfig, replay
from service.settings import Settings, invalid_setting
from tests.service.api.badinput import redis_snapshot
from tests.service.api_helpers import AppFactory, batch_body


def test_a_request_that_names_no_engine_is_planned_for_vllm_v1_the_engine_served_today() -> None:
    """vLLM removed V0 in 0.11 and SGLang's retraction keeps the output as V1's preemption does. The
    request's own default is none: the service's setting (``ROLLOUT_DEFAULT_ENGINE``) fills it in."""
    assert SERVICE_ENGINE == "vllm-v1" in ENGINES
    assert Settings.model_fields["default_engine"].default == SERVICE_ENGINE
    assert ScheduleRequest.model_validate(batch_body()).engine is None


def _planned_engines(client: TestClient, monkeypatch: pytest.MonkeyPatch, body: dict[str, Any]) -> list[str]:
    """The engine each plan of ``body``'s request was made for (the requested one, the baseline)."""
    told: list[str] = []

    def spy(request: PlanRequest, policy: str, **options: Any) -> Plan:
        told.append(request.engine)
        return plan(request, policy, **options)

    monkeypatch.setattr(stages, "plan", spy)
    assert client.post("/schedule", json=body).status_code == 200
    return told


@pytest.mark.parametrize("engine", [None, *ENGINES])
def test_a_fleet_that_runs_vllm_v0_names_it_once_in_the_settings_and_a_request_s_own_engine_wins(
    make_client: AppFactory, monkeypatch: pytest.MonkeyPatch, engine: str | None
) -> None:
    """An operator of a V0 fleet (or of engines that evict like it) sets ``ROLLOUT_DEFAULT_ENGINE``
    instead of naming ``engine`` in every trainer's every request."""
    client = make_client(default_engine="vllm-v0")
    body = batch_body(publish=False) | ({} if engine is None else {"engine": engine})
    assert _planned_engines(client, monkeypatch, body) == [engine or "vllm-v0"] * 2


def test_the_default_engine_setting_is_read_from_rollout_default_engine(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ROLLOUT_DEFAULT_ENGINE", "vllm-v0")
    assert Settings(redis_url=None).default_engine == "vllm-v0"


def test_serve_takes_the_default_engine_as_a_flag_over_the_variable(
    cli: typer.Typer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As ``--default-policy``: a flag for the one-off run (an engine-sim fleet started with
    ``--engine vllm-v0`` beside it), the variable for a deployment."""
    monkeypatch.setenv("ROLLOUT_DEFAULT_ENGINE", "vllm-v1")
    served: list[Settings] = []
    monkeypatch.setattr(serve_command, "run", served.append)
    flags = ["--port", "0", "--default-engine", "vllm-v0"]  # run is replaced: nothing binds it
    result = CliRunner().invoke(cli, ["serve", *flags])
    assert result.exit_code == 0, result.output
    assert [s.default_engine for s in served] == ["vllm-v0"]


def test_an_unknown_default_engine_is_refused_at_start_naming_the_setting_the_value_and_the_engines() -> None:
    """Refused later, every request naming no engine would get a 422 blaming a field it never sent."""
    with pytest.raises(ValidationError) as refused:
        Settings(redis_url=None, default_engine="vllm-v2")
    line = invalid_setting(refused.value, environ={})
    assert line == (
        "invalid setting ROLLOUT_DEFAULT_ENGINE='vllm-v2': engine 'vllm-v2' unknown; "
        "expected one of vllm-v0, vllm-v1"
    )


@pytest.mark.parametrize("engine", [None, *ENGINES])
def test_the_engine_a_request_names_is_the_one_its_plan_is_made_for(
    client: TestClient, monkeypatch: pytest.MonkeyPatch, engine: str | None
) -> None:
    body = batch_body(publish=False) | ({} if engine is None else {"engine": engine})
    assert ScheduleRequest.model_validate(body).model_dump(exclude_unset=True).get("engine") == engine
    # the requested plan and the round-robin baseline
    assert _planned_engines(client, monkeypatch, body) == [engine or SERVICE_ENGINE] * 2


def test_an_unknown_engine_is_refused_naming_the_field_and_the_known_engines_and_writes_nothing(
    client: TestClient, redis_client: redis.Redis
) -> None:
    before = redis_snapshot(redis_client)
    refused = client.post("/schedule", json=batch_body(engine="sglang-v9"))
    assert refused.status_code == 422
    problem = refused.json()
    assert (problem["field"], problem["value"]) == ("engine", "sglang-v9")
    assert problem["detail"].endswith("unknown; expected one of vllm-v0, vllm-v1")
    assert redis_snapshot(redis_client) == before


def _fixture_step() -> tuple[tuple[Trajectory, ...], Inventory]:
    """The replay test's case where V1's judging reorders lpt's queues (tests/service/replay/
    test_replay.py, ``..._lpt_plans_for_it``): the long-CoT trace's step 2 as the replay predicted
    it, on two H100s whose 60,000-token caches evict under vLLM admission."""
    trace = synthetic_trace("long-cot", prompts=12, samples=4, steps=3, seed=5)
    workers = tuple(Worker(f"w{i}", device_profile("H100"), kv_capacity_tokens=60_000) for i in range(2))
    pool = Inventory(workers, model_preset("7b"))
    config = ReplayConfig(pool, ("lpt",), (2,), time_budget_s=0.2, kv_admission=False, steal_modes=(False,))
    return tuple(replay(trace, config).steps[0].batch), pool


def _body(trajectories: tuple[Trajectory, ...], engine: str) -> ScheduleRequest:
    """The step as a /schedule body on the fixture's pool, under vLLM admission (the default)."""
    counts = Counter(t.prompt_id for t in trajectories)
    first = {t.prompt_id: t for t in reversed(trajectories)}
    items = [
        {
            "prompt_id": p,
            "prompt_tokens": first[p].prompt_tokens,
            "n": n,
            "max_new_tokens": first[p].max_new_tokens,
        }
        for p, n in counts.items()
    ]
    workers = [{"worker_id": f"w{i}", "device": "H100", "kv_capacity_tokens": 60_000} for i in range(2)]
    body = {"batch": {"items": items}, "inventory": {"workers": workers}, "model": "7b", "policy": "lpt"}
    return ScheduleRequest.model_validate(body | {"engine": engine, "time_budget_ms": 60_000})


def test_under_vllm_admission_the_engine_named_reorders_the_plan_where_its_hedges_differ(
    client: TestClient,
) -> None:
    """The service's plan of the replay's step, by each engine: the hedges, judging draws by V1's
    rules, choose other queues than by V0's (the predicted lengths and their spreads held fixed)."""
    ctx = client.app.state.context  # type: ignore[attr-defined]
    trajectories, pool = _fixture_step()
    planned = {}
    for engine in ENGINES:
        body = _body(trajectories, engine)
        checked = stages.validate(body, ctx)
        assert checked.inventory == pool
        chosen, _ = stages._plans(stages._plan_request(body, checked, trajectories), checked, StageClock())
        planned[engine] = chosen.workers
    assert planned["vllm-v0"] != planned["vllm-v1"]
