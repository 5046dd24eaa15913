"""``serve --redis-cluster`` waits for a cluster that is not up yet, and goes on once it is.

A cluster client reads the slot map when it is built, so unlike the single-node client it cannot be
made while the cluster is down; ``wait_for_cluster`` is what stands between that and a traceback.
"""

from __future__ import annotations

import logging
import threading
import time

import pytest
import redis

from service.embedded import EmbeddedServer
from service.ports import free_port
from service.redis_conn import RedisRefusedError, wait_for_cluster
from service.settings import Settings
from tests.cluster import SLOTS, _cluster_args


def _one_node_cluster(port: int, password: str | None = None) -> EmbeddedServer:
    """A cluster of one master holding every slot (``valkey-cli --cluster create`` wants three)."""
    node = EmbeddedServer(port=port, extra_args=_cluster_args(free_port())).start()
    with redis.Redis(port=port, decode_responses=True) as client:
        client.execute_command("CLUSTER", "ADDSLOTSRANGE", 0, SLOTS - 1)
        if password:
            client.config_set("requirepass", password)
    return node


def test_a_single_node_url_is_not_waited_for_even_when_nothing_listens() -> None:
    settings = Settings(redis_url=f"redis://127.0.0.1:{free_port()}/0")
    wait_for_cluster(settings, sleep=lambda _: pytest.fail("a single node must not be waited for"))


def test_serve_waits_for_an_unreachable_cluster_and_returns_once_it_answers(
    caplog: pytest.LogCaptureFixture,
) -> None:
    port = free_port()
    settings = Settings(redis_url=f"redis://127.0.0.1:{port}/0", redis_cluster=True, redis_timeout_s=0.2)
    waiter = threading.Thread(target=wait_for_cluster, args=(settings, 0.1), daemon=True)
    with caplog.at_level(logging.WARNING, logger="service.redis"):
        waiter.start()
        time.sleep(1.0)
        assert waiter.is_alive(), "returned while no cluster was listening"
        assert f"Redis Cluster at redis://127.0.0.1:{port}/0 unreachable" in caplog.text
        node = _one_node_cluster(port)
        try:
            waiter.join(timeout=15)
            assert not waiter.is_alive(), "kept waiting after the cluster came up"
        finally:
            node.stop()


def test_a_cluster_that_refuses_the_password_stops_the_wait_with_a_clear_error() -> None:
    """Waiting cannot fix credentials: serve and the sidecar say so in one line instead."""
    port = free_port()
    node = _one_node_cluster(port, password="s3cret")
    try:
        settings = Settings(redis_url=f"redis://:wrong@127.0.0.1:{port}/0", redis_cluster=True)
        with pytest.raises(RedisRefusedError, match="refused our credentials") as refused:
            wait_for_cluster(settings, sleep=lambda _: pytest.fail("waited for a refusal"))
        assert "wrong" not in str(refused.value)  # the password is not echoed
    finally:
        node.stop()
