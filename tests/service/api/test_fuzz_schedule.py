"""A ``POST /schedule`` body broken for sure is refused 4xx as a problem naming what broke, and Redis
keeps every key, value and expiry it had.

``test_fuzz_bodies`` allows a 200 (its odd values may be valid); the bodies here each break one of
docs/api.md's rules (``mutations.SCHEDULE``), so the answer must be a refusal, never a plan nor a
5xx, and its ``field`` must be the broken one: a client fixes its request from that field alone. The
wire-level breaks (not JSON, not UTF-8, too deep, a form, gzipped) must name ``body`` or the header.
"""

from __future__ import annotations

import pytest
import redis
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings

from tests.service.api.badinput import JSON_HEADERS, refused_unchanged
from tests.service.api.body_rules import SCHEDULE, valid_schedule
from tests.service.api.mutations import Broken, Raw, as_json, broken, raw_bodies, refuses_naming_the_break
from tests.service.api_helpers import actual_history, batch_body
from tests.service.fuzz_runs import runs

EXAMPLES = settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.fixture
def served(client: TestClient, redis_client: redis.Redis) -> TestClient:
    """The app with state to keep intact: a published step and a stored history."""
    assert client.post("/schedule", json=batch_body()).status_code == 200
    assert (
        client.post("/actuals", json={"actuals": actual_history(steps=1, prompts=2, n=2)}).status_code == 200
    )
    return client


def test_the_valid_body_the_breaks_start_from_is_planned(served: TestClient) -> None:
    """Each break is of a body that is valid whole, so each refusal below is the break's."""
    assert (
        served.post("/schedule", content=as_json(valid_schedule()), headers=JSON_HEADERS).status_code == 200
    )


@pytest.mark.parametrize("examples", runs(60, 400))
def test_a_body_with_one_rule_broken_is_refused_naming_that_field(
    served: TestClient, redis_client: redis.Redis, examples: settings
) -> None:
    @examples
    @given(broken(valid_schedule(), SCHEDULE))
    def answered(broke: Broken) -> None:
        refuses_naming_the_break(served, redis_client, "/schedule", broke)

    answered()


def test_bytes_that_never_reach_the_schema_are_refused_naming_the_body_or_header(
    served: TestClient, redis_client: redis.Redis
) -> None:
    @EXAMPLES
    @given(raw_bodies(valid_schedule()))
    def answered(raw: Raw) -> None:
        problem = refused_unchanged(served, redis_client, "POST", "/schedule", raw.content, raw.headers)
        assert problem.get("field") == raw.field, problem

    answered()
