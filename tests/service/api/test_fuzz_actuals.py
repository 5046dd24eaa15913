"""A ``POST /actuals`` batch broken for sure is refused whole, 4xx, as a problem naming the report's
field at fault, and Redis keeps every key, value and expiry it had: not one report of the batch is
stored, the valid one beside the broken one included: docs/api.md's rule that a rejected request
changes no state. The trainer and the workers both call it; ``test_fuzz_bodies`` allows a 200, these
do not.
"""

from __future__ import annotations

import pytest
import redis
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings

from tests.service.api.badinput import JSON_HEADERS, refused_unchanged
from tests.service.api.body_rules import ACTUALS, valid_actuals
from tests.service.api.mutations import Broken, Raw, as_json, broken, raw_bodies, refuses_naming_the_break
from tests.service.api_helpers import actual_history, batch_body
from tests.service.fuzz_runs import runs

EXAMPLES = settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.fixture
def served(client: TestClient, redis_client: redis.Redis) -> TestClient:
    """The app with state to keep intact: a published step, a stored history and the valid batch."""
    assert client.post("/schedule", json=batch_body()).status_code == 200
    assert (
        client.post("/actuals", json={"actuals": actual_history(steps=1, prompts=2, n=2)}).status_code == 200
    )
    stored = client.post("/actuals", content=as_json(valid_actuals()), headers=JSON_HEADERS)
    assert (stored.status_code, stored.json()["accepted"]) == (
        200,
        2,
    )  # valid whole: a refusal is the break's
    return client


@pytest.mark.parametrize("examples", runs(60, 400))
def test_a_batch_with_one_rule_broken_is_refused_whole_naming_that_field(
    served: TestClient, redis_client: redis.Redis, examples: settings
) -> None:
    @examples
    @given(broken(valid_actuals(), ACTUALS))
    def answered(broke: Broken) -> None:
        refuses_naming_the_break(served, redis_client, "/actuals", broke)

    answered()


def test_bytes_that_never_reach_the_batch_schema_are_refused_naming_the_body_or_header(
    served: TestClient, redis_client: redis.Redis
) -> None:
    @EXAMPLES
    @given(raw_bodies(valid_actuals()))
    def answered(raw: Raw) -> None:
        problem = refused_unchanged(served, redis_client, "POST", "/actuals", raw.content, raw.headers)
        assert problem.get("field") == raw.field, problem

    answered()
