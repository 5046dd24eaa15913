"""POST /schedule end to end on a real Redis: planned, published, answered, retried (reading progress
and results back: ``test_schedule_results``)."""

from __future__ import annotations

import gc
from typing import Any

import pytest
import redis
from fastapi.testclient import TestClient
from pydantic import ValidationError

from service.api.schemas import MAX_COUNT, ScheduleRequest, ScheduleResponse
from service.delivery import Delivery
from service.delivery import keys as keyspace
from service.delivery.errors import UnknownScheduleError
from service.pipeline import publish, stages
from service.pipeline.stages import predict, validate
from service.settings import Settings
from tests.service.api_helpers import AppFactory, actual_history, batch_body


def test_a_batch_is_planned_published_and_answered_with_quality_and_baseline(
    client: TestClient, redis_client: redis.Redis
) -> None:
    response = client.post("/schedule", json=batch_body(prompts=8, n=4, workers=3))
    assert response.status_code == 200
    ScheduleResponse.model_validate_json(response.content)  # the documented schema, field for field
    body = response.json()
    planned = [(i["prompt_id"], i["sample_idx"]) for q in body["assignments"].values() for i in q]
    assert sorted(planned) == sorted((f"p{p}", s) for p in range(8) for s in range(4))
    assert set(body["assignments"]) == {"w0", "w1", "w2"}
    assert body["published"] is True
    assert body["predicted_makespan_s"] >= body["lower_bound_s"] > 0
    assert body["round_robin_makespan_s"] >= body["lower_bound_s"]
    assert body["speedup_vs_round_robin"] == body["round_robin_makespan_s"] / body["predicted_makespan_s"]
    timings = body["timings"]
    assert timings["total_ms"] >= timings["plan_ms"] + timings["publish_ms"]
    assert body["model_version"] == "fallback"
    assert sum(body["prediction_sources"].values()) == 32
    progress = client.get(f"/schedule/{body['schedule_id']}").json()
    assert progress["total"] == 32
    assert progress["queued"] == 32
    assert progress["done"] == progress["running"] == progress["failed"] == 0
    assert sum(w["queued"] for w in progress["workers"].values()) == 32


def test_each_worker_queue_in_redis_is_the_planned_order_with_the_prompt_payload(
    client: TestClient, redis_client: redis.Redis
) -> None:
    body = client.post("/schedule", json=batch_body(prompts=4, n=2, workers=2)).json()
    delivery = Delivery(redis_client)
    for worker, planned in body["assignments"].items():
        leases = delivery.claim(body["schedule_id"], worker, max_items=100)
        assert [(le.item.prompt_id, le.item.sample_idx) for le in leases] == [
            (i["prompt_id"], i["sample_idx"]) for i in planned
        ]
        for lease in leases:
            assert lease.item.payload == {"prompt": f"question {lease.item.prompt_id[1:]}"}


def test_sampling_fields_reach_every_sample_with_a_prompts_own_over_the_requests(
    client: TestClient, redis_client: redis.Redis
) -> None:
    body = batch_body(prompts=2, n=2, workers=1)
    extra = {"ignore_eos": False, "response_format": {"type": "json_object"}}
    body["sampling"] = {"temperature": 1.0, "top_p": 1.0, "stop": ["</answer>"], "extra": extra}
    body["batch"]["items"][1]["sampling"] = {"temperature": 0.6, "seed": 7}
    response = client.post("/schedule", json=body).json()
    leases = Delivery(redis_client).claim(response["schedule_id"], "w0", max_items=10)
    params = {lease.item.prompt_id: lease.item.payload["params"] for lease in leases}
    shared = {"top_p": 1.0, "stop": ["</answer>"], **extra}
    assert params["p0"] == {"temperature": 1.0, **shared}
    assert params["p1"] == {"temperature": 0.6, **shared, "seed": 7}


def test_sampling_numbers_at_their_bounds_are_sent_as_given(
    client: TestClient, redis_client: redis.Redis
) -> None:
    body = batch_body(prompts=1, n=1, workers=1)
    extra = {"logit_bias": {"7": 2**63 - 1, "8": -(2**63)}}
    body["sampling"] = {"top_k": MAX_COUNT, "stop_token_ids": [MAX_COUNT], "extra": extra}
    response = client.post("/schedule", json=body)
    assert response.status_code == 200, response.text
    (lease,) = Delivery(redis_client).claim(response.json()["schedule_id"], "w0", max_items=10)
    assert lease.item.payload["params"] == {"top_k": MAX_COUNT, "stop_token_ids": [MAX_COUNT], **extra}


def test_a_request_without_sampling_sends_none_so_the_engine_defaults_apply(
    client: TestClient, redis_client: redis.Redis
) -> None:
    response = client.post("/schedule", json=batch_body(prompts=2, n=1, workers=1)).json()
    for lease in Delivery(redis_client).claim(response["schedule_id"], "w0", max_items=10):
        assert "params" not in lease.item.payload


def test_publish_false_plans_without_writing_anything(client: TestClient, redis_client: redis.Redis) -> None:
    before = redis_client.dbsize()
    response = client.post("/schedule", json=batch_body(publish=False))
    assert response.status_code == 200
    assert response.json()["published"] is False
    assert redis_client.dbsize() == before
    assert client.get(f"/schedule/{response.json()['schedule_id']}").status_code == 404


def test_the_configured_default_policy_and_quantile_apply_when_the_request_names_none(
    make_client: AppFactory,
) -> None:
    client = make_client(default_policy="least_loaded", default_quantile=0.9)
    body = batch_body()
    del body["policy"]
    answer = client.post("/schedule", json=body).json()
    assert answer["policy"] == "least_loaded"
    assert answer["quantile"] == 0.9
    assert answer["dispatch_order"]  # a shared-queue policy publishes one FIFO


def test_round_robin_requested_is_its_own_baseline(client: TestClient) -> None:
    answer = client.post("/schedule", json=batch_body(policy="round_robin")).json()
    assert answer["round_robin_makespan_s"] == answer["predicted_makespan_s"]
    assert answer["speedup_vs_round_robin"] == 1.0


def test_a_drained_worker_receives_nothing(client: TestClient) -> None:
    body = batch_body(workers=3)
    body["inventory"]["workers"][1]["drain"] = True
    answer = client.post("/schedule", json=body).json()
    assert answer["assignments"]["w1"] == []


def test_a_measured_decode_speed_becomes_the_worker_time_scale(client: TestClient) -> None:
    from scheduler.costmodel import worker_cost
    from scheduler.devices import device_profile, model_preset
    from scheduler.types import Worker
    from service.api.convert import REFERENCE_CONTEXT_TOKENS

    modelled = worker_cost(Worker("w0", device_profile("H100"), max_num_seqs=64), model_preset("7b"))
    tps = modelled.single_sequence_tps(REFERENCE_CONTEXT_TOKENS)
    body = batch_body(workers=2)
    body["inventory"]["workers"][0]["decode_tokens_per_s"] = tps / 1.5  # 1.5x slower than modelled
    answer = client.post("/schedule", json=body).json()
    assert abs(answer["time_scales"]["w0"] - 1.5) < 1e-9
    assert answer["time_scale_sources"]["w0"] == "measured"


def test_lease_settings_are_published_with_the_schedule(
    make_client: AppFactory, redis_client: redis.Redis
) -> None:
    client = make_client(lease_ttl_ms=4_000, max_attempts=5, retention_s=600)
    sid = client.post("/schedule", json=batch_body()).json()["schedule_id"]
    info = Delivery(redis_client).info(sid)
    assert (info.lease_ttl_ms, info.max_attempts) == (4_000, 5)
    assert 0 < redis_client.ttl(f"rs:{{{sid}}}:meta") <= 600


def _keys_but_the_reapers(redis_client: redis.Redis) -> list[str]:
    """Every key, sorted, but the reapers' lapse index (``keys.lapse_index``): the app's reaper writes
    it on its own clock (its first visit to a new schedule ~0.5 s after the publish; the entry dropped
    when due and written back), so a snapshot of it before a retry and one after differed wherever a
    pass fell between them (both tests that compare, at load ~20: flaky62), a request's doing in none.
    Nor the announcing index (``keys.announcing_index``): a reaper drops an announce's entry 2 s on,
    and the key with its last entry, whenever a pass falls."""
    background = {keyspace.lapse_index(), keyspace.announcing_index()}
    return sorted(str(k) for k in redis_client.keys("*") if str(k) not in background)


def _plan_of(answer: dict[str, Any]) -> dict[str, Any]:
    """An answer without what belongs to the request that got it (its timings, the replay mark)."""
    return {k: v for k, v in answer.items() if k not in ("timings", "replayed")}


def test_a_retry_with_the_same_schedule_id_gets_the_first_answer_and_is_not_published_twice(
    client: TestClient, redis_client: redis.Redis
) -> None:
    """An idempotency key's promise: the retry of a request whose reply was lost gets that reply."""
    first = client.post("/schedule", json=batch_body(schedule_id="step-7-try"))
    assert first.status_code == 200
    assert (first.json()["schedule_id"], first.json()["replayed"]) == ("step-7-try", False)
    assert "idempotent-replayed" not in first.headers
    before = _keys_but_the_reapers(redis_client)
    replanned = batch_body(schedule_id="step-7-try", policy="round_robin", seed=9)  # same work, other knobs
    for body in (batch_body(schedule_id="step-7-try"), replanned):
        retry = client.post("/schedule", json=body)
        assert retry.status_code == 200
        assert retry.headers["idempotent-replayed"] == "true"
        assert retry.json()["replayed"] is True
        assert _plan_of(retry.json()) == _plan_of(first.json())  # the first plan, not a new one
        ScheduleResponse.model_validate_json(retry.content)
        assert retry.json()["timings"]["plan_ms"] == 0  # this request's: it planned nothing
    assert _keys_but_the_reapers(redis_client) == before
    assert client.get("/schedule/step-7-try").json()["total"] == 32


def test_the_first_answer_is_stored_with_the_schedule_and_expires_with_it(
    make_client: AppFactory, redis_client: redis.Redis
) -> None:
    client = make_client(retention_s=600)
    assert client.post("/schedule", json=batch_body(schedule_id="step-kept")).status_code == 200
    meta, answer = "rs:{step-kept}:meta", "rs:{step-kept}:answer"
    assert redis_client.hget(meta, "request") is not None
    assert redis_client.pexpiretime(answer) == redis_client.pexpiretime(meta) > 0
    assert client.post("/schedule", json=batch_body()).status_code == 200  # the service chose the id:
    assert not [k for k in redis_client.scan_iter("rs:*:answer") if k != answer]  # nobody can retry it


def test_a_retry_after_an_announce_lost_to_a_redis_failure_announces_the_stored_step(
    client: TestClient, redis_client: redis.Redis
) -> None:
    """publish stores atomically, then announces; a 503 between the two must not strand the step."""
    assert client.post("/schedule", json=batch_body(schedule_id="step-8")).status_code == 200
    indexes = ["rs:active", "rs:inbox:{w0}", "rs:inbox:{w1}"]
    for index in indexes:  # the state a timeout after the publish script leaves
        redis_client.zrem(index, "step-8")
    retry = client.post("/schedule", json=batch_body(schedule_id="step-8"))
    assert (retry.status_code, retry.json()["replayed"]) == (200, True)
    assert all(redis_client.zscore(index, "step-8") is not None for index in indexes)
    assert Delivery(redis_client).claim("step-8", "w0", max_items=1)


def test_a_bad_request_is_refused_at_once_even_while_every_plan_slot_is_taken(
    make_client: AppFactory,
) -> None:
    client = make_client(max_concurrent_plans=1, plan_queue_timeout_s=0.2, max_trajectories=8)
    with client.app.state.context.plan_slots.hold():  # type: ignore[attr-defined]
        assert client.post("/schedule", json=batch_body(prompts=4, n=4)).status_code == 413
        unknown = batch_body(policy="fastest")
        assert (
            client.post(
                "/schedule", json={**unknown, "batch": batch_body(prompts=1, n=1)["batch"]}
            ).status_code
            == 422
        )


def test_plans_beyond_the_concurrency_limit_wait_then_get_503(make_client: AppFactory) -> None:
    client = make_client(max_concurrent_plans=1, plan_queue_timeout_s=0.2)
    slots = client.app.state.context.plan_slots  # type: ignore[attr-defined]
    with slots.hold():  # another request is planning
        busy = client.post("/schedule", json=batch_body())
    assert busy.status_code == 503
    assert "busy" in busy.json()["detail"]
    assert busy.headers["retry-after"] == "1"
    answer = client.post("/schedule", json=batch_body()).json()
    assert answer["timings"]["queue_ms"] < 200


def test_every_planned_trajectory_carries_the_predictors_p50_and_p90(client: TestClient) -> None:
    """cpsat's robust choice (scheduler.policies.robust) reads them; without them the service would
    never make the choice the replay measures."""
    ctx = client.app.state.context  # type: ignore[attr-defined]
    body = ScheduleRequest.model_validate(batch_body(prompts=3, n=2, policy="cpsat"))
    trajectories, _ = predict(body, validate(body, ctx), ctx)
    assert len(trajectories) == 6
    for t in trajectories:
        assert set(t.quantiles) == {0.5, 0.9}
        assert 1 <= t.quantiles[0.5] <= t.quantiles[0.9] <= t.max_new_tokens
        assert t.predicted_tokens == t.quantiles[0.5]  # the default planning quantile is the median


def test_a_key_prefix_keeps_every_key_of_the_deployment_in_its_own_namespace(
    make_client: AppFactory, redis_client: redis.Redis
) -> None:
    client = make_client(key_prefix="team-a")
    sid = client.post("/schedule", json=batch_body(prompts=4, n=2, workers=2)).json()["schedule_id"]
    assert client.post("/actuals", json={"actuals": actual_history(steps=1)}).status_code == 200
    assert redis_client.keys("rs:*") == []
    assert redis_client.exists("team-a:actuals", f"team-a:{{{sid}}}:meta") == 2
    assert Delivery(redis_client, "team-a").claim(sid, "w0", max_items=100)  # a sidecar with --prefix team-a
    with pytest.raises(UnknownScheduleError):  # ... and one left on the default prefix finds nothing
        Delivery(redis_client).info(sid)


def test_a_key_prefix_that_would_break_hash_tags_or_scans_is_refused_at_start() -> None:
    for prefix in ("", "a{b}", "rs*", "two words"):
        with pytest.raises(ValidationError, match=r"key_prefix\s+Value error, must be 1-64 of"):
            Settings(key_prefix=prefix)


def test_a_schedule_id_sent_again_with_other_work_is_refused_not_followed(
    client: TestClient, redis_client: redis.Redis
) -> None:
    """A restarted run that kept its RUN_ID must not silently follow the old run's step: a 409 would
    tell it to wait for results of other prompts, caps or sampling than it asked for."""
    assert client.post("/schedule", json=batch_body(schedule_id="run-step-3")).status_code == 200
    before = _keys_but_the_reapers(redis_client)
    raised_cap = batch_body(schedule_id="run-step-3")
    raised_cap["batch"]["items"][0]["max_new_tokens"] = 4096
    other_prompts = batch_body(prompts=9, schedule_id="run-step-3")
    other_sampling = batch_body(schedule_id="run-step-3", sampling={"temperature": 0.6})
    for changed in (raised_cap, other_prompts, other_sampling, batch_body(schedule_id="run-step-3", step=4)):
        refused = client.post("/schedule", json=changed)
        assert refused.status_code == 422
        assert refused.json()["field"] == "schedule_id"
        assert "different batch" in refused.json()["detail"]
    assert _keys_but_the_reapers(redis_client) == before
    replanned = batch_body(schedule_id="run-step-3", policy="cpsat", seed=5)  # same work, planned anew
    assert client.post("/schedule", json=replanned).json()["replayed"] is True


def test_the_cycle_collector_is_held_while_a_batch_is_predicted_and_published_and_resumes_after(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    enabled_in: dict[str, bool] = {}
    real_predict, real_publish = stages.predict, publish.publish

    def spy_predict(*args: Any) -> Any:
        enabled_in["predict"] = gc.isenabled()
        return real_predict(*args)

    def spy_publish(*args: Any) -> None:
        enabled_in["publish"] = gc.isenabled()
        real_publish(*args)

    monkeypatch.setattr(stages, "predict", spy_predict)
    monkeypatch.setattr(publish, "publish", spy_publish)
    assert client.post("/schedule", json=batch_body()).status_code == 200
    assert enabled_in == {"predict": False, "publish": False}
    assert gc.isenabled()
