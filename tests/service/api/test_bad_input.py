"""Bad input: 422 (or 413) problem+json naming the field, and Redis left exactly as it was."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Callable
from typing import Any

import pytest
import redis
from fastapi.testclient import TestClient

from service import pipeline
from service.settings import Settings
from tests.service.api.conftest import AppFactory, LiveServer, batch_body, with_settings

Body = dict[str, Any]
_JSON = {"Content-Type": "application/json"}


def _set(path: str, value: Any) -> Callable[[Body], None]:
    """Set ``value`` at a dotted path like ``batch.items.1.prompt_id`` of the body."""

    def edit(body: Body) -> None:
        *parents, last = path.split(".")
        node: Any = body
        for part in parents:
            node = node[int(part)] if part.isdigit() else node[part]
        if last.isdigit():
            node[int(last)] = value
        else:
            node[last] = value

    return edit


def _drain_all(body: Body) -> None:
    for spec in body["inventory"]["workers"]:
        spec["drain"] = True


def _fresh_names(body: Body) -> None:
    """40 feature names of its own on every item: within each item's limit, past the request's."""
    for k, item in enumerate(body["batch"]["items"]):
        item["features"] = {f"i{k}_f{j}": 1.0 for j in range(40)}


CASES: dict[str, tuple[Callable[[Body], None], str]] = {
    "zero prompt tokens": (_set("batch.items.0.prompt_tokens", 0), "batch.items[0].prompt_tokens"),
    "negative max_new_tokens": (_set("batch.items.2.max_new_tokens", -5), "batch.items[2].max_new_tokens"),
    "zero samples": (_set("batch.items.1.n", 0), "batch.items[1].n"),
    "tokens as a string": (_set("batch.items.0.prompt_tokens", "100"), "batch.items[0].prompt_tokens"),
    "duplicate prompt_id": (_set("batch.items.3.prompt_id", "p1"), "batch.items[3].prompt_id"),
    "unknown device": (_set("inventory.workers.1.device", "TPUv9"), "inventory.workers[1].device"),
    "duplicate worker_id": (_set("inventory.workers.1.worker_id", "w0"), "inventory.workers[1].worker_id"),
    "unknown field": (_set("batch.items.0.colour", "red"), "batch.items[0].colour"),
    "unknown top-level field": (_set("priority", 1), "priority"),
    "unknown policy": (_set("policy", "fastest"), "policy"),
    "unknown model": (_set("model", "999b"), "model"),
    "an empty policy": (_set("policy", ""), "policy"),  # not the default policy, silently
    "an empty model": (_set("model", ""), "model"),
    "quantile out of range": (_set("quantile", 1.5), "quantile"),
    "pinned to a stranger": (_set("batch.items.0.pinned_worker", "w9"), "batch.items[0].pinned_worker"),
    "empty inventory": (_set("inventory.workers", []), "inventory.workers"),
    "negative temperature": (_set("sampling", {"temperature": -0.5}), "sampling.temperature"),
    "top_p above one": (_set("batch.items.2.sampling", {"top_p": 1.5}), "batch.items[2].sampling.top_p"),
    "an unknown sampling field": (_set("sampling", {"tempreature": 1.0}), "sampling.tempreature"),
    "max_tokens through extra": (_set("sampling", {"extra": {"max_tokens": 10}}), "sampling.extra"),
    "a feature text too long": (
        _set("batch.items.0.features", {"topic": "x" * 257}),
        "batch.items[0].features.topic",
    ),
    "n through extra": (
        _set("batch.items.0.sampling", {"extra": {"n": 16}}),
        "batch.items[0].sampling.extra",
    ),
    "a typed field through extra": (_set("sampling", {"extra": {"seed": 3}}), "sampling.extra"),
    "a top_k past any vocabulary": (_set("sampling", {"top_k": 10**30}), "sampling.top_k"),
    "a stop token past any vocabulary": (
        _set("batch.items.1.sampling", {"stop_token_ids": [2, 2**31]}),
        "batch.items[1].sampling.stop_token_ids[1]",
    ),
    "an integer past int64 through extra": (
        _set("sampling", {"extra": {"logit_bias": {"50256": -(10**30)}}}),
        "sampling.extra",
    ),
    "cap beyond every KV cache": (
        _set("batch.items.1.max_new_tokens", 50_000_000),
        "batch.items[1].max_new_tokens",
    ),
    "a prompt length past any integer column": (
        _set("batch.items.0.prompt_tokens", 10**30),
        "batch.items[0].prompt_tokens",
    ),
    "a cap past any integer column": (
        _set("batch.items.1.max_new_tokens", 10**30),
        "batch.items[1].max_new_tokens",
    ),
    "a seed past int64": (_set("seed", 2**63), "seed"),
    "a step past the bound": (_set("step", 2**31), "step"),
    "bandwidth past any device": (
        _set("inventory.workers.0.hbm_bandwidth_gbs", 1e308),
        "inventory.workers[0].hbm_bandwidth_gbs",
    ),
    "throughput below any device": (
        _set("inventory.workers.0.peak_tflops", 1e-300),
        "inventory.workers[0].peak_tflops",
    ),
    "memory past any device": (
        _set("inventory.workers.1.memory_gib", 1e308),
        "inventory.workers[1].memory_gib",
    ),
    "a memory override too small to hold the model": (  # the override is at fault, not the H100
        _set("inventory.workers.0.memory_gib", 1.0),
        "inventory.workers[0].memory_gib",
    ),
    "a vanishing time scale": (
        _set("inventory.workers.0.time_scale", 1e-300),
        "inventory.workers[0].time_scale",
    ),
    "a measured speed a unit off": (
        _set("inventory.workers.0.decode_tokens_per_s", 1e-3),
        "inventory.workers[0].decode_tokens_per_s",
    ),
    "both a prompt and messages": (
        _set("batch.items.0.messages", [{"role": "user", "content": "hi"}]),
        "batch.items[0]",
    ),
    "no chat turns": (_set("batch.items.1.messages", []), "batch.items[1].messages"),
    "too many features": (
        _set("batch.items.0.features", {f"f{i}": 1.0 for i in range(65)}),
        "batch.items[0].features",
    ),
    "more feature names across the items than a request may bring": (_fresh_names, "batch.items"),
    "every worker drained": (_drain_all, "inventory.workers"),
    "a long feature text": (
        _set("batch.items.0.features", {"topic": "x" * 257}),
        "batch.items[0].features.topic",
    ),
}


def _snapshot(client: redis.Redis) -> dict[str, tuple[bytes | None, int]]:
    """Every key with its content (``DUMP``) and its absolute expiry (``PEXPIRETIME``; -1: none): a
    rejected request that rewrote a value or refreshed a TTL differs, not only one that added a key."""
    return {str(key): (client.dump(key), client.pexpiretime(key)) for key in client.scan_iter("*")}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_bad_field_is_a_422_problem_naming_it_and_changes_nothing(
    case: str, client: TestClient, redis_client: redis.Redis
) -> None:
    client.post("/schedule", json=batch_body())  # some state to keep intact
    before = _snapshot(redis_client)
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
    assert _snapshot(redis_client) == before


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
    before = _snapshot(redis_client)
    response = client.post("/schedule", content=raw, headers={"Content-Type": "application/json"})
    assert response.status_code == 422, response.text
    assert response.json()["field"] == field
    assert _snapshot(redis_client) == before


def test_malformed_json_is_a_422_problem_naming_the_body_and_where_it_broke(client: TestClient) -> None:
    response = client.post("/schedule", content=b"{not json", headers={"Content-Type": "application/json"})
    assert response.status_code == 422
    assert response.headers["content-type"] == "application/problem+json"
    assert response.json()["field"] == "body"
    assert "at character 1" in response.json()["detail"]


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
    before = _snapshot(redis_client)
    response = client.post("/schedule", content=json.dumps(body), headers=_JSON)
    assert response.status_code == 422, response.text
    assert (response.json()["field"], "surrogate" in response.json()["detail"]) == (field, True)
    assert _snapshot(redis_client) == before


def test_a_422_echoing_a_lone_surrogate_is_still_a_readable_problem(client: TestClient) -> None:
    report = {"step": 1, "prompt_id": "\ud800", "sample_idx": 0, "worker_id": "w", "prompt_tokens": 1}
    report |= {"output_tokens": 1, "finish_reason": "stop"}
    raw = json.dumps({"actuals": [report]})
    response = client.post("/actuals", content=raw, headers=_JSON)
    assert response.status_code == 422
    assert response.json()["field"] == "actuals[0].prompt_id"


def test_json_nested_past_the_parser_s_depth_is_a_400_naming_the_body(client: TestClient) -> None:
    raw = '{"batch": ' + "[" * 5000 + "]" * 5000 + "}"
    response = client.post("/schedule", content=raw, headers=_JSON)
    assert response.status_code == 400
    assert (response.json()["field"], response.json()["title"]) == ("body", "Bad Request")


@pytest.mark.parametrize("content_type", ["text/json", "application/jsonx"])
def test_a_json_lookalike_content_type_is_told_to_send_json(content_type: str, client: TestClient) -> None:
    response = client.post("/schedule", content=b"{}", headers={"Content-Type": content_type})
    assert "Content-Type: application/json" in response.json()["detail"]


def test_a_body_sent_as_another_content_type_is_told_to_send_json(client: TestClient) -> None:
    response = client.post("/schedule", content=b"x=1", headers={"Content-Type": "text/plain"})
    assert response.status_code == 422
    assert response.json()["field"] == "body"
    assert "Content-Type: application/json" in response.json()["detail"]


def test_a_422_carries_the_value_at_fault(client: TestClient) -> None:
    body = batch_body()
    body["batch"]["items"][2]["max_new_tokens"] = -5
    problem = client.post("/schedule", json=body).json()
    assert (problem["field"], problem["value"]) == ("batch.items[2].max_new_tokens", -5)


@pytest.mark.parametrize("seed", [2**31, 2**63 - 1])
def test_any_int64_seed_plans_with_cpsat(seed: int, client: TestClient) -> None:
    response = client.post("/schedule", json=batch_body(policy="cpsat", seed=seed, publish=False))
    assert response.status_code == 200, response.text


def test_more_trajectories_than_the_limit_is_a_413_and_changes_nothing(
    make_client: AppFactory, redis_client: redis.Redis
) -> None:
    client = make_client(max_trajectories=31)
    before = _snapshot(redis_client)
    response = client.post("/schedule", json=batch_body(prompts=8, n=4))
    assert response.status_code == 413
    assert response.json()["field"] == "batch.items"
    assert "32" in response.json()["detail"]
    assert _snapshot(redis_client) == before


def test_a_body_over_the_limit_is_a_413_problem(make_client: AppFactory, redis_client: redis.Redis) -> None:
    client = make_client(max_body_bytes=2_000)
    before = _snapshot(redis_client)
    response = client.post("/schedule", json=batch_body(prompts=64))
    assert response.status_code == 413
    assert response.headers["content-type"] == "application/problem+json"
    assert "ROLLOUT_MAX_BODY_BYTES" in response.json()["detail"]  # says which setting to change
    assert _snapshot(redis_client) == before
    assert 'route="/schedule",status="413"' in client.get("/metrics").text  # named, though unrouted


def test_a_declared_huge_body_is_refused_before_it_is_sent(live_settings: Settings) -> None:
    settings = with_settings(live_settings, max_body_bytes=10_000)
    with LiveServer(settings) as server, socket.create_connection(("127.0.0.1", server.port), 5) as sock:
        sock.sendall(
            b"POST /schedule HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b'Content-Length: 1000000000\r\n\r\n{"batch":'
        )
        sock.settimeout(5)
        reply = sock.recv(65536).decode()  # answered although 999,999,991 bytes never came
    assert reply.startswith("HTTP/1.1 413")
    assert "application/problem+json" in reply


def test_a_chunked_body_is_cut_off_at_the_limit(live_settings: Settings) -> None:
    settings = with_settings(live_settings, max_body_bytes=10_000)
    with LiveServer(settings) as server, socket.create_connection(("127.0.0.1", server.port), 5) as sock:
        sock.sendall(
            b"POST /schedule HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n"
        )
        chunk = b"x" * 4096
        for _ in range(3):  # 12 KiB: over the limit; the stream is never terminated
            sock.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        sock.settimeout(5)
        reply = sock.recv(65536).decode()
    assert reply.startswith("HTTP/1.1 413")


def test_a_chunked_upload_without_a_token_is_refused_before_its_body_is_read(live_settings: Settings) -> None:
    """Reading ahead to the limit before the token check let 60 stalled uploads hold 2 GB."""
    settings = with_settings(live_settings, max_body_bytes=10_000_000, trainer_tokens="t0ken")
    with LiveServer(settings) as server, socket.create_connection(("127.0.0.1", server.port), 5) as sock:
        sock.sendall(
            b"POST /actuals HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n1000\r\n" + b"x" * 4096 + b"\r\n"
        )  # far below the limit, and the stream is never terminated
        sock.settimeout(5)
        reply = sock.recv(65536).decode()
    assert reply.startswith("HTTP/1.1 401")


def test_a_publish_that_loses_a_race_for_its_schedule_id_changes_nothing(
    client: TestClient, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = batch_body(schedule_id="race")
    assert client.post("/schedule", json=first).status_code == 200
    before = _snapshot(redis_client), redis_client.hgetall("rs:workers")
    # The loser of two concurrent requests passed the early check before the winner published.
    monkeypatch.setattr(pipeline, "refuse_republish", lambda body, schedule_id, ctx: None)
    second = batch_body(schedule_id="race")
    second["inventory"]["workers"][0]["device"] = "A100-80GB"
    response = client.post("/schedule", json=second)
    assert response.status_code == 409
    assert (response.json()["field"], response.json()["value"]) == ("schedule_id", "race")
    assert (_snapshot(redis_client), redis_client.hgetall("rs:workers")) == before


def test_of_two_identical_requests_racing_for_one_schedule_id_only_one_is_told_it_published(
    client: TestClient, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    body = batch_body(schedule_id="twins")
    assert client.post("/schedule", json=body).status_code == 200
    before = _snapshot(redis_client)
    monkeypatch.setattr(pipeline, "refuse_republish", lambda body, schedule_id, ctx: None)  # passed it first
    response = client.post("/schedule", json=body)
    assert response.status_code == 409
    assert response.json()["field"] == "schedule_id"
    after = _snapshot(redis_client)
    # Like every 409 for a published id, the loser announces the step again (so its 409 means the
    # step is out, even if the winner's announce was lost): only the inboxes' expiry may move, later.
    inboxes = {key for key in before if key.startswith("rs:inbox:")}
    assert inboxes
    assert {k: v for k, v in after.items() if k not in inboxes} == {
        k: v for k, v in before.items() if k not in inboxes
    }
    for key in inboxes:
        assert after[key][0] == before[key][0]
        assert after[key][1] >= before[key][1]


def _pinned_body() -> Body:
    """A valid body whose first prompt is pinned to worker ``w1``."""
    body = batch_body(schedule_id="kept")
    body["batch"]["items"][0]["pinned_worker"] = "w1"
    return body


@pytest.mark.parametrize(
    ("edit", "field"),
    [
        (_set("inventory.workers.0.device", "TPUv9"), "inventory.workers[0].device"),
        (_set("policy", "fastest"), "policy"),
        (_set("inventory.workers.1.worker_id", "w0"), "inventory.workers[1].worker_id"),
        (_set("inventory.workers.1.worker_id", "w7"), "batch.items[0].pinned_worker"),
        (_set("inventory.workers.1.drain", True), "batch.items[0].pinned_worker"),
        (_set("inventory.workers.1.kv_capacity_tokens", 1000), "batch.items[0].max_new_tokens"),
    ],
    ids=[
        "unknown device",
        "unknown policy",
        "duplicate worker_id",
        "a pin to a worker the inventory lacks",
        "a pin to a drained worker",
        "a cap the pinned worker's cache cannot hold",
    ],
)
def test_a_retry_under_a_published_id_with_a_bad_field_is_a_422_naming_it_and_announces_nothing(
    edit: Callable[[Body], None], field: str, client: TestClient, redis_client: redis.Redis
) -> None:
    assert client.post("/schedule", json=_pinned_body()).status_code == 200
    inboxes = sorted(redis_client.scan_iter("rs:inbox:*"))
    for key in inboxes:  # a retention clearly below the one an announce sets again
        redis_client.pexpire(key, 1_000_000)
    before = _snapshot(redis_client)
    retry = _pinned_body()  # the same work: only planning knobs differ
    edit(retry)
    response = client.post("/schedule", json=retry)
    assert response.status_code == 422, response.text
    assert response.json()["field"] == field
    assert _snapshot(redis_client) == before
    assert inboxes
    assert all(0 < redis_client.pttl(key) <= 1_000_000 for key in inboxes)


@pytest.mark.parametrize(
    ("path", "field"),
    [
        ("/schedule/%7Dx", "schedule_id"),  # a brace would move a Cluster hash tag: a 500 there
        ("/schedule/" + "x" * 201, "schedule_id"),
        ("/schedule/s/results?after=99999999999999999999-0", "after"),  # past 2^64: Redis refuses it
        ("/schedule/s/results?after=%EF%BC%91-0", "after"),  # a fullwidth digit: Python's \d, not Redis'
    ],
)
def test_a_bad_path_or_query_is_a_422_naming_it(path: str, field: str, client: TestClient) -> None:
    response = client.get(path)
    assert response.status_code == 422, response.text
    assert response.json()["field"] == field


def test_waiting_results_requests_have_threads_of_their_own(client: TestClient) -> None:
    """A flood of 30 s long-polls must not take every worker thread from /readyz and planning."""
    sid = client.post("/schedule", json=batch_body()).json()["schedule_id"]
    limiter = client.app.state.context.long_polls  # type: ignore[attr-defined]
    holders = [object() for _ in range(int(limiter.total_tokens))]
    for holder in holders:
        client.portal.call(limiter.acquire_on_behalf_of, holder)  # type: ignore[union-attr]
    try:
        assert client.get("/readyz").status_code == 200  # while every long-poll thread is taken
        answered: list[int] = []
        poll = threading.Thread(
            target=lambda: answered.append(client.get(f"/schedule/{sid}/results").status_code)
        )
        poll.start()
        poll.join(timeout=1.0)
        assert answered == []  # a results request queues for a long-poll thread
    finally:
        for holder in holders:
            client.portal.call(limiter.release_on_behalf_of, holder)  # type: ignore[union-attr]
    poll.join(timeout=5.0)
    assert answered == [200]


def test_a_feature_text_too_long_is_named_by_the_text_rule_not_the_number_rule(client: TestClient) -> None:
    body = batch_body()
    body["batch"]["items"][0]["features"] = {"topic": "x" * 257}
    problem = client.post("/schedule", json=body).json()
    assert problem["field"] == "batch.items[0].features.topic"
    assert "at most 256 characters" in problem["detail"], problem  # a text feature, not 'a valid number'
    assert [err["field"] for err in problem["errors"]] == ["batch.items[0].features.topic"]


@pytest.mark.parametrize(
    ("raw", "cause"),
    [
        ('{"step": ' + "9" * 5000 + "}", "4300 digits"),  # past Python's int-conversion limit
        ('{"batch": ' + "[" * 5000 + "]" * 5000 + "}", "recursion"),
        (b'{"step": "\xff"}', "utf-8"),
    ],
)
def test_a_body_that_cannot_be_decoded_says_why(raw: str | bytes, cause: str, client: TestClient) -> None:
    response = client.post("/schedule", content=raw, headers=_JSON)
    assert response.status_code == 400
    assert cause in response.json()["detail"].lower(), response.json()  # not only 'error parsing the body'
