"""A bad field of a /schedule body, path or query: a 422 problem naming it, and Redis left exactly
as it was."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
import redis
from fastapi.testclient import TestClient

from tests.service.api.badinput import JSON_HEADERS, Body, redis_snapshot, set_at
from tests.service.api_helpers import batch_body


@pytest.fixture
def client(module_app: TestClient, redis_client: redis.Redis) -> TestClient:
    """The module's one app (``module_app``), on a Redis flushed for the test:
    a refusal is the body's, and Redis is checked unchanged."""
    return module_app


def _drain_all(body: Body) -> None:
    for spec in body["inventory"]["workers"]:
        spec["drain"] = True


def _fresh_names(body: Body) -> None:
    """40 feature names of its own on every item: within each item's limit, past the request's."""
    for k, item in enumerate(body["batch"]["items"]):
        item["features"] = {f"i{k}_f{j}": 1.0 for j in range(40)}


CASES: dict[str, tuple[Callable[[Body], None], str]] = {
    "zero prompt tokens": (set_at("batch.items.0.prompt_tokens", 0), "batch.items[0].prompt_tokens"),
    "negative max_new_tokens": (set_at("batch.items.2.max_new_tokens", -5), "batch.items[2].max_new_tokens"),
    "zero samples": (set_at("batch.items.1.n", 0), "batch.items[1].n"),
    "tokens as a string": (set_at("batch.items.0.prompt_tokens", "100"), "batch.items[0].prompt_tokens"),
    "duplicate prompt_id": (set_at("batch.items.3.prompt_id", "p1"), "batch.items[3].prompt_id"),
    "unknown device": (set_at("inventory.workers.1.device", "TPUv9"), "inventory.workers[1].device"),
    "duplicate worker_id": (set_at("inventory.workers.1.worker_id", "w0"), "inventory.workers[1].worker_id"),
    "unknown field": (set_at("batch.items.0.colour", "red"), "batch.items[0].colour"),
    "unknown top-level field": (set_at("priority", 1), "priority"),
    "unknown policy": (set_at("policy", "fastest"), "policy"),
    "unknown model": (set_at("model", "999b"), "model"),
    "an empty policy": (set_at("policy", ""), "policy"),  # not the default policy, silently
    "an empty model": (set_at("model", ""), "model"),
    "unknown engine": (set_at("engine", "vllm-v2"), "engine"),
    "an empty engine": (set_at("engine", ""), "engine"),  # not the default engine, silently
    "quantile out of range": (set_at("quantile", 1.5), "quantile"),
    "pinned to a stranger": (set_at("batch.items.0.pinned_worker", "w9"), "batch.items[0].pinned_worker"),
    "empty inventory": (set_at("inventory.workers", []), "inventory.workers"),
    "negative temperature": (set_at("sampling", {"temperature": -0.5}), "sampling.temperature"),
    "top_p above one": (set_at("batch.items.2.sampling", {"top_p": 1.5}), "batch.items[2].sampling.top_p"),
    "an unknown sampling field": (set_at("sampling", {"tempreature": 1.0}), "sampling.tempreature"),
    "max_tokens through extra": (set_at("sampling", {"extra": {"max_tokens": 10}}), "sampling.extra"),
    "a feature text too long": (
        set_at("batch.items.0.features", {"topic": "x" * 257}),
        "batch.items[0].features.topic",
    ),
    "n through extra": (
        set_at("batch.items.0.sampling", {"extra": {"n": 16}}),
        "batch.items[0].sampling.extra",
    ),
    "a typed field through extra": (set_at("sampling", {"extra": {"seed": 3}}), "sampling.extra"),
    "a top_k past any vocabulary": (set_at("sampling", {"top_k": 10**30}), "sampling.top_k"),
    "a stop token past any vocabulary": (
        set_at("batch.items.1.sampling", {"stop_token_ids": [2, 2**31]}),
        "batch.items[1].sampling.stop_token_ids[1]",
    ),
    "an integer past int64 through extra": (
        set_at("sampling", {"extra": {"logit_bias": {"50256": -(10**30)}}}),
        "sampling.extra",
    ),
    "cap beyond every KV cache": (
        set_at("batch.items.1.max_new_tokens", 50_000_000),
        "batch.items[1].max_new_tokens",
    ),
    "a prompt that alone fills every KV cache": (  # the prompt is at fault, not the cap
        set_at("batch.items.1.prompt_tokens", 50_000_000),
        "batch.items[1].prompt_tokens",
    ),
    "a prompt length past any integer column": (
        set_at("batch.items.0.prompt_tokens", 10**30),
        "batch.items[0].prompt_tokens",
    ),
    "a cap past any integer column": (
        set_at("batch.items.1.max_new_tokens", 10**30),
        "batch.items[1].max_new_tokens",
    ),
    "a seed past int64": (set_at("seed", 2**63), "seed"),
    "a step past the bound": (set_at("step", 2**31), "step"),
    "bandwidth past any device": (
        set_at("inventory.workers.0.hbm_bandwidth_gbs", 1e308),
        "inventory.workers[0].hbm_bandwidth_gbs",
    ),
    "throughput below any device": (
        set_at("inventory.workers.0.peak_tflops", 1e-300),
        "inventory.workers[0].peak_tflops",
    ),
    "memory past any device": (
        set_at("inventory.workers.1.memory_gib", 1e308),
        "inventory.workers[1].memory_gib",
    ),
    "a memory override too small to hold the model": (  # the override is at fault, not the H100
        set_at("inventory.workers.0.memory_gib", 1.0),
        "inventory.workers[0].memory_gib",
    ),
    "a vanishing time scale": (
        set_at("inventory.workers.0.time_scale", 1e-300),
        "inventory.workers[0].time_scale",
    ),
    "a measured speed a unit off": (
        set_at("inventory.workers.0.decode_tokens_per_s", 1e-3),
        "inventory.workers[0].decode_tokens_per_s",
    ),
    "both a prompt and messages": (
        set_at("batch.items.0.messages", [{"role": "user", "content": "hi"}]),
        "batch.items[0]",
    ),
    "no chat turns": (set_at("batch.items.1.messages", []), "batch.items[1].messages"),
    "too many features": (
        set_at("batch.items.0.features", {f"f{i}": 1.0 for i in range(65)}),
        "batch.items[0].features",
    ),
    "more feature names across the items than a request may bring": (_fresh_names, "batch.items"),
    "every worker drained": (_drain_all, "inventory.workers"),
    "a long feature text": (
        set_at("batch.items.0.features", {"topic": "x" * 257}),
        "batch.items[0].features.topic",
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_bad_field_is_a_422_problem_naming_it_and_changes_nothing(
    case: str, client: TestClient, redis_client: redis.Redis
) -> None:
    client.post("/schedule", json=batch_body())  # some state to keep intact
    before = redis_snapshot(redis_client)
    edit, field = CASES[case]
    body = batch_body()
    edit(body)
    response = client.post("/schedule", json=body)
    assert response.status_code == 422, response.text
    assert response.headers["content-type"] == "application/problem+json"
    problem = response.json()
    assert problem["status"] == 422
    assert problem["field"] == field
    assert field in problem["detail"] or problem["field"] == field
    assert redis_snapshot(redis_client) == before


@pytest.mark.parametrize(
    ("path", "value", "first"),
    [
        ("batch.items.3.prompt_id", "p1", "batch.items[1]"),
        ("inventory.workers.1.worker_id", "w0", "inventory.workers[0]"),
    ],
)
def test_a_duplicate_id_names_its_first_by_the_whole_path(
    client: TestClient, path: str, value: str, first: str
) -> None:
    """A duplicate's detail points at the first holder of the id as the body spells it, as ``field``
    does: a bare ``[0]`` (the worker_id's until 2026-12-07) left the reader to guess which list."""
    body = batch_body()
    set_at(path, value)(body)
    problem = client.post("/schedule", json=body).json()
    assert f"(first at {first})" in problem["detail"], problem["detail"]


@pytest.mark.parametrize(
    ("literal", "where", "field"),
    [
        ("NaN", "quantile", "quantile"),
        ("Infinity", "time_scale", "inventory.workers[0].time_scale"),
        ("-Infinity", "hbm_bandwidth_gbs", "inventory.workers[0].hbm_bandwidth_gbs"),
        ("NaN", "prompt_tokens", "batch.items[0].prompt_tokens"),
        ("NaN", "feature", "batch.items[0].features.difficulty"),
    ],
)
def test_nan_and_infinity_are_refused_naming_the_field(
    literal: str, where: str, field: str, client: TestClient, redis_client: redis.Redis
) -> None:
    body = batch_body()
    marker = 12345.678
    targets = {
        "quantile": body,
        "time_scale": body["inventory"]["workers"][0],
        "hbm_bandwidth_gbs": body["inventory"]["workers"][0],
        "prompt_tokens": body["batch"]["items"][0],
    }
    if where == "feature":
        body["batch"]["items"][0]["features"] = {"difficulty": marker}
    else:
        targets[where][where] = marker
    raw = json.dumps(body).replace(str(marker), literal)
    before = redis_snapshot(redis_client)
    response = client.post("/schedule", content=raw, headers={"Content-Type": "application/json"})
    assert response.status_code == 422, response.text
    assert response.json()["field"] == field
    assert redis_snapshot(redis_client) == before


@pytest.mark.parametrize(
    ("where", "field"),
    [
        ("prompt", "batch.items[0].prompt"),
        ("chat", "batch.items[1].messages[0].content"),
        ("extra", "sampling.extra"),
    ],
)
def test_a_lone_surrogate_in_text_for_the_engines_is_a_422_and_changes_nothing(
    where: str, field: str, client: TestClient, redis_client: redis.Redis
) -> None:
    # JSON may spell a lone surrogate ("\\ud800"); UTF-8 cannot, so no engine request could carry it
    body = batch_body()
    text = "x\ud800y"
    if where == "prompt":
        body["batch"]["items"][0]["prompt"] = text
    elif where == "chat":
        del body["batch"]["items"][1]["prompt"]
        body["batch"]["items"][1]["messages"] = [{"role": "user", "content": text}]
    else:
        body["sampling"] = {"extra": {"logit_bias": {"a": [text]}}}
    before = redis_snapshot(redis_client)
    response = client.post("/schedule", content=json.dumps(body), headers=JSON_HEADERS)
    assert response.status_code == 422, response.text
    assert (response.json()["field"], "surrogate" in response.json()["detail"]) == (field, True)
    assert redis_snapshot(redis_client) == before


def test_a_422_carries_the_value_at_fault(client: TestClient) -> None:
    body = batch_body()
    body["batch"]["items"][2]["max_new_tokens"] = -5
    problem = client.post("/schedule", json=body).json()
    assert (problem["field"], problem["value"]) == ("batch.items[2].max_new_tokens", -5)


def test_a_feature_text_too_long_is_named_by_the_text_rule_not_the_number_rule(client: TestClient) -> None:
    body = batch_body()
    body["batch"]["items"][0]["features"] = {"topic": "x" * 257}
    problem = client.post("/schedule", json=body).json()
    assert problem["field"] == "batch.items[0].features.topic"
    assert "at most 256 characters" in problem["detail"], problem  # a text feature, not 'a valid number'
    assert [err["field"] for err in problem["errors"]] == ["batch.items[0].features.topic"]


@pytest.mark.parametrize("seed", [2**31, 2**63 - 1])
def test_any_int64_seed_plans_with_cpsat(seed: int, client: TestClient) -> None:
    response = client.post("/schedule", json=batch_body(policy="cpsat", seed=seed, publish=False))
    assert response.status_code == 200, response.text


@pytest.mark.parametrize(
    ("path", "field"),
    [
        ("/schedule/%7Dx", "schedule_id"),  # a brace would move a Cluster hash tag: a 500 there
        ("/schedule/" + "x" * 257, "schedule_id"),  # one past NAME_MAX_LENGTH
        ("/schedule/s/results?after=99999999999999999999-0", "after"),  # past 2^64: Redis refuses it
        ("/schedule/s/results?after=%EF%BC%91-0", "after"),  # a fullwidth digit: Python's \d, not Redis'
    ],
)
def test_a_bad_path_or_query_is_a_422_naming_it(path: str, field: str, client: TestClient) -> None:
    response = client.get(path)
    assert response.status_code == 422, response.text
    assert response.json()["field"] == field


def test_a_stream_id_past_2_64_is_refused_in_the_words_it_always_was(client: TestClient) -> None:
    problem = client.get("/schedule/s/results?after=0-18446744073709551616").json()
    words = "is past the largest stream id (each part < 2^64)"  # the route's own check's, before the type's
    assert problem["detail"] == f"after='0-18446744073709551616': {words}"
