"""Bodies one field away from valid: a 200, or a 4xx problem naming the field that changes nothing.

``test_bad_input_fields`` names one hand-picked bad field per case; these draw the field and its new value:
any element of a valid ``/schedule`` or ``/actuals`` body (nested ones included) is set to an odd
value of any type, deleted, duplicated or grown to a long array or string, or a known field is added
where it may not belong. Whatever the answer, it is never a 5xx, and a 4xx other than a 409 (which
announces the stored schedule again, ``service.pipeline.republish``) leaves Redis exactly as it was.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import redis
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.service.api.badinput import redis_snapshot
from tests.service.api_helpers import actual_history, batch_body

BODIES = settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
ODD: st.SearchStrategy[Any] = st.sampled_from(
    [None, True, 0, -1, 2**31, 2**63, 10**30, 0.5, 5e-324, 1e308, -1e308, "", "é\u202e", "\ud800", "0",
     [], {}, [[[[]]]], {"a": 1}, "x" * 300, "w0", "p1", "H100", "lpt"]
)  # fmt: skip
KNOWN_FIELDS = ("n", "prompt", "pinned_worker", "features", "drain", "time_scale", "kv_capacity_tokens",
                "schedule_id", "quantile", "sampling", "wall_time_s", "concurrency",
                "max_new_tokens")  # fmt: skip
Path = tuple[str | int, ...]


def _paths(node: Any, prefix: Path = ()) -> list[Path]:
    """Every element's path below ``node`` (dict keys and list indices)."""
    members = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    return [path for key, child in members for path in ((*prefix, key), *_paths(child, (*prefix, key)))]


@st.composite
def one_field_off(draw: st.DrawFn, valid: dict[str, Any]) -> str:
    """``valid`` with one element changed, as JSON text."""
    body = copy.deepcopy(valid)
    *parents, last = draw(st.sampled_from(_paths(body)))
    node: Any = body
    for part in parents:
        node = node[part]
    operation = draw(st.sampled_from(("set", "set", "delete", "add", "grow")))
    if operation == "set":
        node[last] = draw(ODD)
    elif operation == "delete":
        del node[last]
    elif operation == "add" and isinstance(node[last], dict):
        node[last][draw(st.sampled_from(KNOWN_FIELDS))] = draw(ODD)
    elif operation == "grow":
        node[last] = [copy.deepcopy(node[last])] * draw(st.sampled_from((2, 4_097)))
    return json.dumps(body)


def _assert_answered(client: TestClient, store: redis.Redis, url: str, raw: str) -> dict[str, Any]:
    before = redis_snapshot(store)
    response = client.post(url, content=raw, headers={"Content-Type": "application/json"})
    assert response.status_code < 500, response.text
    answer: dict[str, Any] = response.json()
    if response.status_code >= 400:
        assert response.headers["content-type"] == "application/problem+json"
        assert response.status_code != 422 or answer["field"], answer
        if response.status_code != 409:
            assert redis_snapshot(store) == before, answer
    return answer if response.status_code == 200 else {}


def test_a_schedule_body_one_field_off_is_planned_or_refused_naming_it(
    client: TestClient, redis_client: redis.Redis
) -> None:
    valid = batch_body(prompts=3, n=2, sampling={"temperature": 1.0, "extra": {"logprobs": 1}}, model="7b")
    client.post("/schedule", json=batch_body())  # some state to keep intact

    @BODIES
    @given(one_field_off(valid))
    def answered(raw: str) -> None:
        plan = _assert_answered(client, redis_client, "/schedule", raw)
        if plan:  # accepted: each trajectory it asked for is in one queue
            asked = json.loads(raw)["batch"]["items"]
            want = sorted(f"{item['prompt_id']}#{k}" for item in asked for k in range(item.get("n", 1)))
            got = [
                f"{a['prompt_id']}#{a['sample_idx']}" for queue in plan["assignments"].values() for a in queue
            ]
            assert sorted(got) == want

    answered()


def test_an_actuals_body_one_field_off_is_stored_or_refused_naming_it(
    client: TestClient, redis_client: redis.Redis
) -> None:
    reports = actual_history(steps=1, prompts=2, n=2)
    reports[0]["schedule_id"], reports[1]["features"] = "s1", {"difficulty": 0.5, "topic": "t"}
    client.post("/actuals", json={"actuals": actual_history(steps=1, prompts=1, n=1)})  # state to keep

    @BODIES
    @given(one_field_off({"actuals": reports}))
    def answered(raw: str) -> None:
        _assert_answered(client, redis_client, "/actuals", raw)

    answered()
