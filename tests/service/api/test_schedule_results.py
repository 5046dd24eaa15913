"""GET /schedule/{id} progress and GET /schedule/{id}/results on a real Redis: what a trainer reads back
of a published step, whatever a worker stored (``test_schedule`` covers POST /schedule itself)."""

from __future__ import annotations

from typing import Any

import redis
from fastapi.testclient import TestClient

from service.delivery import Delivery, TrajectoryResult
from tests.service.api_helpers import batch_body
from tests.service.finished import RESULT, finished_with


def test_results_completed_by_workers_are_read_back_in_pages(
    client: TestClient, redis_client: redis.Redis
) -> None:
    body = client.post("/schedule", json=batch_body(prompts=2, n=2, workers=1)).json()
    sid = body["schedule_id"]
    delivery = Delivery(redis_client)
    leases = delivery.claim(sid, "w0", max_items=10)
    for lease in leases:
        delivery.complete(lease, RESULT)
    first = client.get(f"/schedule/{sid}/results", params={"count": 3}).json()
    rest = client.get(f"/schedule/{sid}/results", params={"after": first["next"]}).json()
    keys = [r["key"] for r in first["results"] + rest["results"]]
    assert sorted(keys) == sorted(le.key for le in leases)
    assert len(first["results"]) == 3
    assert client.get(f"/schedule/{sid}").json()["done"] == 4


def test_each_result_names_its_prompt_and_sample_so_a_trainer_can_regroup_them(
    client: TestClient, redis_client: redis.Redis
) -> None:
    sid = client.post("/schedule", json=batch_body(prompts=2, n=2, workers=1)).json()["schedule_id"]
    delivery = Delivery(redis_client)
    for lease in delivery.claim(sid, "w0", max_items=10):
        delivery.complete(lease, RESULT)
    results = client.get(f"/schedule/{sid}/results").json()["results"]
    assert all(r["key"] == f"{r['prompt_id']}#{r['sample_idx']}" for r in results)
    assert sorted((r["prompt_id"], r["sample_idx"]) for r in results) == [
        ("p0", 0),
        ("p0", 1),
        ("p1", 0),
        ("p1", 1),
    ]


def test_progress_says_why_each_dead_letter_died(client: TestClient, redis_client: redis.Redis) -> None:
    sid = client.post("/schedule", json=batch_body(prompts=1, n=1, workers=1)).json()["schedule_id"]
    delivery = Delivery(redis_client)
    for _ in range(3):  # the default max_attempts
        (lease,) = delivery.claim(sid, "w0", max_items=1)
        delivery.fail(lease, "prompt past max_model_len")
    progress = client.get(f"/schedule/{sid}").json()
    assert progress["dead_letter"] == ["p0#0"]
    assert progress["dead_letters"] == [
        {"key": "p0#0", "worker_id": "w0", "attempts": 3, "reason": "prompt past max_model_len"}
    ]


def test_an_unknown_schedule_is_a_404_problem(client: TestClient) -> None:
    response = client.get("/schedule/nope")
    assert response.status_code == 404
    assert response.headers["content-type"] == "application/problem+json"
    assert "nope" in response.json()["detail"]


def test_a_stored_result_nested_too_deep_to_serve_is_flagged_and_the_page_still_reads(
    client: TestClient, redis_client: redis.Redis
) -> None:
    sid = client.post("/schedule", json=batch_body(prompts=1, n=2, workers=1)).json()["schedule_id"]
    delivery = Delivery(redis_client)
    deep: dict[str, Any] = {}
    for _ in range(300):  # stored by a sidecar from before push-mode extras were bounded
        deep = {"a": deep}
    first, second = delivery.claim(sid, "w0", max_items=10)
    delivery.complete(first, finished_with(output="deep", extra={"tool_calls": deep}))
    delivery.complete(second, finished_with(output="fine", extra={"x": 1}))
    answer = client.get(f"/schedule/{sid}/results")
    assert answer.status_code == 200
    flagged, plain = answer.json()["results"]
    assert (flagged["output"], flagged["extra"], flagged["extra_withheld"]) == (
        "deep",
        {},
        "nested deeper than 32 levels",
    )
    assert (plain["output"], plain["extra"], plain["extra_withheld"]) == ("fine", {"x": 1}, None)


def test_a_stored_result_holding_a_lone_surrogate_is_served_with_a_replacement_character(
    client: TestClient, redis_client: redis.Redis
) -> None:
    """Text JSON's ``"\\ud800"`` put in a result (a pull worker's report, before the pull API refused
    it) is no UTF-8: rendering it failed every results page holding it (500), so the trainer could
    never collect its step. Each such character is served as U+FFFD; the rest of the result as stored."""
    sid = client.post("/schedule", json=batch_body(prompts=1, n=2, workers=1)).json()["schedule_id"]
    delivery = Delivery(redis_client)
    first, second = delivery.claim(sid, "w0", max_items=10)
    lone = "\ud800"
    stored = TrajectoryResult(
        output_tokens=7, finish_reason=lone, output=f"a{lone}b", extra={lone: [lone], "x": "ü"}
    )
    delivery.complete(first, stored)
    delivery.complete(second, finished_with(output="fine ü", extra={"x": 1}))
    answer = client.get(f"/schedule/{sid}/results")
    assert answer.status_code == 200
    mended, plain = answer.json()["results"]
    assert (mended["output"], mended["finish_reason"], mended["extra"]) == (
        "a\ufffdb",
        "\ufffd",
        {"\ufffd": ["\ufffd"], "x": "ü"},
    )
    assert (mended["output_tokens"], plain["output"], plain["extra"]) == (7, "fine ü", {"x": 1})


def _completed_with_extras(client: TestClient, redis_client: redis.Redis, n: int, extra_bytes: int) -> str:
    """A step of ``n`` results, each carrying ``extra_bytes`` of logprobs-like ``extra``; its id."""
    sid: str = client.post("/schedule", json=batch_body(prompts=n, n=1, workers=1)).json()["schedule_id"]
    delivery = Delivery(redis_client)
    logprobs = [-0.125] * (extra_bytes // 7)  # "-0.125," per entry
    for lease in delivery.claim(sid, "w0", max_items=n):
        delivery.complete(lease, finished_with(output="x", extra={"logprobs": logprobs}))
    return sid


def test_a_page_is_bounded_by_bytes_too_and_paging_by_next_still_reads_each_result_once(
    client: TestClient, redis_client: redis.Redis
) -> None:
    sid = _completed_with_extras(client, redis_client, n=9, extra_bytes=100_000)
    keys: list[str] = []
    sizes: list[int] = []
    after = "0-0"
    while True:
        answer = client.get(f"/schedule/{sid}/results", params={"after": after, "max_bytes": 250_000})
        page = answer.json()
        if not page["results"]:
            break
        sizes.append(len(page["results"]))
        assert len(answer.content) < 300_000
        keys += [r["key"] for r in page["results"]]
        after = page["next"]
    assert sizes == [2, 2, 2, 2, 1]
    assert sorted(keys) == [f"p{i}#0" for i in range(9)]


def test_a_result_larger_than_max_bytes_is_served_alone_so_the_cursor_moves_on(
    client: TestClient, redis_client: redis.Redis
) -> None:
    sid = _completed_with_extras(client, redis_client, n=2, extra_bytes=50_000)
    first = client.get(f"/schedule/{sid}/results", params={"max_bytes": 1}).json()
    second = client.get(f"/schedule/{sid}/results", params={"max_bytes": 1, "after": first["next"]}).json()
    assert [len(first["results"]), len(second["results"])] == [1, 1]
    assert first["results"][0]["key"] != second["results"][0]["key"]


def test_by_default_a_page_holds_about_8_mib_of_results_however_many_count_allows(
    client: TestClient, redis_client: redis.Redis
) -> None:
    sid = _completed_with_extras(client, redis_client, n=50, extra_bytes=200_000)  # ~10 MB stored
    answer = client.get(f"/schedule/{sid}/results", params={"count": 1000})
    assert len(answer.json()["results"]) == 41  # 41 x ~200 KB fit 8 MiB, of the 50 that count allows
    assert len(answer.content) <= 8 * 1024 * 1024 + 100_000
