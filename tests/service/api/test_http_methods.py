"""How the service answers a method a path does not take, and a path spelled with a trailing slash:
problems from the one table, with the headers HTTP asks for (RFC 9110, 15.5.6: a 405 lists in
``Allow`` every method the resource takes)."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient


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
