"""A service without tokens answers only to loopback names in ``Host``: DNS rebinding.

A web page in the browser of a developer running ``make run`` can re-point its own name at
127.0.0.1 and then send requests to the service as same-origin; its ``Host`` still names the page's
name, which the service refuses (421, a problem from its one table) before any route runs.
"""

from __future__ import annotations

import httpx
import pytest
import redis
from fastapi.testclient import TestClient
from pydantic import ValidationError

from service.settings import Settings
from tests.service.api_helpers import AppFactory, LiveServer, batch_body

REBOUND = "rebound.attacker.example:8000"


def test_a_service_without_tokens_refuses_a_rebound_name_with_a_421_problem_and_plans_nothing(
    client: TestClient, redis_client: redis.Redis
) -> None:
    before = set(redis_client.scan_iter())
    answer = client.post("/schedule", json=batch_body(), headers={"Host": REBOUND})
    assert answer.status_code == 421
    assert answer.headers["content-type"] == "application/problem+json"
    problem = answer.json()
    assert problem["type"] == "https://rollout-scheduler.dev/problems/host-not-allowed"
    assert (problem["title"], problem["field"], problem["value"]) == ("Misdirected Request", "Host", REBOUND)
    assert "ROLLOUT_ALLOWED_HOSTS" in problem["detail"]
    assert problem["instance"] == "/schedule"
    assert set(redis_client.scan_iter()) == before  # nothing published


def test_a_refusal_quotes_a_long_host_cut_to_its_first_hundred_characters(client: TestClient) -> None:
    """The Host is the caller's: a page could send any length, and the problem echoes it."""
    sent = "rebound." + "a" * 1_000 + ".example"
    detail = client.get("/healthz", headers={"Host": sent}).json()["detail"]
    assert detail.startswith(f"Host {sent[:100]!r} is not a name of this server")


@pytest.mark.parametrize("host", ["localhost:8000", "LocalHost", "127.0.0.1:1", "[::1]:8000", "localhost."])
def test_a_service_without_tokens_answers_to_loopback_names_on_any_port(
    client: TestClient, host: str
) -> None:
    assert client.get("/healthz", headers={"Host": host}).status_code == 200


def test_a_service_without_tokens_answers_to_the_names_its_operator_allowed(make_client: AppFactory) -> None:
    allowed = make_client(allowed_hosts="scheduler.internal, Dev-Box")
    assert allowed.get("/healthz", headers={"Host": "scheduler.internal:8000"}).status_code == 200
    assert allowed.get("/healthz", headers={"Host": "dev-box"}).status_code == 200
    assert allowed.get("/healthz", headers={"Host": REBOUND}).status_code == 421


def test_a_service_with_tokens_answers_any_host_since_a_rebound_page_has_no_token(
    secured: TestClient,
) -> None:
    assert secured.get("/healthz", headers={"Host": REBOUND}).status_code == 200


@pytest.mark.parametrize("entry", ["*.example.com", "dev-box:8000", "http://dev-box"])
def test_an_allowed_host_that_no_host_header_could_name_is_refused_at_start(entry: str) -> None:
    with pytest.raises(ValidationError, match="no host name"):
        Settings(allowed_hosts=f"dev-box,{entry}")


def test_a_served_service_without_tokens_refuses_a_rebound_name_on_the_wire(live_settings: Settings) -> None:
    with LiveServer(live_settings) as server:
        rebound = httpx.get(f"{server.url}/healthz", headers={"Host": REBOUND}, timeout=5)
        direct = httpx.get(f"{server.url}/healthz", timeout=5)  # Host: 127.0.0.1:<port>
    assert (rebound.status_code, direct.status_code) == (421, 200)
