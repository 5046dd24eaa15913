"""Requests past the service's limits (trajectories, body bytes, long-poll threads): refused or queued
before they cost memory or threads, and Redis left exactly as it was."""

from __future__ import annotations

import socket
import threading

import pytest
import redis
from fastapi.testclient import TestClient

from service.settings import Settings
from tests.service.api.badinput import redis_snapshot
from tests.service.api_helpers import AppFactory, LiveServer, batch_body, with_settings


def test_more_trajectories_than_the_limit_is_a_413_and_changes_nothing(
    make_client: AppFactory, redis_client: redis.Redis
) -> None:
    client = make_client(max_trajectories=31)
    before = redis_snapshot(redis_client)
    response = client.post("/schedule", json=batch_body(prompts=8, n=4))
    assert response.status_code == 413
    assert response.json()["field"] == "batch.items"
    assert "32" in response.json()["detail"]
    assert redis_snapshot(redis_client) == before


def test_a_body_over_the_limit_is_a_413_problem(make_client: AppFactory, redis_client: redis.Redis) -> None:
    client = make_client(max_body_bytes=2_000)
    before = redis_snapshot(redis_client)
    response = client.post("/schedule", json=batch_body(prompts=64))
    assert response.status_code == 413
    assert response.headers["content-type"] == "application/problem+json"
    assert "ROLLOUT_MAX_BODY_BYTES" in response.json()["detail"]  # says which setting to change
    assert redis_snapshot(redis_client) == before
    assert 'route="/schedule",status="413"' in client.get("/metrics").text  # named, though unrouted


def test_a_declared_huge_body_is_refused_before_it_is_sent(live_settings: Settings) -> None:
    settings = with_settings(live_settings, max_body_bytes=10_000)
    with LiveServer(settings) as server, socket.create_connection(("127.0.0.1", server.port), 5) as sock:
        sock.sendall(
            b"POST /schedule HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b'Content-Length: 1000000000\r\n\r\n{"batch":'
        )
        sock.settimeout(5)
        reply = sock.recv(65536).decode()  # answered although 999,999,991 bytes never came
    assert reply.startswith("HTTP/1.1 413")
    assert "application/problem+json" in reply


@pytest.mark.parametrize(
    "declared",
    [b"", b"Content-Length: 5\r\n"],
    ids=["chunked", "chunked-with-a-small-content-length-too"],
)
def test_a_chunked_body_is_cut_off_at_the_limit(live_settings: Settings, declared: bytes) -> None:
    """With both headers the server reads the chunks (Transfer-Encoding wins, RFC 9112 6.3): trusting
    the small Content-Length, the limit let a 12 KiB body (any size) through to be read and parsed."""
    settings = with_settings(live_settings, max_body_bytes=10_000)
    with LiveServer(settings) as server, socket.create_connection(("127.0.0.1", server.port), 5) as sock:
        sock.sendall(
            b"POST /schedule HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            + declared
            + b"Transfer-Encoding: chunked\r\n\r\n"
        )
        chunk = b"x" * 4096
        for _ in range(3):  # 12 KiB: over the limit; the stream is never terminated
            sock.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        sock.settimeout(5)
        reply = sock.recv(65536).decode()
    assert reply.startswith("HTTP/1.1 413")


def test_a_chunked_upload_without_a_token_is_refused_before_its_body_is_read(live_settings: Settings) -> None:
    """Reading ahead to the limit before the token check let 60 stalled uploads hold 2 GB."""
    settings = with_settings(live_settings, max_body_bytes=10_000_000, trainer_tokens="t0ken")
    with LiveServer(settings) as server, socket.create_connection(("127.0.0.1", server.port), 5) as sock:
        sock.sendall(
            b"POST /actuals HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n1000\r\n" + b"x" * 4096 + b"\r\n"
        )  # far below the limit, and the stream is never terminated
        sock.settimeout(5)
        reply = sock.recv(65536).decode()
    assert reply.startswith("HTTP/1.1 401")


def test_waiting_results_requests_have_threads_of_their_own(client: TestClient) -> None:
    """A flood of 30 s long-polls must not take every worker thread from /readyz and planning."""
    sid = client.post("/schedule", json=batch_body()).json()["schedule_id"]
    limiter = client.app.state.context.long_polls  # type: ignore[attr-defined]
    holders = [object() for _ in range(int(limiter.total_tokens))]
    for holder in holders:
        client.portal.call(limiter.acquire_on_behalf_of, holder)  # type: ignore[union-attr]
    try:
        assert client.get("/readyz").status_code == 200  # while every long-poll thread is taken
        answered: list[int] = []
        poll = threading.Thread(
            target=lambda: answered.append(client.get(f"/schedule/{sid}/results").status_code)
        )
        poll.start()
        poll.join(timeout=1.0)
        assert answered == []  # a results request queues for a long-poll thread
    finally:
        for holder in holders:
            client.portal.call(limiter.release_on_behalf_of, holder)  # type: ignore[union-attr]
    poll.join(timeout=5.0)
    assert answered == [200]
