"""A 422 names the value at fault, and a huge one by its start and its size rather than whole."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
import redis
from fastapi.testclient import TestClient
from starlette.requests import Request

from scheduler.errors import InvalidInputError
from service.problems.details import ECHO_DIGITS, ECHO_HEAD, MAX_ECHO, PATH_HEAD, PATH_TAIL, field_path
from service.problems.table import handle
from tests.service.api_helpers import actual_history, batch_body


@pytest.fixture
def client(module_app: TestClient, redis_client: redis.Redis) -> TestClient:
    """The module's one app (``module_app``), on a Redis flushed for the test:
    a refusal is the body's."""
    return module_app


_JSON = {"Content-Type": "application/json"}
HUGE = 10**4000  # Python's JSON reads up to 4,300 digits


@pytest.mark.parametrize(
    ("field", "where", "number"),
    [
        ("batch.items[0].n", ("batch", "items", 0, "n"), HUGE),
        ("batch.items[1].prompt_tokens", ("batch", "items", 1, "prompt_tokens"), -7 * HUGE),
        ("step", ("step",), HUGE + 12345),
    ],
    ids=["a count", "a negative count", "a step"],
)
def test_a_huge_number_is_named_by_its_first_digits_and_its_length(
    field: str, where: tuple[str | int, ...], number: int, client: TestClient
) -> None:
    body = batch_body()
    node: Any = body
    for part in where[:-1]:
        node = node[part]
    node[where[-1]] = number
    response = client.post("/schedule", content=json.dumps(body), headers=_JSON)
    digits = str(abs(number))
    sign = "-" if number < 0 else ""
    problem = response.json()
    assert (response.status_code, problem["field"]) == (422, field)
    assert problem["value"] == f"{sign}{digits[:ECHO_DIGITS]}... ({len(digits)} digits)"
    assert digits[: 2 * ECHO_DIGITS] not in response.text  # nor in detail or errors[]
    assert all("input" not in error for error in problem["errors"])


def test_a_number_a_field_can_hold_is_echoed_whole(client: TestClient) -> None:
    body = batch_body(seed=2**64)  # 20 digits: past the seed's bound, not past an echo
    problem = client.post("/schedule", json=body).json()
    assert (problem["field"], problem["value"]) == ("seed", 2**64)


def test_a_long_text_is_named_by_its_start_and_its_length(client: TestClient) -> None:
    text = "q" * ECHO_HEAD + "r" * 100_000
    body = batch_body()
    body["batch"]["items"][2]["prompt_id"] = text
    response = client.post("/schedule", json=body)
    problem = response.json()
    assert (response.status_code, problem["field"]) == (422, "batch.items[2].prompt_id")
    assert problem["value"] == f"{'q' * ECHO_HEAD}... ({len(text)} characters)"
    assert "r" * 100 not in response.text


@pytest.mark.parametrize(
    ("url", "where", "prefix"),
    [
        ("/schedule", (), ""),
        ("/schedule", ("batch", "items", 0, "features"), "batch.items[0].features."),
        ("/actuals", (), ""),
    ],
    ids=["an unknown field", "a feature name", "an unknown field of a batch"],
)
def test_a_long_name_at_fault_is_named_by_its_start_and_its_length(
    url: str, where: tuple[str | int, ...], prefix: str, client: TestClient
) -> None:
    """Found by ``tests/service/api/test_fuzz_schedule.py``: the name of an unknown field (or of a
    feature, past its 64 characters) is the caller's text too, and a megabyte of it was sent back
    whole three times (``field``, ``detail``, ``errors[]``): a 3 MB 422, and as much in the log."""
    name = "q" * ECHO_HEAD + "r" * 1_000_000
    body: dict[str, Any] = batch_body() if url == "/schedule" else {"actuals": actual_history(1, 1, 1)}
    node: Any = body
    for part in where:
        node = node.setdefault(part, {}) if isinstance(node, dict) else node[part]
    node[name] = 1.0
    response = client.post(url, json=body)
    problem = response.json()
    assert (response.status_code, problem["field"]) == (
        422,
        f"{prefix}{'q' * ECHO_HEAD}... (1000032 characters)",
    )
    assert "r" * 100 not in response.text
    assert len(response.content) < 4_000


def _nested(depth: int) -> Any:
    """A JSON object ``depth`` levels deep: ``{"a": {"a": ... 1}}``."""
    node: Any = 1
    for _ in range(depth):
        node = {"a": node}
    return node


def test_a_field_nested_past_the_validation_depth_is_named_by_its_start_and_its_end(
    client: TestClient,
) -> None:
    """Found by apifuzz (round 44): ``sampling.extra`` takes JSON nested to pydantic's validation
    depth, and one deeper is refused where it ends, hundreds of location parts down; the whole path
    was its ``field``, 1.8 KB, and in ``detail`` and ``errors[]`` too: a 3.7 KB 422."""
    response = client.post("/schedule", json=batch_body(sampling={"extra": _nested(300)}))
    problem = response.json()
    assert response.status_code == 422
    assert problem["field"].startswith("sampling.extra.a.")
    assert "..." in problem["field"]
    assert len(problem["field"]) <= MAX_ECHO
    assert problem["detail"] == f"{problem['field']}: Recursion error - maximum validation depth exceeded"
    assert len(response.content) < 4 * MAX_ECHO


def test_a_long_field_path_keeps_its_first_parts_and_its_last() -> None:
    names = [f"level{k:02d}_{'x' * 20}" for k in range(20)]
    path = field_path(("body", "batch", "items", 3, *names))
    kept = ["batch", "items[3]", *names[: PATH_HEAD - 3]]
    assert path == f"{'.'.join(kept)}...{'.'.join(names[-PATH_TAIL:])} ({len(names) + 3} parts)"


def test_a_path_up_to_the_echo_limit_is_named_whole() -> None:
    names = ["x" * 40] * 6  # 245 characters with its dots
    assert field_path(("body", *names)) == ".".join(names)


def test_a_text_up_to_the_echo_limit_is_echoed_whole(client: TestClient) -> None:
    body = batch_body(policy="x" * MAX_ECHO)  # a policy name is at most 64 characters
    problem = client.post("/schedule", json=body).json()
    assert (problem["field"], problem["value"]) == ("policy", "x" * MAX_ECHO)


def test_a_domain_error_with_a_huge_value_names_it_short_in_value_and_detail() -> None:
    scope = {"type": "http", "method": "POST", "path": "/schedule", "headers": [], "query_string": b""}
    error = InvalidInputError("seed", HUGE, "must be an integer <= 9")
    response = asyncio.run(handle(Request(scope), error))
    problem = json.loads(bytes(response.body))
    short = f"{str(HUGE)[:ECHO_DIGITS]}... ({len(str(HUGE))} digits)"
    assert (problem["field"], problem["value"]) == ("seed", short)
    assert problem["detail"] == f"seed={short}: must be an integer <= 9"


def test_a_redis_error_the_table_does_not_list_is_an_opaque_500_not_an_outage() -> None:
    """Only the listed Redis errors are 503s that say Redis is down; a refused command is a defect."""
    scope = {"type": "http", "method": "POST", "path": "/schedule", "headers": [], "query_string": b""}
    error = redis.ResponseError("WRONGTYPE Operation against a key holding the wrong kind of value")
    response = asyncio.run(handle(Request(scope), error))
    assert response.status_code == 500
    assert json.loads(bytes(response.body))["detail"] == "an unexpected error occurred; see the service log"
    assert "retry-after" not in response.headers
