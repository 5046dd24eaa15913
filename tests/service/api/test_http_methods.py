"""How the service answers a method a path does not take, and a path spelled with a trailing slash:
problems from the one table, with the headers HTTP asks for (RFC 9110, 15.5.6: a 405 lists in
``Allow`` every method the resource takes)."""

from __future__ import annotations

import pytest
import redis
from fastapi.testclient import TestClient


@pytest.fixture
def client(module_app: TestClient, redis_client: redis.Redis) -> TestClient:
    """The module's one app (``module_app``), on a Redis flushed for the test: each answer is the routing's,
    from the method and the path alone."""
    return module_app


@pytest.mark.parametrize(
    ("method", "path", "allowed"),
    [
        ("PUT", "/schedule/s1", {"GET", "DELETE"}),  # two routes on one path: both methods
        ("POST", "/schedule/s1", {"GET", "DELETE"}),
        ("OPTIONS", "/healthz", {"GET", "HEAD"}),  # the probes' GET and HEAD are routes of their own
        ("POST", "/readyz", {"GET", "HEAD"}),
        ("DELETE", "/metrics", {"GET", "HEAD"}),
        ("GET", "/schedule", {"POST"}),
    ],
)
def test_a_405_lists_every_method_of_the_path_in_allow(
    method: str, path: str, allowed: set[str], client: TestClient
) -> None:
    response = client.request(method, path)
    assert response.status_code == 405
    assert response.headers["content-type"] == "application/problem+json"
    assert set(response.headers["allow"].split(", ")) == allowed
    assert "trailing slash" not in response.json()["detail"]  # the path is the route's own


@pytest.mark.parametrize(
    ("method", "path"),
    [("POST", "/schedule/"), ("GET", "/schedule/s1/"), ("GET", "/healthz/"), ("GET", "/models/")],
)
def test_a_trailing_slash_is_a_404_problem_naming_the_path_without_it_not_a_redirect(
    method: str, path: str, secured: TestClient
) -> None:
    """Starlette answered a 307 whose ``Location`` was built from the ``Host`` header and the scheme
    the service saw: behind a TLS proxy, ``http://``, where a client following it sends the batch
    (and a token it trusts the host with) in clear; the answer was no problem either (no body). A
    service with tokens, as behind a proxy: one without answers a name not its own with 421."""
    response = secured.request(method, path, headers={"Host": "sched.example"}, follow_redirects=False)

    assert response.status_code == 404
    assert response.headers["content-type"] == "application/problem+json"
    assert "location" not in response.headers
    assert response.json()["detail"].endswith(f"; the path takes no trailing slash: {path.rstrip('/')}")


def test_an_unknown_path_is_a_404_without_a_slash_hint(client: TestClient) -> None:
    assert client.get("/nowhere/").json()["detail"] == "GET /nowhere/: Not Found"
