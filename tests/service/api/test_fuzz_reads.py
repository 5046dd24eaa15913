"""What a trainer reads and cancels by id, fuzzed: ``GET /schedule/{id}/results`` with queries out of
range is refused naming the parameter, with any query in range it pages through every result exactly
once, and an id the pattern refuses (``GET``/``DELETE /schedule/{id}``, ``.../results``) is a 422
naming ``schedule_id``, one it takes but no step has a 404. None of them writes to Redis, a
``DELETE``'s 404 neither (an id in flight is withdrawn, 202: ``test_withdraw.py``).
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import quote

import pytest
import redis
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from service.delivery import Delivery
from tests.service.api.badinput import redis_snapshot, refused_unchanged
from tests.service.api_helpers import batch_body
from tests.service.finished import finished_with
from tests.text_alphabet import UTF8

EXAMPLES = settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture])
ID = r"[A-Za-z0-9_.:-]{1,256}"  # docs/api.md: a schedule_id's characters and length
BAD_QUERIES = {
    "after": ["", "0", "-", "0-", "-0", "a-b", "1-2-3", "0-0 ", "\u0661-\u0660", "18446744073709551616-0",
              "0-18446744073709551616", "9" * 21 + "-0", "0x1-0", "+1-0"],
    "count": ["0", "-1", "10001", "x", "1.5", "1e3", "nan", "99999999999999999999999"],
    "wait_ms": ["-1", "30001", "x", "1.5", "inf"],
    "max_bytes": ["0", "-1", "67108865", "x", "2e6"],
}  # fmt: skip


@pytest.fixture
def finished(client: TestClient, redis_client: redis.Redis) -> tuple[str, list[str]]:
    """A published step of 12 trajectories, 10 of them completed with results of varied sizes."""
    sid = client.post("/schedule", json=batch_body(prompts=6, n=2, workers=1)).json()["schedule_id"]
    delivery = Delivery(redis_client)
    leases = delivery.claim(sid, "w0", max_items=10)
    for k, lease in enumerate(leases):
        delivery.complete(lease, finished_with(output="x" * (50 * k)))
    return sid, sorted(lease.key for lease in leases)


@st.composite
def bad_queries(draw: st.DrawFn) -> tuple[str, dict[str, str]]:
    """One query parameter out of its range or no number, beside the others in range."""
    name = draw(st.sampled_from(sorted(BAD_QUERIES)))
    return name, {"count": "5", name: draw(st.sampled_from(BAD_QUERIES[name]))}


def test_a_results_query_out_of_range_is_refused_naming_the_parameter(
    client: TestClient, redis_client: redis.Redis, finished: tuple[str, list[str]]
) -> None:
    sid, _ = finished

    @EXAMPLES
    @given(bad_queries())
    def answered(query: tuple[str, dict[str, str]]) -> None:
        name, params = query
        url = str(client.build_request("GET", f"/schedule/{sid}/results", params=params).url)
        problem = refused_unchanged(client, redis_client, "GET", url)
        assert (problem["status"], problem["field"]) == (422, name), problem

    answered()


def _pages(client: TestClient, sid: str, count: int, max_bytes: int) -> list[list[dict[str, Any]]]:
    pages: list[list[dict[str, Any]]] = []
    after = "0-0"
    while True:
        params: dict[str, str | int] = {"after": after, "count": count, "max_bytes": max_bytes}
        answer = client.get(f"/schedule/{sid}/results", params=params)
        assert answer.status_code == 200, answer.text
        page = answer.json()
        if not page["results"]:
            assert page["next"] == after
            return pages
        pages.append(page["results"])
        after = page["next"]


def test_any_page_size_in_range_reads_every_result_exactly_once(
    client: TestClient, redis_client: redis.Redis, finished: tuple[str, list[str]]
) -> None:
    sid, keys = finished
    before = redis_snapshot(redis_client)

    @EXAMPLES
    @given(st.integers(1, 10_000), st.integers(1, 2**26))
    def paged(count: int, max_bytes: int) -> None:
        pages = _pages(client, sid, count, max_bytes)
        assert sorted(r["key"] for page in pages for r in page) == keys
        assert all(len(page) <= count for page in pages)

    paged()
    assert redis_snapshot(redis_client) == before


ROUTES = [("GET", "/schedule/{}"), ("DELETE", "/schedule/{}"), ("GET", "/schedule/{}/results")]


def test_an_id_no_step_has_is_refused_by_every_route_and_writes_nothing(
    client: TestClient, redis_client: redis.Redis, finished: tuple[str, list[str]]
) -> None:
    """A well-formed id is 404 (unknown), any other 422 naming ``schedule_id``; an id quoted into
    the path may leave the route altogether (``""``, ``..``): then 404 or 405, still no write, a
    ``DELETE``'s 404 included (no request has the id in flight, so there is nothing to withdraw)."""

    ids = st.from_regex(f"^{ID}$", fullmatch=True, alphabet=UTF8) | st.text(UTF8, max_size=300)

    @EXAMPLES
    @given(st.sampled_from(ROUTES), ids)
    def answered(route: tuple[str, str], sid: str) -> None:
        method, path = route
        well_formed = re.fullmatch(ID, sid) is not None and sid not in (".", "..")
        problem = refused_unchanged(client, redis_client, method, path.format(quote(sid, safe="")))
        if well_formed:
            assert problem["status"] == 404, problem
        elif problem["status"] == 422:
            assert problem["field"] == "schedule_id", problem
        else:
            assert problem["status"] in (404, 405), problem

    answered()
