"""The answer stored for a retry under a caller-chosen ``schedule_id``
(``service/pipeline/republish.py``): the cases where there is none to replay keep their documented
answers, on a real Redis."""

from __future__ import annotations

import base64
import json
import zlib

import redis
from fastapi.testclient import TestClient

from service.api.schemas import ScheduleResponse
from service.delivery import Delivery
from service.pipeline.republish import ANSWER_FORMAT, decode_answer, encode_answer
from tests.service.api_helpers import batch_body

INBOXES = ["rs:active", "rs:inbox:{w0}", "rs:inbox:{w1}"]


def _lose_the_announce(redis_client: redis.Redis, schedule_id: str) -> None:
    for index in INBOXES:  # what a timeout between the publish script and its announce leaves
        redis_client.zrem(index, schedule_id)


def test_a_step_published_without_an_answer_is_a_409_to_follow_and_is_announced_again(
    client: TestClient, redis_client: redis.Redis
) -> None:
    """As an older release stored it (a mixed-version roll): there is no plan to send again."""
    assert client.post("/schedule", json=batch_body(schedule_id="old-step")).status_code == 200
    redis_client.delete("rs:{old-step}:answer")
    _lose_the_announce(redis_client, "old-step")
    retry = client.post("/schedule", json=batch_body(schedule_id="old-step"))
    assert (retry.status_code, retry.json()["field"]) == (409, "schedule_id")
    assert "follow it" in retry.json()["detail"]
    assert all(redis_client.zscore(index, "old-step") is not None for index in INBOXES)


def test_an_answer_in_a_format_this_release_cannot_read_is_a_409_not_a_500(
    client: TestClient, redis_client: redis.Redis
) -> None:
    """A later release may store its answers otherwise; a rollback must still answer its retries."""
    assert client.post("/schedule", json=batch_body(schedule_id="new-step")).status_code == 200
    for stored in ("z2:AAAA", "z1:not base64!", "z1:" + "QUFBQQ=="):  # another format; damaged; no zlib
        redis_client.set("rs:{new-step}:answer", stored, keepttl=True)
        retry = client.post("/schedule", json=batch_body(schedule_id="new-step"))
        assert (retry.status_code, retry.json()["field"]) == (409, "schedule_id")


def test_a_step_whose_retention_passed_is_planned_and_published_anew_under_its_id(
    client: TestClient, redis_client: redis.Redis
) -> None:
    first = client.post("/schedule", json=batch_body(schedule_id="late-step"))
    for key in redis_client.scan_iter("rs:{late-step}:*"):  # every key expires at once
        redis_client.delete(key)
    again = client.post("/schedule", json=batch_body(schedule_id="late-step", seed=3))
    assert (again.status_code, again.json()["replayed"]) == (200, False)
    assert again.json()["timings"]["plan_ms"] > 0 < first.json()["timings"]["plan_ms"]
    assert Delivery(redis_client).stored_request("late-step") is not None


def test_an_encoded_answer_decodes_to_the_same_answer_marked_replayed(client: TestClient) -> None:
    answer = ScheduleResponse.model_validate_json(
        client.post("/schedule", json=batch_body(prompts=3, n=2, publish=False)).content
    )
    replayed = decode_answer(encode_answer(answer))
    assert replayed is not None
    assert (replayed.replayed, answer.replayed) == (True, False)
    mine = {"timings", "replayed"}
    assert replayed.model_dump(exclude=mine) == answer.model_dump(exclude=mine)


def test_a_replayed_answer_keeps_its_at_once_verdict_and_one_stored_before_it_existed_says_null(
    client: TestClient,
) -> None:
    """A retry gets the verdict of the plan it replays; an answer stored by a release before
    ``at_once_hedge`` (a mixed-version roll) has none to tell, so it says null, not "kept"."""
    posted = client.post("/schedule", json=batch_body(prompts=3, n=2, publish=False)).content
    answer = ScheduleResponse.model_validate_json(posted).model_copy(update={"at_once_hedge": "fastest"})
    stored = encode_answer(answer)
    replayed = decode_answer(stored)
    assert replayed is not None
    assert replayed.at_once_hedge == "fastest"
    doc = json.loads(zlib.decompress(base64.b64decode(stored[len(ANSWER_FORMAT) :])))
    del doc["at_once_hedge"]
    older = decode_answer(ANSWER_FORMAT + base64.b64encode(zlib.compress(json.dumps(doc).encode())).decode())
    assert older is not None
    assert older.at_once_hedge is None
