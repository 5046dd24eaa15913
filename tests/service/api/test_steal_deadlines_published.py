"""POST /schedule publishes each queued item's steal deadline (docs/delivery.md, "Stealing"): the
plan played at predicted lengths gives every item its planned start and end on its worker."""

from __future__ import annotations

import redis
from fastapi.testclient import TestClient

from service.delivery import Delivery
from service.delivery.keys import schedule_keys
from tests.service.api_helpers import batch_body


def test_every_published_item_carries_its_planned_start_and_end_on_its_worker(
    client: TestClient, redis_client: redis.Redis
) -> None:
    body = client.post("/schedule", json=batch_body(prompts=4, n=4, workers=2)).json()
    sid = body["schedule_id"]
    due = {_text(k): v for k, v in redis_client.hgetall(schedule_keys(sid).due).items()}
    assert len(due) == 16  # one per item
    published = int(redis_client.hget(schedule_keys(sid).meta, "published_ms") or 0)
    delivery = Delivery(redis_client)
    for worker in body["assignments"]:
        items = [lease.item for lease in delivery.claim(sid, worker, max_items=100)]
        starts = [it.planned_start_ms or 0 for it in items]
        assert all(it.planned_start_ms is not None and it.deadline_ms is not None for it in items)
        assert starts == sorted(starts)  # the queue's order is the order its items start in
        for it, start in zip(items, starts, strict=True):
            end = it.deadline_ms or 0
            assert 0 <= start < end <= 1000 * body["predicted_makespan_s"] + 1  # within the plan
            assert _text(due[it.key]) == f"{published + start}|{published + end}"  # lease clock


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def test_the_published_deadlines_are_played_by_the_rules_of_the_engine_the_request_names(
    client: TestClient, redis_client: redis.Redis
) -> None:
    # two prompts that fill 99.6% of the worker's cache: vLLM V1 admits the second beside the first,
    # V0's block manager keeps 1% free, so there it starts when the first ends
    items = [
        {"prompt_id": f"p{i}", "prompt_tokens": tokens, "n": 1, "max_new_tokens": 16, "prompt": f"q{i}"}
        for i, tokens in enumerate((5_000, 4_960))
    ]
    worker = {"worker_id": "w0", "device": "H100", "max_num_seqs": 8, "kv_capacity_tokens": 10_000}
    body = {"batch": {"items": items}, "inventory": {"workers": [worker]}, "policy": "lpt"}
    delivery = Delivery(redis_client)
    starts = {}
    for engine in ("vllm-v1", "vllm-v0"):
        sid = client.post("/schedule", json=body | {"engine": engine}).json()["schedule_id"]
        claimed = [lease.item for lease in delivery.claim(sid, "w0", max_items=10)]
        starts[engine] = sorted(it.planned_start_ms or 0 for it in claimed)
    assert starts["vllm-v1"] == [0, 0]
    assert starts["vllm-v0"][0] == 0 < starts["vllm-v0"][1]
